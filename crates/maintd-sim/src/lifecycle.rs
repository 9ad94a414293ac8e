//! KEP-4563's EvictionRequest API (`lifecycle.k8s.io/v1alpha1`, feature
//! gate `EvictionRequestAPI`), served when [`SimConfig::eviction_requests`]
//! is on: the EvictionRequest a requester writes, the Eviction the eviction
//! request controller makes of them, the controller itself, and the
//! responders the simulator plays (the imperative evictor and a slow live
//! migration). This file holds the types' names and their validation on
//! admission; `controller` and `responders` hold the behaviour.
//!
//! [`SimConfig::eviction_requests`]: crate::SimConfig::eviction_requests

use std::sync::Arc;

use serde_json::Value;

use super::errors::ApiError;
use super::meta;
use super::patch::{ListKind, ListSchema};
use super::resources::{Gr, ResourceDef};

mod controller;
mod responders;
mod status;
#[cfg(test)]
mod tests;

pub use controller::start;

/// The API group of KEP-4563.
pub const GROUP: &str = "lifecycle.k8s.io";
/// The version the KEP's alpha serves.
pub const VERSION: &str = "v1alpha1";
/// The responder appended to every pod's list: it calls the Eviction API.
pub const IMPERATIVE_EVICTOR: &str = "imperative-eviction.k8s.io/evictor";
/// A responder the simulator plays: a KubeVirt-like live migration that
/// takes its time, then deletes the migration source pod.
pub const LIVE_MIGRATION: &str = "live-migration.kubevirt.io/migrator";
/// How many seconds the simulated live migration of a pod takes
/// (`SimConfig::live_migration` when absent or malformed).
pub const LIVE_MIGRATION_ANNOTATION: &str = "sim.maintd.io/live-migration-seconds";
/// The longest a responder may stay silent before it is interrupted.
pub const HEARTBEAT_DEADLINE_SECS: i64 = 20 * 60;
/// Responders a pod may declare (the Eviction has one more, the evictor).
pub const MAX_POD_RESPONDERS: usize = 16;

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

/// What the API server refuses in an EvictionRequest or Eviction (on
/// create and on update), as 422 causes.
pub fn check(def: &ResourceDef, obj: &Value, causes: &mut Vec<(String, String)>) {
    if def.group != GROUP {
        return;
    }
    let spec = &obj["spec"];
    check_target(&spec["target"], causes);
    check_status_shape(&obj["status"], causes);
    if def.kind != "EvictionRequest" {
        return;
    }
    match spec["requesterName"].as_str() {
        None | Some("") => causes.push(("spec.requesterName".into(), "Required value".into())),
        Some(n) => {
            if let Err(why) = domain_prefixed_path(n) {
                causes.push((
                    "spec.requesterName".into(),
                    format!("Invalid value: {n:?}: {why}"),
                ));
            } else if reserved(n) {
                causes.push((
                    "spec.requesterName".into(),
                    format!("Invalid value: {n:?}: domain names *.k8s.io and *.kubernetes.io are reserved"),
                ));
            }
        }
    }
    match spec["intent"].as_str() {
        None | Some("") => causes.push(("spec.intent".into(), "Required value".into())),
        Some("Eviction" | "Withdrawn") => {}
        Some(other) => causes.push((
            "spec.intent".into(),
            format!("Unsupported value: {other:?}: supported values: \"Eviction\", \"Withdrawn\""),
        )),
    }
}

/// The status lists are lists of objects (what the Go types decode).
fn check_status_shape(status: &Value, causes: &mut Vec<(String, String)>) {
    if status.is_null() {
        return;
    }
    if !status.is_object() {
        causes.push(("status".into(), "Invalid value: must be an object".into()));
        return;
    }
    for list in ["conditions", "requesters", "targetResponders", "responders"] {
        let v = &status[list];
        if !v.is_null() && !v.as_array().is_some_and(|l| l.iter().all(Value::is_object)) {
            causes.push((
                format!("status.{list}"),
                "Invalid value: must be a list of objects".into(),
            ));
        }
    }
}

/// `.spec.target.pod` is the only target the alpha knows, so it is required.
fn check_target(target: &Value, causes: &mut Vec<(String, String)>) {
    let pod = &target["pod"];
    if !pod.is_object() {
        causes.push(("spec.target.pod".into(), "Required value".into()));
        return;
    }
    match pod["name"].as_str() {
        None | Some("") => causes.push(("spec.target.pod.name".into(), "Required value".into())),
        Some(n) if !meta::valid_subdomain(n) => causes.push((
            "spec.target.pod.name".into(),
            format!("Invalid value: {n:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        )),
        Some(_) => {}
    }
    match pod["uid"].as_str() {
        None | Some("") => causes.push(("spec.target.pod.uid".into(), "Required value".into())),
        Some(u) if !lowercase_uuid(u) => causes.push((
            "spec.target.pod.uid".into(),
            format!("Invalid value: {u:?}: must be a lowercase UUID in 8-4-4-4-12 format"),
        )),
        Some(_) => {}
    }
}

/// What may not change once written: the target and the requester of an
/// EvictionRequest, the target of an Eviction, the set of an Eviction's
/// target responders, and a responder's start and completion times.
pub fn check_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    if def.group != GROUP {
        return Ok(());
    }
    let mut causes = Vec::new();
    let mut fixed = vec![(
        "spec.target",
        &old["spec"]["target"],
        &new["spec"]["target"],
    )];
    if def.kind == "EvictionRequest" {
        fixed.push((
            "spec.requesterName",
            &old["spec"]["requesterName"],
            &new["spec"]["requesterName"],
        ));
    }
    for (field, was, is) in fixed {
        if was != is {
            causes.push((
                field.into(),
                format!("Invalid value: {is}: field is immutable"),
            ));
        }
    }
    if def.kind == "Eviction" {
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|l| {
                    l.iter()
                        .map(|r| r["name"].as_str().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        let (was, is) = (
            &old["status"]["targetResponders"],
            &new["status"]["targetResponders"],
        );
        if !names(was).is_empty() && names(was) != names(is) {
            causes.push((
                "status.targetResponders".into(),
                "Forbidden: items cannot be added or removed once set".into(),
            ));
        }
        for (i, r) in old["status"]["responders"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let now = new["status"]["responders"]
                .as_array()
                .and_then(|l| l.iter().find(|n| n["name"] == r["name"]));
            for f in ["startTime", "completionTime"] {
                if !r[f].is_null() && now.is_none_or(|n| n[f] != r[f]) {
                    causes.push((
                        format!("status.responders[{i}].{f}"),
                        "Invalid value: field is immutable once set".into(),
                    ));
                }
            }
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &def.gr(),
            meta::name(new),
            &def.kind,
            causes,
        ))
    }
}

/// A domain-prefixed path (`acme.io/foo`): a DNS subdomain, a slash and a
/// path. The simulator holds the path to a label name, because the KEP
/// makes requester and responder names label keys of the Eviction.
pub fn domain_prefixed_path(s: &str) -> Result<(), &'static str> {
    let Some((domain, path)) = s.split_once('/') else {
        return Err("must be a domain-prefixed path (such as \"acme.io/foo\")");
    };
    if !meta::valid_subdomain(domain) {
        return Err("the prefix must be a DNS subdomain (such as \"acme.io\")");
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let name_ok = !path.is_empty()
        && path.len() <= 63
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && edge_ok(path.chars().next())
        && edge_ok(path.chars().last());
    if !name_ok {
        return Err(
            "the path must be 63 characters or less, of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        );
    }
    Ok(())
}

fn reserved(name: &str) -> bool {
    let domain = name.split('/').next().unwrap_or("");
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|r| domain == *r || domain.ends_with(&format!(".{r}")))
}

fn lowercase_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| {
            g.len() == n
                && g.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        })
}
