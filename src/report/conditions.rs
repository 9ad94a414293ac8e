//! The Node conditions the agent writes on its own Node: KEP-5683's
//! lifecycle conditions (kubernetes/enhancements
//! keps/sig-node/5683-lifecycle-conditions at ccece8f, alpha in Kubernetes
//! 1.37), which other components read, and maintd's own `MaintdDrain`
//! (deprecated: kept for one release for alerts and scripts that read it).
//! Plain decisions over the drain's status: no client, no clock.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::drain::progress::{DrainStatus, Phase};
use crate::policy::HoldKind;

/// KEP-5683's condition types maintd writes, in the order of a drain's life.
pub const LIFECYCLE_TYPES: [&str; 5] = [
    "MaintenancePlanned",
    "MaintenanceInProgress",
    "DrainInProgress",
    "Drained",
    "GracefulNodeShutdownInProgress",
];
/// maintd's own condition, deprecated in favour of the lifecycle ones.
pub const MAINTD_DRAIN: &str = "MaintdDrain";
/// Every lifecycle condition maintd writes says so first: a condition of
/// these types without it is someone else's, and left alone.
pub const MESSAGE_PREFIX: &str = "maintd: ";

/// One condition as maintd wants it on the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Wanted {
    /// What decides whether a write is due: a new message alone is not.
    pub fn key(&self) -> (&'static str, &'static str, &'static str) {
        (self.type_, self.status, self.reason)
    }
}

/// The conditions maintd wants on `node` for this status: the lifecycle
/// states that hold now, each `True` (a state that ends is removed, which
/// the KEP allows as clearing, and keeps every idle Node of a fleet free
/// of five more conditions), then `MaintdDrain`. `shutdown`: logind is
/// preparing a shutdown that maintd still delays.
pub fn wanted(node: &str, st: &DrainStatus, shutdown: bool) -> Vec<Wanted> {
    let by_shutdown = st.triggers.iter().any(|t| t == "shutdown");
    let cause = if by_shutdown {
        "NodeShutdown"
    } else {
        "AdminRequested"
    };
    let why = if st.triggers.is_empty() {
        String::new()
    } else {
        format!(" for {}", st.triggers.join(", "))
    };
    let see = format!("; kubectl get nodedrain {node}");
    let mut out = Vec::new();
    let mut lifecycle = |type_, reason, message: String| {
        out.push(Wanted {
            type_,
            status: "True",
            reason,
            message: format!("{MESSAGE_PREFIX}{message}"),
        })
    };
    if let (Phase::Idle, Some(waiting)) = (st.phase, &st.waiting) {
        let reason = if st.waiting_for == Some(HoldKind::Window) {
            "MaintenanceWindow"
        } else {
            "AdminRequested"
        };
        lifecycle(
            "MaintenancePlanned",
            reason,
            format!("a drain{why} waits: {waiting}{see}"),
        );
    }
    if st.phase != Phase::Idle {
        lifecycle(
            "MaintenanceInProgress",
            cause,
            format!("maintenance{why}{see}"),
        );
    }
    if matches!(st.phase, Phase::Cordoned | Phase::Draining | Phase::Blocked) {
        lifecycle("DrainInProgress", cause, format!("draining{why}{see}"));
    }
    if st.phase == Phase::Drained {
        lifecycle(
            "Drained",
            "DrainCompleted",
            format!("every pod of the drain plan is gone{why}{see}"),
        );
    }
    if shutdown {
        lifecycle(
            "GracefulNodeShutdownInProgress",
            "NodeShutdown",
            "logind is shutting the node down; maintd delays it until the node is drained".into(),
        );
    }
    let (status, reason) = maintd_drain(st.phase);
    let message = if st.triggers.is_empty() {
        "no maintenance".to_string()
    } else {
        format!(
            "{} for {}; progress and blockers: kubectl get nodedrain {node}",
            reason.to_lowercase(),
            st.triggers.join(", "),
        )
    };
    out.push(Wanted {
        type_: MAINTD_DRAIN,
        status,
        reason,
        message,
    });
    out
}

/// `MaintdDrain`'s status and reason for a drain phase. A blocked drain is
/// still `Draining` here: a drain waiting on budgets goes back and forth
/// between the two, and every change would be a write to the Node.
fn maintd_drain(phase: Phase) -> (&'static str, &'static str) {
    match phase {
        Phase::Idle => ("False", "Idle"),
        Phase::Cordoned => ("False", "Cordoned"),
        Phase::Draining | Phase::Blocked => ("True", "Draining"),
        Phase::Drained => ("True", "Drained"),
        Phase::Failed => ("False", "Failed"),
    }
}

/// Lifecycle condition types someone else holds on the Node: set `True`
/// with a message that is not maintd's (an admin's `MaintenancePlanned`).
/// maintd neither writes nor clears them.
pub fn held_by_others(node: &Value) -> BTreeSet<String> {
    conditions(node)
        .filter(|c| LIFECYCLE_TYPES.contains(&c["type"].as_str().unwrap_or_default()))
        .filter(|c| c["status"] == "True" && !is_ours(c))
        .filter_map(|c| c["type"].as_str().map(str::to_string))
        .collect()
}

/// Whether the Node already shows exactly these conditions of maintd's
/// (type, status, reason), and no lifecycle condition of maintd's beyond
/// them: then there is nothing to write.
pub fn shown(node: &Value, want: &[Wanted]) -> bool {
    let matches = want.iter().all(|w| {
        conditions(node)
            .any(|c| c["type"] == w.type_ && c["status"] == w.status && c["reason"] == w.reason)
    });
    let extra = conditions(node).any(|c| {
        let t = c["type"].as_str().unwrap_or_default();
        LIFECYCLE_TYPES.contains(&t) && is_ours(c) && !want.iter().any(|w| w.type_ == t)
    });
    matches && !extra
}

/// The Node's condition of this type.
pub fn find<'a>(node: &'a Value, type_: &str) -> Option<&'a Value> {
    conditions(node).find(|c| c["type"] == type_)
}

fn conditions(node: &Value) -> impl Iterator<Item = &Value> {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
}

fn is_ours(c: &Value) -> bool {
    c["message"]
        .as_str()
        .is_some_and(|m| m.starts_with(MESSAGE_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(phase: Phase, triggers: &[&str], waiting: Option<(HoldKind, &str)>) -> DrainStatus {
        DrainStatus {
            phase,
            triggers: triggers.iter().map(|t| t.to_string()).collect(),
            waiting: waiting.map(|w| w.1.to_string()),
            waiting_for: waiting.map(|w| w.0),
            ..Default::default()
        }
    }

    fn keys(st: &DrainStatus, shutdown: bool) -> Vec<(&'static str, &'static str)> {
        wanted("node-a", st, shutdown)
            .iter()
            .map(|w| (w.type_, w.reason))
            .collect()
    }

    #[test]
    fn each_state_of_a_drain_shows_its_conditions() {
        let taint = ["taint maintd.io/drain=kernel:NoSchedule"];
        // (status, logind preparing a shutdown, the conditions wanted)
        type Case = (DrainStatus, bool, Vec<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                status(Phase::Idle, &[], None),
                false,
                vec![(MAINTD_DRAIN, "Idle")],
            ),
            (
                status(
                    Phase::Idle,
                    &["local: os update"],
                    Some((HoldKind::Window, "outside the window")),
                ),
                false,
                vec![
                    ("MaintenancePlanned", "MaintenanceWindow"),
                    (MAINTD_DRAIN, "Idle"),
                ],
            ),
            (
                status(
                    Phase::Idle,
                    &["NodeMaintenance k (Drain)"],
                    Some((HoldKind::Slot, "2 of 2 drain slots taken")),
                ),
                false,
                vec![
                    ("MaintenancePlanned", "AdminRequested"),
                    (MAINTD_DRAIN, "Idle"),
                ],
            ),
            (
                status(Phase::Cordoned, &taint, None),
                false,
                vec![
                    ("MaintenanceInProgress", "AdminRequested"),
                    ("DrainInProgress", "AdminRequested"),
                    (MAINTD_DRAIN, "Cordoned"),
                ],
            ),
            (
                status(Phase::Blocked, &taint, None),
                false,
                vec![
                    ("MaintenanceInProgress", "AdminRequested"),
                    ("DrainInProgress", "AdminRequested"),
                    (MAINTD_DRAIN, "Draining"),
                ],
            ),
            (
                status(Phase::Drained, &taint, None),
                false,
                vec![
                    ("MaintenanceInProgress", "AdminRequested"),
                    ("Drained", "DrainCompleted"),
                    (MAINTD_DRAIN, "Drained"),
                ],
            ),
            (
                status(Phase::Failed, &taint, None),
                false,
                vec![
                    ("MaintenanceInProgress", "AdminRequested"),
                    (MAINTD_DRAIN, "Failed"),
                ],
            ),
            (
                status(Phase::Draining, &["shutdown"], None),
                true,
                vec![
                    ("MaintenanceInProgress", "NodeShutdown"),
                    ("DrainInProgress", "NodeShutdown"),
                    ("GracefulNodeShutdownInProgress", "NodeShutdown"),
                    (MAINTD_DRAIN, "Draining"),
                ],
            ),
        ];
        for (st, shutdown, want) in cases {
            assert_eq!(
                keys(&st, shutdown),
                want,
                "{:?} {:?}",
                st.phase,
                st.triggers
            );
        }
        let planned = wanted(
            "node-a",
            &status(
                Phase::Idle,
                &["local: os update"],
                Some((HoldKind::Window, "outside the window")),
            ),
            false,
        );
        assert_eq!(
            planned[0].message,
            "maintd: a drain for local: os update waits: outside the window; kubectl get nodedrain node-a"
        );
        assert!(
            planned
                .iter()
                .filter(|w| w.type_ != MAINTD_DRAIN)
                .all(|w| w.status == "True")
        );
    }

    #[test]
    fn conditions_someone_else_set_are_theirs_and_what_is_shown_is_not_written_again() {
        let node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "MaintenancePlanned", "status": "True", "reason": "AdminRequested", "message": "disk swap"},
            {"type": "Drained", "status": "False", "reason": "AdminRequested", "message": "done"},
            {"type": "DrainInProgress", "status": "True", "reason": "AdminRequested", "message": "maintd: draining"},
            {"type": "MaintdDrain", "status": "True", "reason": "Draining", "message": "draining for x"},
        ]}});
        // An admin's True is theirs; a False, or maintd's own, is not held.
        assert_eq!(
            held_by_others(&node).into_iter().collect::<Vec<_>>(),
            ["MaintenancePlanned"]
        );
        let draining = wanted("node-a", &status(Phase::Draining, &["x"], None), false);
        let without_theirs: Vec<Wanted> = draining
            .into_iter()
            .filter(|w| w.type_ != "MaintenanceInProgress")
            .collect();
        assert!(shown(&node, &without_theirs));
        // Drained now: DrainInProgress of maintd's is still shown, so a
        // write is due (which removes it).
        let drained = wanted("node-a", &status(Phase::Drained, &["x"], None), false);
        assert!(!shown(&node, &drained));
    }
}
