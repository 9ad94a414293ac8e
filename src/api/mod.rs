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
pub mod nodedrain;
pub mod order;
mod schema;
mod select;
mod stage;
pub mod status;
#[cfg(test)]
mod tests;
pub mod turns;
mod validate;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::drain::plan::PlanEntry;

pub use schema::{CrdError, crd, crd_yaml, nodedrain_crd};
pub use select::{Effective, effective, selects};
pub use stage::Stage;
pub use validate::{
    DEFAULT_REBOOT_TIMEOUT_SECONDS, MAX_CONCURRENT_DRAINS, MAX_CORDON_AHEAD, MAX_NODE_NAME_LEN,
    MAX_PLAN_ENTRIES, MAX_REASON_LEN, MAX_REBOOT_TIMEOUT_SECONDS, MAX_STAGE_TIMEOUT_SECONDS,
    MIN_REBOOT_TIMEOUT_SECONDS, parse, validate,
};

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
    printcolumn = r#"{"name":"Selected","type":"integer","jsonPath":".status.selectedNodes","description":"Nodes whose agent reports this object selects them"}"#,
    printcolumn = r#"{"name":"Drained","type":"integer","jsonPath":".status.drainedNodes","description":"Selected nodes whose drain is done"}"#,
    printcolumn = r#"{"name":"Blocked","type":"integer","jsonPath":".status.blockedNodes","description":"Selected nodes whose drain waits on a blocker","priority":1}"#,
    printcolumn = r#"{"name":"Order","type":"integer","jsonPath":".status.drainOrder","description":"The drain order whose nodes take their turns now (a rolling maintenance)","priority":1}"#,
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
    /// At most this many of the selected nodes evict at once. Each node
    /// takes one of the object's drain slots (Leases in maintd's
    /// namespace), is cordoned and evicts, and gives it back once drained;
    /// the others wait their turn, not cordoned. Unset: every selected node
    /// drains at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_drains: Option<i32>,
    /// With maxConcurrentDrains: how many nodes are cordoned ahead of their
    /// turn, so pods evicted from the draining nodes do not land on a node
    /// about to drain. A node first takes one of these places in line (it
    /// is cordoned then), then waits for a drain slot; only nodes holding
    /// a place ask for a drain slot. Unset or 0: a node is cordoned when it
    /// takes its drain slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon_ahead: Option<i32>,
    /// With maxConcurrentDrains: a node's turn ends when it has rebooted,
    /// not when it is drained. It keeps its slot and its cordon until its
    /// boot ID changes and it is Ready again; then it is uncordoned, gives
    /// the slot to the next node and is done with this object. Unset: a
    /// drained node gives its slot back and stays cordoned until the
    /// object is Complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_reboot: Option<WaitForReboot>,
    /// A planned maintenance: each selected node waits for its agent's
    /// policy before it evicts (the maintenance window, blocking pods,
    /// alerts), as a local `maintd drain` does. Unset: the nodes drain
    /// when the stage says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub planned: bool,
}

/// How long a node of a rolling maintenance has to reboot, and what then.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitForReboot {
    /// Seconds from the node taking its slot until it must have booted
    /// again (drain included). Unset: 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// Past the timeout, `Hold` (the default) keeps the node cordoned and
    /// its slot held, so the rollout stops at a node that did not come
    /// back; `Release` uncordons it and gives the slot to the next node.
    #[serde(default)]
    pub on_timeout: OnRebootTimeout,
}

/// What a node of a rolling maintenance does when it has not rebooted in
/// time.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnRebootTimeout {
    /// Stay cordoned and keep the slot: the rollout stops here.
    #[default]
    Hold,
    /// Uncordon, give the slot back and count the node as done.
    Release,
}

/// What the agents report, as aggregates (KEP-4212: per-node detail lives
/// on the node, in its `NodeDrain`; the maintenance holds counts and the
/// nodes that need attention). One agent at a time writes it (the holder
/// of the status-writer Lease), at most every few seconds, so the object
/// stays small and rarely written whatever the node count.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceStatus {
    /// Nodes whose agent reports this object selects them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_nodes: Option<i32>,
    /// Of those, cordoned and waiting (stage Cordon, or not started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_nodes: Option<i32>,
    /// Nodes that need attention (blocked or failed), with their first
    /// blocker, in name order; at most [`status::MAX_ATTENTION`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attention: Vec<AttentionEntry>,
    /// How many nodes need attention in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_total: Option<i32>,
    /// A rolling maintenance: the lowest `maintd.io/drain-order` among the
    /// nodes whose turn is still to take or under way. Nodes of a higher
    /// order wait until these are done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_order: Option<i64>,
    /// How many nodes of that order have a turn still to take or finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_order_nodes_left: Option<i32>,
    /// The first of those nodes by name (at most
    /// [`status::MAX_ORDER_NODES`]): the higher orders wait for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_order_nodes: Vec<String>,
    /// `Valid` (False with the problems when the object is invalid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the aggregates were last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Time>,
}

/// A node that needs attention, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttentionEntry {
    pub node_name: String,
    /// The node's phase (Blocked or Failed).
    pub phase: String,
    /// Its first blocker ("default/web-1: The disruption budget web ..."),
    /// or its last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocker: Option<String>,
}
