//! The ReplicaSet controller: keeps the count of active pods at
//! `spec.replicas`, placing a new set's first pods on its initial node.

use std::collections::HashSet;

use serde_json::json;

use super::INITIAL_NODE_ANNOTATION;
use super::pods::{create_pod, new_pod, owned_pods};
use super::scheduler::schedule;
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::{self, DeleteOptions, write_status};

pub(super) fn replicaset(sim: &SimState, ns: &str, name: &str, placed: &mut HashSet<String>) {
    let Some(rs) = sim.store().get(&Gr::replicasets(), ns, name) else {
        return;
    };
    if meta::is_terminating(&rs) {
        return;
    }
    let want = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let pods = owned_pods(sim, ns, meta::uid(&rs));
    let active: Vec<_> = pods
        .iter()
        .filter(|p| {
            !meta::is_terminating(p)
                && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .collect();
    let initial = meta::annotation(&rs, INITIAL_NODE_ANNOTATION).map(str::to_string);
    let first = placed.insert(meta::uid(&rs).to_string());
    if active.len() < want {
        for _ in active.len()..want {
            let node = match (&initial, first && pods.is_empty()) {
                (Some(n), true) => Some(n.clone()),
                _ => schedule(sim, &rs["spec"]["template"]["spec"]),
            };
            create_pod(
                sim,
                "replicaset-controller",
                new_pod(&rs, "apps/v1", "ReplicaSet", node.as_deref(), vec![]),
            );
        }
    } else if active.len() > want {
        let Some(def) = sim.store().resource(&Gr::pods()) else {
            return;
        };
        for p in active.iter().rev().take(active.len() - want) {
            let _ = verbs::delete(sim, &def, ns, meta::name(p), &DeleteOptions::default());
        }
    }
    let ready = active.iter().filter(|p| meta::pod_ready(p)).count();
    let status = json!({"replicas": active.len(), "readyReplicas": ready, "availableReplicas": ready, "fullyLabeledReplicas": active.len(), "observedGeneration": rs["metadata"]["generation"]});
    write_status(
        sim,
        &Gr::replicasets(),
        ns,
        name,
        "replicaset-controller",
        status,
    );
}
