//! Helpers of the EvictionRequest tests: a cluster that serves the API
//! (with the simulator's evictionrequest-controller, or, as Kubernetes
//! 1.37.2, without one), dynamic clients of its kinds, and the shapes of
//! statuses they wait on.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use super::common::*;
use maintd_sim::lifecycle::{
    LIVE_MIGRATION, LIVE_MIGRATION_ANNOTATION, MANAGING_CONTROLLER_PRIORITY,
};
use maintd_sim::{SimCluster, SimConfig};

pub const REQUESTS: &str = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests";

/// A cluster that serves the API and runs the simulator's
/// evictionrequest-controller and responders (no Kubernetes release ships
/// one yet): for tests of what responders do.
pub async fn served() -> SimCluster {
    serving(true).await
}

/// A cluster that serves the API and acts on no request, as Kubernetes
/// 1.37.2 with the feature gate on.
pub async fn served_without_controller() -> SimCluster {
    serving(false).await
}

async fn serving(controller: bool) -> SimCluster {
    let sim = sim_with(SimConfig {
        eviction_requests: true,
        eviction_request_controller: controller,
        disruption_lag: std::time::Duration::ZERO,
        ..SimConfig::default()
    })
    .await;
    create_node(&sim.client(), "node-a").await;
    sim
}

pub fn api(sim: &SimCluster, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("lifecycle.k8s.io", "v1alpha1", kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::default_namespaced_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// A running pod on node-a; `extra` is merged into its JSON.
pub async fn running_pod(sim: &SimCluster, name: &str, extra: Value) -> String {
    let mut pod = pod_json("default", name, "node-a", json!({"app": name}));
    merge(&mut pod, extra);
    post_pod(sim, &pod).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(sim.client());
    eventually("the pod runs", || {
        let pods = pods.clone();
        async move { pods.get(name).await.is_ok_and(|p| is_ready(&p)) }
    })
    .await;
    pods.get(name).await.unwrap().metadata.uid.unwrap()
}

pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

pub async fn request_eviction(sim: &SimCluster, name: &str, pod: &str, uid: &str) {
    let er: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": name},
        "spec": {"target": {"pod": {"name": pod, "uid": uid}}, "requester": format!("{name}.example.io/drain"), "intent": "Eviction"},
    }))
    .unwrap();
    api(sim, "EvictionRequest")
        .create(&PostParams::default(), &er)
        .await
        .unwrap();
}

/// Status of an object of `kind`, Null while it is absent.
pub async fn status(sim: &SimCluster, kind: &str, name: &str) -> Value {
    match api(sim, kind).get_opt(name).await.unwrap() {
        Some(o) => o.data["status"].clone(),
        None => Value::Null,
    }
}

pub fn condition(status: &Value, kind: &str) -> String {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .map(|c| {
            format!(
                "{}/{}",
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_default()
}

pub async fn pod_exists(sim: &SimCluster, name: &str) -> bool {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(sim.client());
    pods.get_opt(name)
        .await
        .unwrap()
        .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
}

pub async fn wait_for(
    sim: &SimCluster,
    what: &str,
    kind: &str,
    name: &str,
    check: impl Fn(&Value) -> bool,
) {
    eventually(what, || async { check(&status(sim, kind, name).await) }).await;
}

/// A pod whose managing controller live-migrates it, taking `seconds`.
pub fn migrating(seconds: &str) -> Value {
    json!({
        "metadata": {"annotations": {LIVE_MIGRATION_ANNOTATION: seconds}},
        "spec": {"evictionResponders": [
            {"name": LIVE_MIGRATION, "priority": MANAGING_CONTROLLER_PRIORITY}
        ]},
    })
}

pub fn in_progress(s: &Value) -> bool {
    s["targetResponders"][0]
        == json!({"name": LIVE_MIGRATION, "priority": MANAGING_CONTROLLER_PRIORITY, "state": "Active"})
        && s["responders"][0]["heartbeatTime"].is_string()
        && s["responders"][0]["expectedCompletionTime"].is_string()
        && s["responders"][0]["completionTime"].is_null()
}
