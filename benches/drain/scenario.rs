//! The realistic scenario on the real control plane: its namespaces,
//! priority classes, budgets, ReplicaSets and DaemonSets as the file has
//! them, its nodes as KWOK nodes. `node-a` comes first and alone, so every
//! ReplicaSet pod lands on it (the simulator places them with its
//! `initial-node` annotation; here the scheduler has no other choice);
//! `node-b` and `node-c` follow, to take the replacements.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cluster::{ControlPlane, wait_until};

const PATIENCE: Duration = Duration::from_secs(300);

fn kind_order(o: &Value) -> u8 {
    match o["kind"].as_str().unwrap_or("") {
        "Namespace" => 0,
        "PriorityClass" => 1,
        "PodDisruptionBudget" => 2,
        _ => 3,
    }
}

fn kwok_node(mut node: Value) -> Value {
    let name = node["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    node["metadata"]["annotations"] = json!({"kwok.x-k8s.io/node": "fake"});
    node["status"] = json!({"nodeInfo": {"bootID": format!("{name}-boot-1")}});
    node
}

fn apply(cp: &ControlPlane, objects: &[Value]) {
    // Without client-side validation: a Node registers with part of its
    // status (its boot ID), as a kubelet does.
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let (ok, _, err) = cp.kubectl(
        &["create", "--validate=false", "-f", "-"],
        Some(&list.to_string()),
    );
    assert!(ok, "creating the realistic scenario's objects: {err}");
}

async fn pods_on(admin: &kube::Client, node: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::all(admin.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates the scenario and returns once every pod is Ready on its node
/// and every budget's status counts them.
pub async fn create(cp: &ControlPlane, admin: &kube::Client) {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/realistic.yaml");
    let sc = maintd_sim::scenario::load(&path).expect("the realistic scenario");
    let (nodes, mut rest): (Vec<Value>, Vec<Value>) =
        sc.objects.into_iter().partition(|o| o["kind"] == "Node");
    rest.sort_by_key(kind_order);
    let (first, others): (Vec<Value>, Vec<Value>) = nodes
        .into_iter()
        .map(kwok_node)
        .partition(|n| n["metadata"]["name"] == "node-a");
    apply(cp, &first);
    apply(cp, &rest);
    let want_a: usize = rest
        .iter()
        .filter(|o| o["kind"] == "ReplicaSet")
        .map(|o| o["spec"]["replicas"].as_u64().unwrap_or(0) as usize)
        .sum::<usize>()
        + rest.iter().filter(|o| o["kind"] == "DaemonSet").count();
    wait_until("every pod of node-a Ready", PATIENCE, || async move {
        let ready_a = pods_on(admin, "node-a")
            .await
            .iter()
            .filter(|p| ready(p))
            .count();
        (ready_a == want_a, format!("{ready_a} of {want_a}"))
    })
    .await;
    apply(cp, &others);
    let daemonsets = rest.iter().filter(|o| o["kind"] == "DaemonSet").count();
    for n in ["node-b", "node-c"] {
        wait_until(
            &format!("{n}'s DaemonSet pods Ready"),
            PATIENCE,
            || async move {
                let r = pods_on(admin, n).await.iter().filter(|p| ready(p)).count();
                (r == daemonsets, format!("{r} of {daemonsets}"))
            },
        )
        .await;
    }
    // Budgets count what they cover: their status has caught up.
    let pdbs = Api::<DynamicObject>::all_with(
        admin.clone(),
        &ApiResource::erase::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(&()),
    );
    wait_until("every budget's status counts its pods", PATIENCE, || {
        let pdbs = pdbs.clone();
        async move {
            let list = pdbs
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let behind: Vec<String> = list
                .iter()
                .filter(|b| {
                    let st = &b.data["status"];
                    st["observedGeneration"] != json!(b.metadata.generation)
                        || st["expectedPods"].as_i64().unwrap_or(0) == 0
                        || st["currentHealthy"] != st["expectedPods"]
                })
                .map(|b| b.metadata.name.clone().unwrap_or_default())
                .collect();
            (
                !list.is_empty() && behind.is_empty(),
                format!("behind: {behind:?}"),
            )
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
}

pub async fn node_uid(admin: &kube::Client, node: &str) -> String {
    let api: Api<Node> = Api::all(admin.clone());
    api.get(node)
        .await
        .ok()
        .and_then(|n| n.metadata.uid)
        .expect("the node's uid")
}

/// Returns once `node`'s agent has written its NodeDrain (it has synced).
pub async fn wait_idle(admin: &kube::Client, node: &str) {
    let drains = Api::<DynamicObject>::all_with(
        admin.clone(),
        &ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeDrain".into(),
            plural: "nodedrains".into(),
        },
    );
    wait_until("the agent's NodeDrain", PATIENCE, || {
        let drains = drains.clone();
        async move {
            (
                drains.get_opt(node).await.ok().flatten().is_some(),
                String::new(),
            )
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// The trigger: a drain taint on the node, as an admin or a tool sets it.
pub async fn taint(admin: &kube::Client, node: &str) {
    let api: Api<Node> = Api::all(admin.clone());
    let patch = json!({"spec": {"taints": [{"key": "maintd.io/drain", "value": "bench", "effect": "NoSchedule"}]}});
    api.patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("the drain taint");
}
