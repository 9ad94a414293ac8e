//! The node lifecycle controller's taints, as upstream keeps them with
//! TaintNodesByCondition: `node.kubernetes.io/unschedulable:NoSchedule`
//! follows `spec.unschedulable` (a cordon), and the node's conditions bring
//! their NoSchedule taints (`not-ready` for Ready=False, `unreachable` for
//! Ready=Unknown, the pressure conditions); a NotReady or unreachable node
//! also gets the NoExecute taint of the same key. Taints the controller does
//! not own are left as they are.
//!
//! Like upstream's `PatchNodeTaints`, the whole taint list is written with
//! the resourceVersion it was read at: taints are an atomic list, and a
//! conflict means someone else (an agent, `kubectl taint`) changed the node
//! in between; that change is a node event, which brings the controller back
//! to look again.
//!
//! Differences from upstream: the NoExecute taints come at once (upstream
//! waits out the node-monitor grace period and rate-limits per zone), and
//! nothing evicts pods for them (no taint manager), nor marks the node's
//! pods NotReady.

use serde_json::{Value, json};

use super::writer;
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::{self, Part, PatchType, write_status};

const MANAGER: &str = "node-controller";

/// The taint a cordoned node carries.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// The taint of a node whose kubelet reports it not Ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint of a node whose kubelet stopped reporting (Ready=Unknown).
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// (condition, status, taint key) of the NoSchedule taints conditions bring.
const CONDITION_TAINTS: &[(&str, &str, &str)] = &[
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    (
        "MemoryPressure",
        "True",
        "node.kubernetes.io/memory-pressure",
    ),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "True",
        "node.kubernetes.io/network-unavailable",
    ),
];

/// How a simulated node reports in (see [`set_node_health`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeHealth {
    /// The kubelet posts Ready=True.
    Ready,
    /// The kubelet posts Ready=False (e.g. its network plugin is down).
    NotReady,
    /// The kubelet stopped posting; the node controller set Ready=Unknown.
    Unreachable,
}

/// Whether the controller owns this taint (upstream compares only these:
/// the NoSchedule taints of cordon and conditions, and the two NoExecute
/// taints of readiness).
fn managed(t: &Value) -> bool {
    let key = t["key"].as_str().unwrap_or("");
    match t["effect"].as_str() {
        Some("NoSchedule") => {
            key == UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, k)| *k == key)
        }
        Some("NoExecute") => key == NOT_READY || key == UNREACHABLE,
        _ => false,
    }
}

/// The (key, effect) pairs the node should carry by its spec and conditions.
fn desired(node: &Value) -> Vec<(&'static str, &'static str)> {
    let status_of = |kind: &str| {
        node["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .and_then(|c| c["status"].as_str())
            .map(str::to_string)
    };
    let mut want = Vec::new();
    if node["spec"]["unschedulable"] == true {
        want.push((UNSCHEDULABLE, "NoSchedule"));
    }
    for (kind, status, key) in CONDITION_TAINTS {
        if status_of(kind).as_deref() == Some(*status) {
            want.push((*key, "NoSchedule"));
        }
    }
    match status_of("Ready").as_deref() {
        Some("False") => want.push((NOT_READY, "NoExecute")),
        Some("Unknown") => want.push((UNREACHABLE, "NoExecute")),
        _ => {}
    }
    want
}

/// The node's taint list with the controller's taints brought in step:
/// others' taints and the controller's still-wanted ones kept as they are
/// (with their timeAdded), missing ones appended.
fn taints_for(node: &Value) -> Vec<Value> {
    let want = desired(node);
    let current = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let is = |t: &Value, (key, effect): (&str, &str)| t["key"] == key && t["effect"] == effect;
    let mut out: Vec<Value> = current
        .iter()
        .filter(|t| !managed(t) || want.iter().any(|w| is(t, *w)))
        .cloned()
        .collect();
    for w in &want {
        if !out.iter().any(|t| is(t, *w)) {
            let mut t = json!({"key": w.0, "effect": w.1});
            if w.1 == "NoExecute" {
                t["timeAdded"] = json!(meta::now_time());
            }
            out.push(t);
        }
    }
    out
}

/// Brings one node's controller-owned taints in step with its spec and
/// conditions.
pub(super) fn node_taints(sim: &SimState, name: &str) {
    let Some(node) = sim.store().get(&Gr::nodes(), "", name) else {
        return;
    };
    let taints = taints_for(&node);
    let current = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if taints == current {
        return;
    }
    let Some(def) = sim.store().resource(&Gr::nodes()) else {
        return;
    };
    let list = if taints.is_empty() {
        Value::Null
    } else {
        Value::Array(taints)
    };
    let body = json!({
        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
        "spec": {"taints": list},
    });
    let res = verbs::patch(
        sim,
        &def,
        "",
        name,
        Part::Main,
        PatchType::Strategic,
        &body,
        &writer(MANAGER),
    );
    match res {
        Ok(_) => {}
        // The node changed since it was read: that change is an event of
        // its own, and the controller comes back to it.
        Err(e) if e.code == 409 => {}
        Err(e) => {
            tracing::debug!(node = %name, error = %e.message, "{MANAGER} could not write taints");
        }
    }
}

/// Makes a node report `health` in its Ready condition, as its kubelet (or,
/// for an unreachable node, the node controller) would write it. The node
/// lifecycle controller then puts on or takes off the matching taints.
pub fn set_node_health(sim: &SimState, node: &str, health: NodeHealth) {
    let Some(current) = sim.store().get(&Gr::nodes(), "", node) else {
        return;
    };
    let (status, reason, message, manager) = match health {
        NodeHealth::Ready => (
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            "kubelet",
        ),
        NodeHealth::NotReady => (
            "False",
            "KubeletNotReady",
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized",
            "kubelet",
        ),
        NodeHealth::Unreachable => (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
            MANAGER,
        ),
    };
    let now = meta::now_time();
    let mut conditions: Vec<Value> = current["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = json!({
        "type": "Ready", "status": status, "reason": reason, "message": message,
        "lastHeartbeatTime": now, "lastTransitionTime": now,
    });
    match conditions.iter_mut().find(|c| c["type"] == "Ready") {
        Some(c) => {
            if c["status"] == status {
                return;
            }
            *c = ready;
        }
        None => conditions.push(ready),
    }
    write_status(
        sim,
        &Gr::nodes(),
        "",
        node,
        manager,
        json!({"conditions": conditions}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(taints: &[Value]) -> Vec<String> {
        taints
            .iter()
            .map(|t| {
                format!(
                    "{}:{}",
                    t["key"].as_str().unwrap(),
                    t["effect"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn cordon_and_readiness_bring_their_taints_and_others_are_kept() {
        let node = json!({
            "spec": {"unschedulable": true, "taints": [
                {"key": "maintd.io/draining", "effect": "NoSchedule"},
                {"key": NOT_READY, "effect": "NoSchedule"},
            ]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
        });
        assert_eq!(
            keys(&taints_for(&node)),
            [
                "maintd.io/draining:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule",
                "node.kubernetes.io/unreachable:NoSchedule",
                "node.kubernetes.io/unreachable:NoExecute",
            ]
        );
    }

    #[test]
    fn an_uncordoned_ready_node_loses_only_the_controllers_taints() {
        let node = json!({
            "spec": {"taints": [
                {"key": UNSCHEDULABLE, "effect": "NoSchedule"},
                {"key": UNSCHEDULABLE, "effect": "NoExecute"},
                {"key": NOT_READY, "effect": "NoExecute", "timeAdded": "2025-01-01T00:00:00Z"},
                {"key": "example.com/gpu", "effect": "NoSchedule"},
            ]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        });
        assert_eq!(
            keys(&taints_for(&node)),
            [
                "node.kubernetes.io/unschedulable:NoExecute",
                "example.com/gpu:NoSchedule"
            ]
        );
    }
}
