//! The agent draining a node that runs the usual workloads, against a
//! simulated cluster with the controllers a real one has: a StatefulSet
//! whose pods come back under their own names elsewhere, and the node
//! lifecycle controller's taint that follows maintd's cordon.

use crate::common;

use common::agent::RunningAgent;
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use maintd::drain::progress::EventKind;
use maintd_sim::SimCluster;
use maintd_sim::SimConfig;
use maintd_sim::scenario::Scenario;

/// Two nodes; a StatefulSet of two pods, both first placed on node-a, under
/// a budget that lets one go at a time.
const STATEFUL: &str = r#"
objects:
- {apiVersion: v1, kind: Node, metadata: {name: node-a}}
- {apiVersion: v1, kind: Node, metadata: {name: node-b}}
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, annotations: {sim.maintd.io/initial-node: node-a}}
  spec:
    replicas: 2
    serviceName: db
    selector: {matchLabels: {app: db}}
    template:
      metadata:
        labels: {app: db}
        annotations: {sim.maintd.io/startup-seconds: '0.3', sim.maintd.io/shutdown-seconds: '1.5'}
      spec: {containers: [{name: db, image: registry.example/db:1}]}
- apiVersion: policy/v1
  kind: PodDisruptionBudget
  metadata: {name: db}
  spec: {maxUnavailable: 1, selector: {matchLabels: {app: db}}}
"#;

async fn stateful() -> SimCluster {
    let scenario = Scenario::from_yaml(STATEFUL).unwrap();
    let sim = SimCluster::start_with_scenario(SimConfig::default(), &scenario)
        .await
        .unwrap();
    sim.wait_settled(PATIENCE).await.unwrap();
    sim
}

fn node_of(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default()
}

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

/// kured's "drain stuck on a fixed-name pod": each StatefulSet pod comes
/// back under the same name on the other node while the drain goes on. The
/// agent evicts each original pod once, never its namesake, and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statefulset_pods_drain_one_at_a_time_and_come_back_by_name_on_the_other_node() {
    let sim = stateful().await;
    let client = sim.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let before: Vec<Pod> = pods_on(&client, "node-a").await;
    let mut originals: Vec<(String, String)> = before
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.uid.clone().unwrap(),
            )
        })
        .collect();
    originals.sort();
    assert_eq!(
        originals
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["db-0", "db-1"],
        "both pods start on node-a"
    );

    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    agent.wait_event(EventKind::DrainCompleted).await;

    // The last pod's namesake is made just after the drain saw it go.
    eventually("both pods are back", || {
        let pods = pods.clone();
        async move {
            let items = pods.list(&Default::default()).await.unwrap().items;
            items.len() == 2 && items.iter().all(is_ready)
        }
    })
    .await;
    for (name, old_uid) in &originals {
        let p = pods.get(name).await.unwrap();
        assert_ne!(
            p.metadata.uid.as_ref(),
            Some(old_uid),
            "{name} is a new pod"
        );
        assert_eq!(node_of(&p), "node-b", "{name} came back on the other node");
    }
    // Only the agent evicts in this test.
    let mut evicted_uids: Vec<String> = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "evict" && e.code == 201)
        .map(|e| e.uid.unwrap_or_default())
        .collect();
    evicted_uids.sort();
    let mut original_uids: Vec<String> = originals.into_iter().map(|(_, u)| u).collect();
    original_uids.sort();
    assert_eq!(
        evicted_uids, original_uids,
        "one eviction per original pod, none of a namesake"
    );
    agent.stop().await;
}

/// maintd's cordon brings the node lifecycle controller's
/// `node.kubernetes.io/unschedulable` taint; maintd's undo takes off only
/// its own marks and leaves that taint to the controller, which removes it
/// once the node is uncordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_undo_the_node_carries_no_taint_of_maintd_nor_of_its_cordon() {
    let sim = stateful().await;
    let client = sim.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&client, "node-a", "maintd.io/drain", Some("x")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    eventually("node-a carries maintd's taint and its cordon's", || {
        let nodes = nodes.clone();
        async move {
            let keys = taint_keys(&nodes.get("node-a").await.unwrap());
            keys.contains(&"maintd.io/draining:NoSchedule".to_string())
                && keys.contains(&"node.kubernetes.io/unschedulable:NoSchedule".to_string())
        }
    })
    .await;

    taint(&client, "node-a", "maintd.io/drain", None).await;
    agent.wait_event(EventKind::UndoCompleted).await;
    eventually("node-a is back in service with no taint", || {
        let nodes = nodes.clone();
        async move {
            let node = nodes.get("node-a").await.unwrap();
            taint_keys(&node).is_empty() && node.spec.and_then(|s| s.unschedulable) != Some(true)
        }
    })
    .await;
    agent.stop().await;
}
