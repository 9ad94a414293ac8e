//! The scheduler's part: taints and tolerations, node selectors, and
//! binding pending pods to the Ready, schedulable node with the fewest pods.

use serde_json::{Value, json};

use super::writer;
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::{self, Part, PatchType};

/// Kubernetes toleration semantics for one taint.
pub fn tolerates(tolerations: &Value, taint: &Value) -> bool {
    tolerations.as_array().is_some_and(|ts| {
        ts.iter().any(|t| {
            let key = t["key"].as_str().unwrap_or("");
            let effect = t["effect"].as_str().unwrap_or("");
            let op = t["operator"].as_str().unwrap_or("Equal");
            let key_ok =
                key.is_empty() && op == "Exists" || key == taint["key"].as_str().unwrap_or("");
            let effect_ok = effect.is_empty() || effect == taint["effect"].as_str().unwrap_or("");
            let value_ok = op == "Exists"
                || t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("");
            key_ok && effect_ok && value_ok
        })
    })
}

/// Whether a pod with this spec may be placed on the node by taints and
/// node selector (not readiness or capacity).
pub fn fits(spec: &Value, node: &Value) -> bool {
    let taints_ok = node["spec"]["taints"].as_array().is_none_or(|taints| {
        taints
            .iter()
            .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
            .all(|t| tolerates(&spec["tolerations"], t))
    });
    let selector_ok = spec["nodeSelector"]
        .as_object()
        .is_none_or(|sel| sel.iter().all(|(k, v)| node["metadata"]["labels"][k] == *v));
    taints_ok && selector_ok
}

/// The node the scheduler would pick: Ready, schedulable, fitting, with
/// room, and the fewest pods.
pub fn schedule(sim: &SimState, spec: &Value) -> Option<String> {
    let store = sim.store();
    store
        .list(&Gr::nodes(), None)
        .into_iter()
        .filter(|n| meta::node_ready(n) && n["spec"]["unschedulable"] != true && fits(spec, n))
        .filter_map(|n| {
            let name = meta::name(&n).to_string();
            let count = store
                .pods_on(&name)
                .iter()
                .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
                .count();
            let cap = n["status"]["allocatable"]["pods"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or(110usize);
            (count < cap).then_some((count, name))
        })
        .min()
        .map(|(_, n)| n)
}

/// Binds pods that have no node yet, as the scheduler does.
pub(super) fn bind_pending(sim: &SimState) {
    let pending: Vec<_> = sim
        .store()
        .list(&Gr::pods(), None)
        .into_iter()
        .filter(|p| {
            p["spec"]["nodeName"].as_str().unwrap_or("").is_empty() && !meta::is_terminating(p)
        })
        .collect();
    let Some(def) = sim.store().resource(&Gr::pods()) else {
        return;
    };
    for pod in pending {
        if let Some(node) = schedule(sim, &pod["spec"]) {
            let patch = json!({"spec": {"nodeName": node}});
            let _ = verbs::patch(
                sim,
                &def,
                meta::namespace(&pod),
                meta::name(&pod),
                Part::Main,
                PatchType::Merge,
                &patch,
                &writer("default-scheduler"),
            );
        }
    }
}
