//! kubectl, a real and independent client, drives the simulated cluster:
//! get, apply, cordon, and a full `kubectl drain` of the busy node of the
//! realistic scenario.

mod common;

use common::kubectl::Kubectl;

use std::path::Path;
use std::time::Duration;

use maintd::sim::{SimCluster, SimConfig, scenario};

async fn realistic() -> SimCluster {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/realistic.yaml");
    let scenario = scenario::load(&path).expect("the realistic scenario loads");
    let sim = SimCluster::start_with_scenario(SimConfig::default(), &scenario)
        .await
        .unwrap();
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("the scenario settles");
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_applies_cordons_and_drains() {
    let sim = realistic().await;
    let k = Kubectl::new(&sim);

    let nodes = k.ok(&["get", "nodes"]).await;
    for n in ["node-a", "node-b", "node-c"] {
        assert!(nodes.contains(n), "{nodes}");
    }
    assert!(nodes.contains("Ready"), "{nodes}");
    let wide = k.ok(&["get", "pods", "-A", "-o", "wide"]).await;
    assert!(wide.lines().next().unwrap().contains("NODE"), "{wide}");
    let on_a = wide.lines().filter(|l| l.contains(" node-a ")).count();
    assert_eq!(on_a, 110, "{wide}");

    let pdb = "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: from-kubectl\n  namespace: default\nspec:\n  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app: nothing-yet\n";
    let applied = k.apply_yaml(pdb).await;
    assert!(
        applied.contains("poddisruptionbudget.policy/from-kubectl created"),
        "{applied}"
    );
    let again = k.apply_yaml(pdb).await;
    assert!(
        again.contains("unchanged") || again.contains("configured"),
        "{again}"
    );
    let pdbs = k.ok(&["get", "pdb", "-n", "default"]).await;
    assert!(pdbs.contains("from-kubectl"), "{pdbs}");

    // A cordon brings the node lifecycle controller's taint; an uncordon
    // takes it away.
    let unschedulable_taint = |node: &serde_json::Value| {
        node["spec"]["taints"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["key"] == "node.kubernetes.io/unschedulable" && t["effect"] == "NoSchedule"
            })
        })
    };
    k.ok(&["cordon", "node-b"]).await;
    let b = k.json(&["get", "node", "node-b"]).await;
    assert_eq!(b["spec"]["unschedulable"], true);
    let k_ref = &k;
    common::eventually("node-b carries the unschedulable taint", || async move {
        unschedulable_taint(&k_ref.json(&["get", "node", "node-b"]).await)
    })
    .await;
    k.ok(&["uncordon", "node-b"]).await;
    common::eventually("node-b's unschedulable taint is gone", || async move {
        !unschedulable_taint(&k_ref.json(&["get", "node", "node-b"]).await)
    })
    .await;

    let out = k
        .ok(&[
            "drain",
            "node-a",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
        ])
        .await;
    assert!(out.contains("node/node-a drained"), "{out}");
    let left = k
        .json(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "spec.nodeName=node-a",
        ])
        .await;
    for pod in left["items"].as_array().unwrap() {
        let owner = pod["metadata"]["ownerReferences"][0]["kind"]
            .as_str()
            .unwrap_or("");
        let mirror = pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string();
        assert!(
            owner == "DaemonSet" || mirror,
            "only DaemonSet and mirror pods stay: {}",
            pod["metadata"]["name"]
        );
    }
}

/// A Deployment and a StatefulSet applied with kubectl roll out, and
/// kubectl says so.
/// (`kubectl create deployment` sends protobuf, which the simulator does
/// not speak yet; `apply` sends JSON.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_workloads_and_watches_them_roll_out() {
    let sim = SimCluster::start(SimConfig::default()).await.unwrap();
    let k = Kubectl::new(&sim);
    for node in ["node-a", "node-b"] {
        let yaml = format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n");
        k.apply_yaml(&yaml).await;
    }
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n  labels:\n    app: web\nspec:\n  replicas: 3\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      - name: nginx\n        image: nginx\n";
    let applied = k.apply_yaml(deployment).await;
    assert!(applied.contains("deployment.apps/web created"), "{applied}");
    let out = k
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    assert!(
        out.contains("deployment \"web\" successfully rolled out"),
        "{out}"
    );
    let table = k.ok(&["get", "deploy"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..4], ["web", "3/3", "3", "3"], "{table}");
    let rs = k.json(&["get", "rs", "-l", "app=web"]).await;
    let items = rs["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{rs}");
    assert_eq!(
        items[0]["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    let pods = k.ok(&["get", "pods", "-l", "app=web", "-o", "name"]).await;
    assert_eq!(pods.lines().count(), 3, "{pods}");

    // A StatefulSet too: its pods by ordinal, its rollout watched.
    let statefulset = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: default\nspec:\n  replicas: 2\n  serviceName: db\n  selector:\n    matchLabels:\n      app: db\n  template:\n    metadata:\n      labels:\n        app: db\n    spec:\n      containers:\n      - name: db\n        image: postgres\n";
    k.apply_yaml(statefulset).await;
    let out = k
        .ok(&["rollout", "status", "statefulset/db", "--timeout=60s"])
        .await;
    assert!(
        out.contains("partitioned roll out complete") || out.contains("rolling update complete"),
        "{out}"
    );
    let sts = k.ok(&["get", "sts", "db"]).await;
    assert!(
        sts.lines()
            .nth(1)
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("2/2")),
        "{sts}"
    );
    let pods = k.ok(&["get", "pods", "-l", "app=db", "-o", "name"]).await;
    assert_eq!(
        pods.lines().collect::<Vec<_>>(),
        ["pod/db-0", "pod/db-1"],
        "{pods}"
    );
}
