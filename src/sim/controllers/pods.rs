//! What the workload controllers share: the pods a controller owns, and a
//! new pod made from a controller's template.

use std::sync::Arc;

use serde_json::{Value, json};

use super::writer;
use crate::sim::meta;
use crate::sim::resources::Gr;
use crate::sim::state::SimState;
use crate::sim::verbs;

pub(super) fn owned_pods(sim: &SimState, ns: &str, owner_uid: &str) -> Vec<Arc<Value>> {
    sim.store()
        .list(&Gr::pods(), Some(ns))
        .into_iter()
        .filter(|p| meta::controller_of(p).is_some_and(|(_, _, uid)| uid == owner_uid))
        .collect()
}

pub(super) fn new_pod(
    owner: &Value,
    api_version: &str,
    kind: &str,
    node: Option<&str>,
    extra_tolerations: Vec<Value>,
) -> Value {
    let tpl = &owner["spec"]["template"];
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", meta::name(owner)),
            "namespace": meta::namespace(owner),
            "labels": tpl["metadata"]["labels"],
            "annotations": tpl["metadata"]["annotations"],
            "ownerReferences": [meta::controller_ref(api_version, kind, owner)],
        },
        "spec": tpl["spec"],
    });
    if let Some(n) = node {
        pod["spec"]["nodeName"] = json!(n);
    }
    if !extra_tolerations.is_empty() {
        let mut t = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        t.extend(extra_tolerations);
        pod["spec"]["tolerations"] = Value::Array(t);
    }
    if pod["spec"]["containers"].is_null() {
        pod["spec"]["containers"] = json!([{"name": "app", "image": "registry.example/app:1"}]);
    }
    pod
}

pub(super) fn create_pod(sim: &SimState, manager: &str, pod: Value) {
    let Some(def) = sim.store().resource(&Gr::pods()) else {
        return;
    };
    let ns = meta::namespace(&pod).to_string();
    if let Err(e) = verbs::create(sim, &def, Some(&ns), pod, &writer(manager), false) {
        tracing::debug!(error = %e.message, "{manager} could not create a pod");
    }
}
