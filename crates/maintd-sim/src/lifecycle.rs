//! The EvictionRequest API (`lifecycle.k8s.io/v1alpha1`, alpha in
//! Kubernetes 1.37 behind the feature gate `EvictionRequestAPI`, KEP-4563),
//! served when [`SimConfig::eviction_requests`] is on: the EvictionRequest
//! a requester writes, the Eviction made of them, the Pod's
//! `spec.evictionResponders`, and their validation on admission, as
//! `k8s.io/api` v0.37.2 and kube-apiserver v1.37.2 define them.
//!
//! Kubernetes 1.37.2 ships no controller for this API: a request is
//! accepted, then nothing acts on it. The simulator does the same unless
//! [`SimConfig::eviction_request_controller`] is on, which runs the
//! evictionrequest-controller the types' comments describe (and later
//! releases are expected to ship) with the responders the simulator
//! plays: the imperative evictor and a slow live migration. That lets
//! tests of a requester see responders report progress and Evictions made,
//! which no released Kubernetes does yet.
//!
//! This file holds the types' names and what is served; `validation` the
//! admission checks, `pod` the Pod's part, `fields` the unknown fields the
//! API server drops, `controller`, `responders` and `status` the
//! behaviour.
//!
//! [`SimConfig::eviction_requests`]: crate::SimConfig::eviction_requests
//! [`SimConfig::eviction_request_controller`]: crate::SimConfig::eviction_request_controller

use std::sync::Arc;

use super::patch::{ListKind, ListSchema};
use super::resources::{Gr, ResourceDef};

mod controller;
mod fields;
mod pod;
mod responders;
mod status;
#[cfg(test)]
mod tests;
mod validation;

pub use controller::start;
pub use fields::{prune, strict};
pub use pod::{check_pod, drop_disabled};
pub use validation::{check, check_update, domain_prefixed_path};

/// The API group of KEP-4563.
pub const GROUP: &str = "lifecycle.k8s.io";
/// The version Kubernetes 1.37 serves.
pub const VERSION: &str = "v1alpha1";
/// The default responder every Eviction of a pod ends with: it calls the
/// Eviction API.
pub const IMPERATIVE_EVICTOR: &str = "imperative-eviction.k8s.io/evictor";
/// The imperative evictor's priority, fixed by validation.
pub const IMPERATIVE_EVICTOR_PRIORITY: i64 = 100;
/// A responder the simulator plays: a KubeVirt-like live migration that
/// takes its time, then deletes the migration source pod.
pub const LIVE_MIGRATION: &str = "live-migration.kubevirt.io/migrator";
/// The priority the API advises for the responder that is the pod's
/// managing controller (what KubeVirt would declare).
pub const MANAGING_CONTROLLER_PRIORITY: i64 = 10_000;
/// How many seconds the simulated live migration of a pod takes
/// (`SimConfig::live_migration` when absent or malformed).
pub const LIVE_MIGRATION_ANNOTATION: &str = "sim.maintd.io/live-migration-seconds";
/// The longest a responder may stay silent before it is interrupted.
pub const HEARTBEAT_DEADLINE_SECS: i64 = 20 * 60;
/// Responders a pod may declare (`MaxPodEvictionResponders`; the Eviction
/// has one more, the evictor).
pub const MAX_POD_RESPONDERS: usize = 10;

pub fn eviction_requests() -> Gr {
    Gr::new(GROUP, "evictionrequests")
}

pub fn evictions() -> Gr {
    Gr::new(GROUP, "evictions")
}

/// The two resources, registered only when the switch is on: a cluster
/// without the feature gate neither lists nor serves them.
pub fn resources() -> Vec<ResourceDef> {
    let def = |plural: &str, kind: &str| ResourceDef {
        group: GROUP.into(),
        versions: vec![VERSION.into()],
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced: true,
        status_subresource: true,
        short_names: vec![],
        categories: vec![],
        list_schema: Arc::new(
            ListSchema::builtin(GROUP, kind)
                .with(&["status", "conditions"], keyed("type"))
                .with(&["status", "requesters"], keyed("name"))
                .with(&["status", "targetResponders"], keyed("name"))
                .with(&["status", "responders"], keyed("name")),
        ),
        printer_columns: vec![],
        custom: false,
    };
    vec![
        def("evictionrequests", "EvictionRequest"),
        def("evictions", "Eviction"),
    ]
}

fn keyed(key: &str) -> ListKind {
    ListKind::Map(vec![key.to_string()])
}
