//! Compatibility with medik8s' `NodeMaintenance`
//! (`nodemaintenance.medik8s.io/v1beta1`, cluster-scoped): an object whose
//! `spec.nodeName` is this node asks for a drain for as long as it exists,
//! and its status is written in medik8s' own fields so the tools that read
//! them (consoles, scripts, `kubectl get nm`) keep working.
//!
//! Decided purely from the raw object and the drain's status; the trigger
//! and the status reporter do the I/O.

use serde::Serialize;
use serde_json::{Value, json};

use crate::drain::progress::{DrainStatus, Phase, PodState};

/// API group of medik8s' NodeMaintenance.
pub const GROUP: &str = "nodemaintenance.medik8s.io";
/// The served version maintd reads and writes.
pub const VERSION: &str = "v1beta1";
/// Collection path, for watches on the raw API.
pub const PATH: &str = "/apis/nodemaintenance.medik8s.io/v1beta1/nodemaintenances";
/// The finalizer medik8s' operator puts on the objects it handles, to undo
/// before they go. Objects it handled before maintd took over still carry it.
pub const FINALIZER: &str = "foregroundDeleteNodeMaintenance";
/// At most this many names in `status.pendingPods` (a node runs ~110 pods;
/// the bound keeps one object small whatever the node carries).
pub const MAX_PENDING: usize = 250;

/// The name of `obj` if it asks `node` to be drained: `spec.nodeName` is the
/// node and the object is not being deleted (a deletion that waits on a
/// finalizer has ended the maintenance all the same).
pub fn request_for<'a>(obj: &'a Value, node: &str) -> Option<&'a str> {
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().filter(|n| !n.is_empty())?;
    let asks =
        obj["spec"]["nodeName"].as_str() == Some(node) && meta["deletionTimestamp"].is_null();
    asks.then_some(name)
}

/// Whether `obj` is an object for `node` being deleted that still waits on
/// medik8s' finalizer: once maintd no longer holds the node for it, maintd
/// takes the finalizer off, as medik8s' operator would have.
pub fn awaits_release(obj: &Value, node: &str) -> bool {
    let meta = &obj["metadata"];
    obj["spec"]["nodeName"].as_str() == Some(node)
        && !meta["deletionTimestamp"].is_null()
        && meta["finalizers"]
            .as_array()
            .is_some_and(|fs| fs.iter().any(|f| f == FINALIZER))
}

/// medik8s' maintenance phase.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub enum MaintenancePhase {
    Running,
    Succeeded,
    Failed,
}

/// The status fields maintd writes, named as medik8s names them.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Medik8sStatus {
    pub phase: MaintenancePhase,
    /// Percent of the pods up for eviction that are gone.
    pub drain_progress: i64,
    /// Every pod on the node when the drain started (medik8s spells it in
    /// lower case).
    #[serde(rename = "totalpods")]
    pub total_pods: i64,
    /// The pods up for eviction.
    pub eviction_pods: i64,
    /// Names of the pods still to go.
    pub pending_pods: Vec<String>,
    /// The same pods with their namespaces (newer medik8s CRDs have the
    /// field; for an older CRD the writer leaves it out).
    pub pending_pods_refs: Vec<PodRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A pod, as medik8s' `pendingPodsRefs` names it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// The status the drain's state translates to. A node that is cordoned but
/// not yet evicting is Running: medik8s has no phase for "not started".
pub fn status(st: &DrainStatus) -> Medik8sStatus {
    let phase = match st.phase {
        Phase::Drained => MaintenancePhase::Succeeded,
        Phase::Failed => MaintenancePhase::Failed,
        Phase::Idle | Phase::Cordoned | Phase::Draining | Phase::Blocked => {
            MaintenancePhase::Running
        }
    };
    let eviction = st.pods_total as i64;
    let gone = eviction - st.pods_remaining.min(st.pods_total) as i64;
    let drain_progress = match (eviction, phase) {
        (0, MaintenancePhase::Succeeded) => 100,
        (0, _) => 0,
        (n, _) => gone * 100 / n,
    };
    let pending: Vec<&crate::drain::progress::PodStatus> = st
        .stages
        .iter()
        .flat_map(|s| &s.pods)
        .filter(|p| p.state != PodState::Gone)
        .take(MAX_PENDING)
        .collect();
    let pending_pods = pending.iter().map(|p| p.name.clone()).collect();
    let pending_pods_refs = pending
        .iter()
        .map(|p| PodRef {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        })
        .collect();
    // What holds the drain up is the error an operator needs: the drain's
    // own error first, else the first refused eviction.
    let last_error = st.last_error.clone().or_else(|| {
        st.blockers.first().map(|b| match b.pod.is_empty() {
            true => b.reason.clone(),
            false => format!("{}/{}: {}", b.namespace, b.pod, b.reason),
        })
    });
    Medik8sStatus {
        phase,
        drain_progress,
        total_pods: eviction + st.skipped.len() as i64,
        eviction_pods: eviction,
        pending_pods,
        pending_pods_refs,
        last_error,
    }
}

/// The server-side apply body for `name`'s status; `now` (RFC 3339) goes
/// into `lastUpdate`; `refs`: whether the CRD has `pendingPodsRefs`.
pub fn apply_body(name: &str, status: &Medik8sStatus, now: &str, refs: bool) -> Value {
    let mut s = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    s["lastUpdate"] = json!(now);
    if !refs && let Some(map) = s.as_object_mut() {
        map.remove("pendingPodsRefs");
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "status": s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::plan::PodType;
    use crate::drain::progress::{Blocker, PodStatus, SkippedStatus, StageState, StageStatus};

    #[test]
    fn only_live_objects_naming_the_node_ask() {
        let obj = |spec: Value, meta: Value| json!({"metadata": meta, "spec": spec});
        let cases = [
            (
                obj(json!({"nodeName": "node-a"}), json!({"name": "m"})),
                Some("m"),
            ),
            (
                obj(json!({"nodeName": "node-b"}), json!({"name": "m"})),
                None,
            ),
            (obj(json!({}), json!({"name": "m"})), None),
            (obj(json!({"nodeName": 7}), json!({"name": "m"})), None),
            (obj(json!("not an object"), json!({"name": "m"})), None),
            (obj(json!({"nodeName": "node-a"}), json!({})), None),
            (
                obj(
                    json!({"nodeName": "node-a"}),
                    json!({"name": "m", "deletionTimestamp": "2026-01-01T00:00:00Z",
                           "finalizers": ["foregroundDeleteNodeMaintenance"]}),
                ),
                None,
            ),
        ];
        for (o, want) in &cases {
            assert_eq!(request_for(o, "node-a"), *want, "{o}");
        }
        // Only the last case waits on the finalizer.
        let waiting: Vec<bool> = cases
            .iter()
            .map(|(o, _)| awaits_release(o, "node-a"))
            .collect();
        assert_eq!(waiting, [false, false, false, false, false, false, true]);
        let mut other = cases[6].0.clone();
        other["metadata"]["finalizers"] = json!(["someone-else"]);
        assert!(!awaits_release(&other, "node-a"));
        assert!(!awaits_release(&cases[6].0, "node-b"));
    }

    fn pod(name: &str, state: PodState) -> PodStatus {
        PodStatus {
            uid: name.into(),
            namespace: "default".into(),
            name: name.into(),
            state,
            blocker: None,
        }
    }

    fn draining() -> DrainStatus {
        DrainStatus {
            phase: Phase::Blocked,
            pods_total: 4,
            pods_remaining: 3,
            stages: vec![StageStatus {
                stage: 1,
                label: "pods".into(),
                pod_type: PodType::Default,
                priority: 0,
                state: StageState::Running,
                pods: vec![
                    pod("web-1", PodState::Gone),
                    pod("web-2", PodState::Blocked),
                    pod("api-1", PodState::Terminating),
                    pod("api-2", PodState::Pending),
                ],
            }],
            blockers: vec![Blocker {
                namespace: "default".into(),
                pod: "web-2".into(),
                reason: "PodDisruptionBudget default/web allows no disruption".into(),
            }],
            skipped: vec![SkippedStatus {
                namespace: "default".into(),
                pod: "pinned".into(),
                reason: "opted out".into(),
            }],
            ..DrainStatus::default()
        }
    }

    #[test]
    fn a_blocked_drain_is_running_and_names_what_is_left_and_why() {
        let s = status(&draining());
        assert_eq!(s.phase, MaintenancePhase::Running);
        assert_eq!(
            (s.total_pods, s.eviction_pods, s.drain_progress),
            (5, 4, 25)
        );
        assert_eq!(s.pending_pods, ["web-2", "api-1", "api-2"]);
        assert_eq!(
            s.last_error.as_deref(),
            Some("default/web-2: PodDisruptionBudget default/web allows no disruption")
        );
        let body = apply_body("m", &s, "2026-01-01T00:00:00Z", true);
        let st = &body["status"];
        assert_eq!(body["apiVersion"], "nodemaintenance.medik8s.io/v1beta1");
        assert_eq!(
            (
                st["phase"].as_str(),
                st["totalpods"].as_i64(),
                st["evictionPods"].as_i64()
            ),
            (Some("Running"), Some(5), Some(4))
        );
        assert_eq!(st["drainProgress"], 25);
        assert_eq!(st["lastUpdate"], "2026-01-01T00:00:00Z");
        assert_eq!(st["pendingPods"][0], "web-2");
        assert_eq!(st["pendingPodsRefs"][0]["name"], "web-2");
        assert!(st["pendingPodsRefs"][0]["namespace"].is_string());
        // For a CRD without the field, the body has none.
        let older = apply_body("m", &s, "2026-01-01T00:00:00Z", false);
        assert!(older["status"].get("pendingPodsRefs").is_none());
        assert_eq!(older["status"]["pendingPods"][0], "web-2");
    }

    #[test]
    fn phases_follow_the_drain() {
        let cases = [
            (Phase::Idle, 0, 0, MaintenancePhase::Running, 0),
            (Phase::Cordoned, 3, 3, MaintenancePhase::Running, 0),
            (Phase::Draining, 3, 1, MaintenancePhase::Running, 66),
            (Phase::Drained, 3, 0, MaintenancePhase::Succeeded, 100),
            (Phase::Drained, 0, 0, MaintenancePhase::Succeeded, 100),
            (Phase::Failed, 3, 2, MaintenancePhase::Failed, 33),
        ];
        for (phase, total, remaining, want, progress) in cases {
            let st = DrainStatus {
                phase,
                pods_total: total,
                pods_remaining: remaining,
                last_error: (phase == Phase::Failed).then(|| "stage 1 timed out".into()),
                ..DrainStatus::default()
            };
            let s = status(&st);
            assert_eq!((s.phase, s.drain_progress), (want, progress), "{phase:?}");
            assert_eq!(s.last_error.is_some(), phase == Phase::Failed);
            assert!(s.pending_pods.is_empty());
        }
    }

    #[test]
    fn pending_pods_are_bounded() {
        let mut st = draining();
        st.stages[0].pods = (0..MAX_PENDING + 50)
            .map(|i| pod(&format!("p-{i}"), PodState::Pending))
            .collect();
        assert_eq!(status(&st).pending_pods.len(), MAX_PENDING);
    }
}
