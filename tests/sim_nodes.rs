//! What the simulated cluster does to and for its nodes, seen through
//! kube-rs: the node lifecycle controller's taints (cordon, NotReady,
//! unreachable) and the kubelet's mirror pods.

use crate::common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use maintd_sim::controllers::NodeHealth;
use maintd_sim::scenario::Scenario;
use maintd_sim::{SimCluster, SimConfig};
use serde_json::json;

/// The node's taints as "key:effect", in order.
async fn taints(nodes: &Api<Node>, name: &str) -> Vec<String> {
    nodes
        .get(name)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

async fn wait_taints(nodes: &Api<Node>, name: &str, want: &[&str]) {
    eventually(&format!("{name} carries exactly {want:?}"), || async {
        taints(nodes, name).await == want
    })
    .await;
}

#[tokio::test]
async fn a_cordon_brings_the_unschedulable_taint_and_an_uncordon_takes_it_away() {
    let sim = sim().await;
    let client = sim.client();
    create_node(&client, "n1").await;
    let nodes: Api<Node> = Api::all(client.clone());
    // Someone else's taint, which the controller must leave alone.
    taint(&client, "n1", "example.com/gpu", Some("a100")).await;
    let cordon = |on: bool| {
        let nodes = nodes.clone();
        async move {
            let body =
                json!({"spec": {"unschedulable": if on { json!(true) } else { json!(null) }}});
            nodes
                .patch("n1", &PatchParams::default(), &Patch::Strategic(body))
                .await
                .unwrap();
        }
    };
    cordon(true).await;
    wait_taints(
        &nodes,
        "n1",
        &[
            "example.com/gpu:NoSchedule",
            "node.kubernetes.io/unschedulable:NoSchedule",
        ],
    )
    .await;
    cordon(false).await;
    wait_taints(&nodes, "n1", &["example.com/gpu:NoSchedule"]).await;
    // Put on by hand on a schedulable node, it is taken off, as upstream does.
    taint(&client, "n1", "node.kubernetes.io/unschedulable", Some("")).await;
    wait_taints(&nodes, "n1", &["example.com/gpu:NoSchedule"]).await;
}

#[tokio::test]
async fn a_node_that_is_not_ready_or_unreachable_is_tainted_until_it_is_ready() {
    let sim = sim().await;
    let client = sim.client();
    create_node(&client, "n1").await;
    let nodes: Api<Node> = Api::all(client.clone());
    sim.state.set_node_health("n1", NodeHealth::NotReady);
    wait_taints(
        &nodes,
        "n1",
        &[
            "node.kubernetes.io/not-ready:NoSchedule",
            "node.kubernetes.io/not-ready:NoExecute",
        ],
    )
    .await;
    let node = nodes.get("n1").await.unwrap();
    let no_execute = node.spec.unwrap().taints.unwrap().remove(1);
    assert!(no_execute.time_added.is_some(), "{no_execute:?}");
    let ready = node.status.unwrap().conditions.unwrap();
    let ready = ready.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("KubeletNotReady"))
    );

    sim.state.set_node_health("n1", NodeHealth::Unreachable);
    wait_taints(
        &nodes,
        "n1",
        &[
            "node.kubernetes.io/unreachable:NoSchedule",
            "node.kubernetes.io/unreachable:NoExecute",
        ],
    )
    .await;
    sim.state.set_node_health("n1", NodeHealth::Ready);
    wait_taints(&nodes, "n1", &[]).await;
}

const STATIC: &str = "
objects:
- {apiVersion: v1, kind: Node, metadata: {name: node-a}}
staticPods:
  node-a:
  - apiVersion: v1
    kind: Pod
    metadata: {name: etcd, namespace: kube-system, annotations: {sim.maintd.io/shutdown-seconds: '0.5'}}
    spec: {priorityClassName: system-node-critical, containers: [{name: etcd, image: registry.k8s.io/etcd:3.5}]}
";

/// The kubelet stops a static pod whose manifest is gone, then removes its
/// mirror pod with grace 0: the mirror pod never shows a graceful deletion.
#[tokio::test]
async fn a_mirror_pod_goes_at_once_after_its_static_pod_stopped() {
    let scenario = Scenario::from_yaml(STATIC).unwrap();
    let config = SimConfig {
        static_pod_poll: Duration::from_millis(50),
        ..SimConfig::default()
    };
    let sim = SimCluster::start_with_scenario(config, &scenario)
        .await
        .unwrap();
    sim.wait_settled(PATIENCE).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "kube-system");
    let mirror = pods.get("etcd-node-a").await.unwrap();
    let rv = mirror.metadata.resource_version.clone().unwrap();
    let wp = WatchParams::default().fields("metadata.name=etcd-node-a");
    let mut events = pods.watch(&wp, &rv).await.unwrap().boxed();

    let root = sim.state.config.static_pod_root.clone().unwrap();
    std::fs::rename(root.join("node-a/etcd.yaml"), root.join("etcd.yaml.away")).unwrap();
    let first = tokio::time::timeout(PATIENCE, events.try_next())
        .await
        .expect("the mirror pod goes")
        .unwrap()
        .expect("the watch ended");
    match first {
        WatchEvent::Deleted(gone) => {
            assert_eq!(gone.metadata.uid, mirror.metadata.uid);
            assert_eq!(gone.metadata.deletion_timestamp, None);
        }
        other => panic!("the first change of the mirror pod is its removal, not {other:?}"),
    }
}
