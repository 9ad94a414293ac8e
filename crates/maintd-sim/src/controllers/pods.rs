//! What the workload controllers share: the pods a controller owns, and a
//! new pod made from a controller's template.

use std::sync::Arc;

use serde_json::{Value, json};

use super::writer;
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs;

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

/// The hash a controller names a pod template's revision by: FNV-1a (32
/// bits) of the template's JSON with its keys sorted, written the way
/// upstream writes `pod-template-hash` and controller revision names
/// (`rand.SafeEncodeString` of the decimal sum). Upstream hashes the Go
/// struct after defaulting, so the values differ from a real cluster's;
/// what matters is that an unchanged template keeps its hash and a changed
/// one gets a new one.
pub(super) fn template_hash(template: &Value) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    canonical(template, &mut eat);
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// Feeds `v` as JSON with object keys in sorted order, so that the same
/// template hashes the same however its keys were ordered on the wire.
fn canonical(v: &Value, eat: &mut impl FnMut(&[u8])) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            eat(b"{");
            for k in keys {
                eat(Value::String(k.clone()).to_string().as_bytes());
                eat(b":");
                canonical(&m[k], eat);
                eat(b",");
            }
            eat(b"}");
        }
        Value::Array(items) => {
            eat(b"[");
            for i in items {
                canonical(i, eat);
                eat(b",");
            }
            eat(b"]");
        }
        other => eat(other.to_string().as_bytes()),
    }
}

/// A pod that has finished (Succeeded or Failed): it no longer counts as
/// one of its controller's replicas.
pub(super) fn finished(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// Running and Ready: what an ordered StatefulSet waits for, and what a
/// Deployment counts as available (the sim has no minReadySeconds).
pub(super) fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && meta::pod_ready(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_hashes_the_same_whatever_its_key_order() {
        let a: Value = serde_json::from_str(r#"{"metadata":{"labels":{"app":"web","tier":"front"}},"spec":{"containers":[{"name":"web","image":"nginx"}]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"spec":{"containers":[{"image":"nginx","name":"web"}]},"metadata":{"labels":{"tier":"front","app":"web"}}}"#).unwrap();
        assert_eq!(template_hash(&a), template_hash(&b));
        let mut c = a.clone();
        c["spec"]["containers"][0]["image"] = json!("nginx:2");
        assert_ne!(template_hash(&a), template_hash(&c));
        assert!(
            template_hash(&a)
                .chars()
                .all(|ch| "bcdfghjklmnpqrstvwxz2456789".contains(ch))
        );
    }
}
