//! EvictionRequests (lifecycle.k8s.io/v1alpha1) on Kubernetes 1.37 with the
//! `EvictionRequestAPI` gate on: the request the agent makes for a pod that
//! declares responders of its own is accepted as it is written (the API
//! that merged: `spec.requester`, not the KEP's `requesterName`). 1.37
//! serves the API without a controller acting on it, so a request nothing
//! acts on falls back to the Eviction API after the operator's bound, and
//! says so; a request whose responder reports progress (here the test
//! plays the controller's and the responder's part, in the Eviction object
//! Kubernetes validates) is followed until the responder has the pod gone.

use crate::common;

use std::time::Duration;

use common::agent::RunningAgent;
use common::real::{PATIENCE, Real};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use maintd::config::Config;
use maintd::drain::progress::{EventKind, Phase};
use serde_json::{Value, json};

const RESPONDER: &str = "migration.example.com/migrator";

/// A pod on `node` that declares a responder of its own (priority 5000).
async fn responding_pod(
    real: &Real,
    admin: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
) -> Pod {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "evictionResponders": [{"name": RESPONDER, "priority": 5000}],
            "containers": [{"name": "vm", "image": "registry.example/vm:1"}],
        },
    });
    crate::real_drain::create(real, &pod);
    Api::<Pod>::namespaced(admin.clone(), ns)
        .get(name)
        .await
        .expect("the pod, with its responders kept")
}

async fn taint(admin: &kube::Client, node: &str) {
    let patch = json!({"spec": {"taints": [{"key": "maintd.io/drain", "effect": "NoSchedule"}]}});
    Api::<Node>::all(admin.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

fn requests(real: &Real, ns: &str) -> Vec<Value> {
    let out = real.kubectl_ok(&[
        "get",
        "evictionrequests.lifecycle.k8s.io",
        "-n",
        ns,
        "-o",
        "json",
    ]);
    serde_json::from_str::<Value>(&out).unwrap_or_default()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn agent(real: &Real, node: &str, bound: Duration) -> (RunningAgent, tempfile::TempDir) {
    let manifests = tempfile::tempdir().unwrap();
    let mut config = Config::for_node(node, manifests.path().to_path_buf());
    config.eviction_request_progress_timeout = bound;
    let agent = RunningAgent::start_with(config, real.agent_client(node).await);
    (agent, manifests)
}

/// Nothing acts on the request (Kubernetes 1.37 has no controller for
/// it): the API server takes it as the agent wrote it, and after the bound
/// the agent withdraws it, says why, and evicts the pod through the
/// Eviction API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_nothing_acts_on_falls_back_to_the_eviction_api() {
    let real = Real::get();
    let admin = real.admin().await;
    let (ns, node) = ("real-er", "real-er-a".to_string());
    real.namespace(&admin, ns).await;
    real.node(&admin, &node, json!({})).await;
    let pod = responding_pod(&real, &admin, ns, "vm-1", &node).await;
    let uid = pod.metadata.uid.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&pod.spec).unwrap()["evictionResponders"][0]["priority"],
        5000,
        "the gate is on: the pod keeps its responders"
    );
    let (agent, _m) = agent(&real, &node, Duration::from_secs(3)).await;
    taint(&admin, &node).await;

    // The request, as Kubernetes stored it.
    let real_ref = &real;
    common::eventually_within(
        "the agent's EvictionRequest is accepted",
        PATIENCE,
        || async move { !requests(real_ref, ns).is_empty() },
    )
    .await;
    let made = requests(&real, ns).remove(0);
    assert_eq!(made["metadata"]["name"], format!("maintd-{uid}"));
    assert_eq!(made["spec"]["requester"], "maintd.io/drain");
    assert_eq!(made["spec"]["intent"], "Eviction");
    assert_eq!(
        made["spec"]["target"]["pod"],
        json!({"name": "vm-1", "uid": uid})
    );
    assert_eq!(made["metadata"]["labels"]["maintd.io/node"], node.as_str());
    // The body the agent sent decodes into the merged types with nothing
    // left over.
    let typed: k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest =
        serde_json::from_value(made.clone()).expect("the merged type");
    assert_eq!(typed.spec.requester, "maintd.io/drain");

    agent
        .wait_for_within("drained through the Eviction API", PATIENCE, |_| {
            agent.progress.status().phase == Phase::Drained
        })
        .await;
    let said = agent.events().iter().any(|e| {
        e.message
            .contains("no controller acted on its EvictionRequest")
    });
    assert!(said, "the fallback is said: {:?}", agent.events());
    assert!(common::pods_on(&admin, &node).await.is_empty());
    common::eventually_within(
        "the request is withdrawn and deleted",
        PATIENCE,
        || async move { requests(real_ref, ns).is_empty() },
    )
    .await;
    agent.stop().await;
    real.remove_nodes(&admin, &[node]).await;
    real.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}

/// The Eviction the controller would make of the request, its responder
/// active and saying how far it is, as Kubernetes 1.37 validates it.
fn eviction(ns: &str, pod: &Pod, now: &str) -> (Value, Value) {
    let uid = pod.metadata.uid.clone().unwrap();
    let name = format!("vm-2-{}", &uid[..8]);
    let object = json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"maintd.io/drain": "requester", RESPONDER: "responder"}},
        "spec": {"target": {"pod": {"name": "vm-2", "uid": uid}}},
    });
    let status = json!({"status": {
        "targetResponders": [
            {"name": RESPONDER, "priority": 5000, "state": "Active"},
            {"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Inactive"},
        ],
        "responders": [
            {"name": RESPONDER, "startTime": now, "heartbeatTime": now,
             "message": "live migration to another node, 40% copied"},
            {"name": "imperative-eviction.k8s.io/evictor"},
        ],
        "requesters": [{"name": "maintd.io/drain", "intent": "Eviction"}],
    }});
    (object, status)
}

/// A responder at work: the agent follows what it says (its words are the
/// pod's blocker), past the bound, until the responder has the pod gone;
/// then the node is drained, and the request retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_a_responder_works_on_is_followed_until_the_pod_is_gone() {
    let real = Real::get();
    let admin = real.admin().await;
    let (ns, node) = ("real-er-responder", "real-er-b".to_string());
    real.namespace(&admin, ns).await;
    real.node(&admin, &node, json!({})).await;
    let pod = responding_pod(&real, &admin, ns, "vm-2", &node).await;
    let (agent, _m) = agent(&real, &node, Duration::from_secs(5)).await;
    taint(&admin, &node).await;
    let real_ref = &real;
    common::eventually_within("the agent's EvictionRequest", PATIENCE, || async move {
        !requests(real_ref, ns).is_empty()
    })
    .await;

    // The test plays the controller and the responder.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let (object, status) = eviction(ns, &pod, &now);
    crate::real_drain::create(&real, &object);
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    let (ok, _, err) = common::real::kubectl(
        &real.admin_kubeconfig(),
        &[
            "patch",
            "evictions.lifecycle.k8s.io",
            &name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
        None,
    );
    assert!(ok, "Kubernetes takes the responder's status: {err}");
    agent
        .wait_for_within(
            "the responder's words are the pod's blocker",
            PATIENCE,
            |_| {
                agent
                    .progress
                    .status()
                    .blockers
                    .iter()
                    .any(|b| b.reason.contains(RESPONDER) && b.reason.contains("40% copied"))
            },
        )
        .await;
    // Past the bound, still followed: the responder is at work.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !agent
            .events()
            .iter()
            .any(|e| e.message.contains("no controller acted")),
        "no fallback while a responder works"
    );
    assert_eq!(common::pods_on(&admin, &node).await.len(), 1);
    assert!(
        !agent
            .events()
            .iter()
            .any(|e| e.event == EventKind::PodEvicted),
        "not evicted behind the responder's back"
    );

    // The responder has the pod gone.
    Api::<Pod>::namespaced(admin.clone(), ns)
        .delete("vm-2", &Default::default())
        .await
        .unwrap();
    agent
        .wait_for_within("drained", PATIENCE, |_| {
            agent.progress.status().phase == Phase::Drained
        })
        .await;
    common::eventually_within("the request retired", PATIENCE, || async move {
        requests(real_ref, ns).is_empty()
    })
    .await;
    agent.stop().await;
    real.remove_nodes(&admin, &[node]).await;
    real.kubectl(&["delete", "namespace", ns, "--wait=false"]);
}
