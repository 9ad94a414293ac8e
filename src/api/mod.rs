//! The `NodeMaintenance` API (`maintd.io/v1alpha1`, cluster-scoped), shaped
//! after KEP-4212: which nodes (`nodeName` or `nodeSelector`), how far
//! (`stage`), why (`reason`) and in which order (`drainPlan`).
//!
//! - [`validate`]: what is wrong with an object, in words an admin can act on
//!   (the CRD schema rejects most of it already; the agent checks again
//!   because objects may predate the schema or come from an older CRD).
//! - [`selects`] / [`effective`]: which objects apply to a node, and the one
//!   stage and plan that result when several do.
//! - [`crd`]: the CustomResourceDefinition, with what the derive cannot say
//!   (CEL rules, list-map keys, size limits) added to its schema.

pub mod medik8s;
mod schema;
mod select;
mod stage;
pub mod status;
#[cfg(test)]
mod tests;
mod validate;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::drain::plan::PlanEntry;

pub use schema::{CrdError, crd, crd_yaml};
pub use select::{Effective, effective, selects};
pub use stage::Stage;
pub use validate::{MAX_PLAN_ENTRIES, MAX_REASON_LEN, parse, validate};

/// API group of maintd's resources.
pub const GROUP: &str = "maintd.io";
/// API version of [`NodeMaintenance`].
pub const VERSION: &str = "v1alpha1";
/// Collection path, for watches on the raw API.
pub const NODEMAINTENANCES_PATH: &str = "/apis/maintd.io/v1alpha1/nodemaintenances";

/// A request to take one node, or every node a selector matches, out of
/// service: cordon, or cordon and drain by a plan.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "maintd.io",
    version = "v1alpha1",
    kind = "NodeMaintenance",
    plural = "nodemaintenances",
    shortname = "nm",
    status = "NodeMaintenanceStatus",
    printcolumn = r#"{"name":"Stage","type":"string","jsonPath":".spec.stage","description":"How far the maintenance goes: Idle, Cordon, Drain or Complete"}"#,
    printcolumn = r#"{"name":"Selected","type":"integer","jsonPath":".status.selectedNodes","description":"Nodes whose agent reports in status.nodes"}"#,
    printcolumn = r#"{"name":"Drained","type":"integer","jsonPath":".status.drainedNodes","description":"Entries of status.nodes in phase Drained"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceSpec {
    /// The one node to maintain. Exactly one of nodeName and nodeSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The nodes to maintain, by label. Exactly one of nodeName and nodeSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// Idle: nothing yet. Cordon: cordon and taint. Drain: also run the
    /// drain plan. Complete: done; undo.
    #[serde(default)]
    pub stage: Stage,
    /// Why, for people (shown in events and the node condition).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The drain plan (KEP-4212): entries ordered Default, DaemonSet, Static,
    /// ascending podPriority within a type. Empty: maintd's default plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_plan: Vec<PlanEntry>,
    /// How long one stage of the plan may take before the agent's
    /// on-timeout policy applies. Unset: the agent's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_timeout_seconds: Option<i64>,
}

/// What the agents report. Each agent owns its entry of `nodes` (server-side
/// apply, field manager `maintd/<node>`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceStatus {
    /// One entry per selected node, keyed by nodeName.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeStatus>,
    /// Number of entries in `nodes` (kept for the printer column; CRD
    /// columns cannot count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_nodes: Option<i32>,
    /// Number of entries of `nodes` in phase Drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_nodes: Option<i32>,
    /// `Valid` (False with the problems when the object is invalid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One node's progress, written by that node's agent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub node_name: String,
    pub phase: Phase,
    /// The stage the agent acts on (the effective one, which may come from
    /// another object selecting the same node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    #[serde(default)]
    pub pods_total: i32,
    #[serde(default)]
    pub pods_remaining: i32,
    /// Percent of the plan's pods gone, 0–100.
    #[serde(default)]
    pub drain_progress: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_pods: Vec<PendingPod>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// Where one node's maintenance stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Selected; nothing done yet.
    Pending,
    /// Cordoned and tainted (stage Cordon).
    Cordoned,
    /// Evicting pods.
    Draining,
    /// Evictions refused (a PodDisruptionBudget); see pendingPods.
    Blocked,
    /// Every pod of the plan is gone.
    Drained,
    /// Maintenance over; the node is back in service.
    Completed,
    /// The drain cannot go on without an operator; see lastError.
    Failed,
}

/// A pod the drain is still waiting for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    pub namespace: String,
    pub name: String,
    /// e.g. "terminating", "eviction refused".
    pub reason: String,
    /// Who refuses, e.g. "PodDisruptionBudget default/web".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
}
