//! The DaemonSet controller: one pod per node the template fits, unless a
//! taint the pod does not tolerate keeps it off.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::pods::{create_pod, new_pod, owned_pods};
use super::scheduler::fits;
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::write_status;

/// Tolerations the DaemonSet controller adds to every DaemonSet pod.
fn daemonset_tolerations() -> Vec<Value> {
    let mut t: Vec<Value> = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    .iter()
    .map(|k| json!({"key": k, "operator": "Exists", "effect": "NoExecute"}))
    .collect();
    for k in [
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        t.push(json!({"key": k, "operator": "Exists", "effect": "NoSchedule"}));
    }
    t
}

pub(super) fn daemonset(sim: &SimState, ns: &str, name: &str) {
    let Some(ds) = sim.store().get(&Gr::daemonsets(), ns, name) else {
        return;
    };
    if meta::is_terminating(&ds) {
        return;
    }
    let mut tpl_spec = ds["spec"]["template"]["spec"].clone();
    let mut tol = tpl_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    tol.extend(daemonset_tolerations());
    tpl_spec["tolerations"] = Value::Array(tol);
    let mut by_node: HashMap<String, Vec<Arc<Value>>> = HashMap::new();
    for pod in owned_pods(sim, ns, meta::uid(&ds)) {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        by_node.entry(node.to_string()).or_default().push(pod);
    }
    let (mut desired, mut current, mut ready) = (0, 0, 0);
    let nodes = sim.store().list(&Gr::nodes(), None);
    for node in nodes {
        let node_name = meta::name(&node);
        let here = by_node
            .get(node_name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let eligible = fits(&tpl_spec, &node);
        if eligible {
            desired += 1;
        }
        if !here.is_empty() {
            current += 1;
            ready += here.iter().filter(|p| meta::pod_ready(p)).count();
            continue;
        }
        // No pod here (a terminating one still counts above): create one,
        // unless a taint the pod does not tolerate keeps it off.
        if eligible {
            create_pod(
                sim,
                "daemonset-controller",
                new_pod(
                    &ds,
                    "apps/v1",
                    "DaemonSet",
                    Some(node_name),
                    daemonset_tolerations(),
                ),
            );
        }
    }
    let status = json!({"desiredNumberScheduled": desired, "currentNumberScheduled": current, "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": current, "numberMisscheduled": 0, "observedGeneration": ds["metadata"]["generation"]});
    write_status(
        sim,
        &Gr::daemonsets(),
        ns,
        name,
        "daemonset-controller",
        status,
    );
}
