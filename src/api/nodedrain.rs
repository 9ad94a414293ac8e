//! `NodeDrain` (`maintd.io/v1alpha1`, cluster-scoped, named after its
//! node): one node's drain status, written only by that node's agent —
//! the Lease pattern of KEP-589. Nobody else has to receive it: agents do
//! not watch each other's objects; only the one agent that writes the
//! NodeMaintenance aggregates does. `kubectl get nodedrains` is the
//! cluster-wide view. The object is owned by its Node, so deleting the Node
//! deletes it.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::drain::progress::{DrainStatus, Phase};

/// Collection path, for watches on the raw API.
pub const NODEDRAINS_PATH: &str = "/apis/maintd.io/v1alpha1/nodedrains";

/// The most blockers a NodeDrain lists; `blockersTotal` counts them all.
pub const MAX_BLOCKERS: usize = 10;

/// A node's drain, as its agent sees it. The spec is empty: the object
/// exists to carry its node's status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "maintd.io",
    version = "v1alpha1",
    kind = "NodeDrain",
    plural = "nodedrains",
    shortname = "nd",
    status = "NodeDrainStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Idle, Cordoned, Draining, Blocked, Drained or Failed"}"#,
    printcolumn = r#"{"name":"Stage","type":"string","jsonPath":".status.stage","description":"The drain plan's stage running now"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress","description":"Pods of the plan gone / all"}"#,
    printcolumn = r#"{"name":"Blockers","type":"integer","jsonPath":".status.blockersTotal","description":"Pods that keep the drain from going on"}"#,
    printcolumn = r#"{"name":"Triggers","type":"string","jsonPath":".status.triggers[*]","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct NodeDrainSpec {}

/// One node's drain: the same document as the agent's `/v1/status`, with
/// the per-pod detail left out and the blockers capped.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDrainStatus {
    pub node_name: String,
    /// Idle, Cordoned, Draining, Blocked, Drained or Failed.
    pub phase: String,
    /// The stage running now, e.g. "2/5: Default pods at priority 0".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    #[serde(default)]
    pub pods_total: i64,
    #[serde(default)]
    pub pods_remaining: i64,
    /// "gone/total", for the printer column.
    #[serde(default)]
    pub progress: String,
    /// The first blockers (at most [`MAX_BLOCKERS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blockers: Vec<NodeDrainBlocker>,
    #[serde(default)]
    pub blockers_total: i64,
    /// Why the drain has not started evicting yet (waiting for its turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// What asks for the drain, one line per trigger.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<String>,
    /// The NodeMaintenance objects that select this node (valid ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maintenances: Vec<String>,
    /// The node's place in rolling maintenances' order (its
    /// `maintd.io/drain-order` label; 0 without it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drain_order: i64,
    /// The rolling NodeMaintenance whose drain turn this node has still to
    /// take, or is taking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_turn: Option<String>,
    /// Whether the agent holds logind's shutdown lock (unset when it does
    /// not take one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_held: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// The version of the agent that writes this object: during a rollout
    /// of a new release, which nodes run which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A pod that keeps the drain from going on, and why.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeDrainBlocker {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub pod: String,
    pub reason: String,
}

/// The phase's name as the API shows it.
pub fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Idle => "Idle",
        Phase::Cordoned => "Cordoned",
        Phase::Draining => "Draining",
        Phase::Blocked => "Blocked",
        Phase::Drained => "Drained",
        Phase::Failed => "Failed",
    }
}

/// Where the node stands in rolling maintenances' order (see
/// [`super::order`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Order {
    pub order: i64,
    pub pending_turn: Option<String>,
}

/// The node's status object from the drain's status. `updated_at` is left
/// out (the caller stamps it when it writes), so two snapshots compare
/// equal when nothing a reader cares about changed.
pub fn from_drain(
    node: &str,
    st: &DrainStatus,
    maintenances: Vec<String>,
    order: &Order,
    lock_held: Option<bool>,
) -> NodeDrainStatus {
    let stage = st.current_stage.map(|n| {
        let label = st
            .stages
            .iter()
            .find(|s| s.stage == n)
            .map(|s| s.label.as_str())
            .unwrap_or("");
        format!("{n}/{}: {label}", st.stages.len())
    });
    let gone = st.pods_total.saturating_sub(st.pods_remaining);
    NodeDrainStatus {
        node_name: node.to_string(),
        phase: phase_name(st.phase).to_string(),
        stage,
        pods_total: i64::try_from(st.pods_total).unwrap_or(i64::MAX),
        pods_remaining: i64::try_from(st.pods_remaining).unwrap_or(i64::MAX),
        progress: format!("{gone}/{}", st.pods_total),
        blockers: st
            .blockers
            .iter()
            .take(MAX_BLOCKERS)
            .map(|b| NodeDrainBlocker {
                namespace: b.namespace.clone(),
                pod: b.pod.clone(),
                reason: b.reason.clone(),
            })
            .collect(),
        blockers_total: i64::try_from(st.blockers.len()).unwrap_or(i64::MAX),
        waiting: st.waiting.clone(),
        triggers: st.triggers.clone(),
        maintenances,
        drain_order: order.order,
        pending_turn: order.pending_turn.clone(),
        lock_held,
        last_error: st.last_error.clone(),
        started_at: st.started_at.clone(),
        finished_at: st.finished_at.clone(),
        updated_at: None,
        agent_version: Some(env!("CARGO_PKG_VERSION").to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::progress::Blocker;

    #[test]
    fn blockers_are_capped_with_a_total_and_progress_reads_gone_over_all() {
        let st = DrainStatus {
            phase: Phase::Blocked,
            pods_total: 40,
            pods_remaining: 30,
            blockers: (0..25)
                .map(|i| Blocker {
                    namespace: "default".into(),
                    pod: format!("web-{i}"),
                    reason: "budget web".into(),
                })
                .collect(),
            ..Default::default()
        };
        let s = from_drain(
            "node-a",
            &st,
            vec!["rack-7".into()],
            &Order::default(),
            Some(true),
        );
        assert_eq!(s.phase, "Blocked");
        assert_eq!(s.progress, "10/40");
        assert_eq!(s.blockers.len(), MAX_BLOCKERS);
        assert_eq!(s.blockers_total, 25);
        assert_eq!(s.maintenances, ["rack-7"]);
        assert_eq!(s.agent_version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            json.len() < 4096,
            "a NodeDrain stays small: {} bytes",
            json.len()
        );
    }
}
