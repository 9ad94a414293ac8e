//! `kubectl apply -k deploy/` against the simulated cluster, and
//! NodeMaintenance objects through kubectl: the printer columns, and
//! per-node status entries from several agents that never overwrite
//! each other (server-side apply on a list-map keyed by nodeName).

mod common;

use common::kubectl::Kubectl;

use serde_json::{Value, json};

use maintd::sim::SimCluster;

/// What one agent applies: its own entry, under its own field manager.
async fn apply_entry(sim: &SimCluster, nm: &str, node: &str, phase: &str, remaining: i32) {
    let body = json!({
        "apiVersion": "maintd.io/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": nm},
        "status": {"nodes": [{
            "nodeName": node, "phase": phase, "stage": "Drain",
            "podsTotal": 10, "podsRemaining": remaining,
            "drainProgress": (10 - remaining) * 10,
        }]},
    });
    let (code, out) = common::raw(
        sim,
        "PATCH",
        &format!(
            "{}/{nm}/status?fieldManager=maintd/{node}&force=true",
            maintd::api::NODEMAINTENANCES_PATH
        ),
        "application/apply-patch+yaml",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(code, 200, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_deploy_and_shows_nodemaintenances() {
    let sim = common::sim().await;
    for n in ["node-a", "node-b", "node-c"] {
        common::create_node(&sim.client(), n).await;
    }
    let k = Kubectl::new(&sim);
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy");
    let out = k.ok(&["apply", "-k", deploy]).await;
    for created in [
        "namespace/maintd created",
        "customresourcedefinition.apiextensions.k8s.io/nodemaintenances.maintd.io created",
        "serviceaccount/maintd created",
        "clusterrole.rbac.authorization.k8s.io/maintd created",
        "clusterrolebinding.rbac.authorization.k8s.io/maintd created",
        "role.rbac.authorization.k8s.io/maintd created",
        "rolebinding.rbac.authorization.k8s.io/maintd created",
        "daemonset.apps/maintd created",
    ] {
        assert!(out.contains(created), "{created}:\n{out}");
    }
    let again = k.ok(&["apply", "-k", deploy]).await;
    assert!(
        !again.contains("created"),
        "applying twice changes nothing:\n{again}"
    );
    // Switching to the medik8s variant adds its RBAC and turns the flag on.
    let medik8s = k.ok(&["apply", "-k", &format!("{deploy}/medik8s")]).await;
    for line in [
        "clusterrole.rbac.authorization.k8s.io/maintd-medik8s created",
        "clusterrolebinding.rbac.authorization.k8s.io/maintd-medik8s created",
        "daemonset.apps/maintd configured",
        "customresourcedefinition.apiextensions.k8s.io/nodemaintenances.maintd.io unchanged",
    ] {
        assert!(medik8s.contains(line), "{line}:\n{medik8s}");
    }
    let ds = k
        .json(&["get", "daemonset", "maintd", "-n", "maintd"])
        .await;
    let env = &ds["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "MAINTD_MEDIK8S" && e["value"] == "true"),
        "{env}"
    );

    let out = k
        .apply_yaml(
            "apiVersion: maintd.io/v1alpha1\nkind: NodeMaintenance\nmetadata:\n  name: kernel\nspec:\n  nodeSelector:\n    matchLabels: {}\n  stage: Drain\n  reason: kernel 6.9\n",
        )
        .await;
    assert!(
        out.contains("nodemaintenance.maintd.io/kernel created"),
        "{out}"
    );

    let table = k.ok(&["get", "nodemaintenances"]).await;
    let header: Vec<_> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STAGE", "SELECTED", "DRAINED", "AGE"],
        "{table}"
    );
    assert!(
        table.lines().nth(1).unwrap().starts_with("kernel"),
        "{table}"
    );
    let short = k.ok(&["get", "nm", "-o", "wide"]).await;
    assert!(
        short.contains("REASON") && short.contains("kernel 6.9"),
        "{short}"
    );

    // Three agents report independently; none overwrites another.
    apply_entry(&sim, "kernel", "node-a", "Draining", 6).await;
    apply_entry(&sim, "kernel", "node-b", "Drained", 0).await;
    apply_entry(&sim, "kernel", "node-c", "Blocked", 3).await;
    apply_entry(&sim, "kernel", "node-a", "Draining", 2).await;
    let obj: Value =
        serde_json::from_str(&k.ok(&["get", "nm", "kernel", "-o", "json"]).await).unwrap();
    let entries: Vec<(String, String, i64)> = obj["status"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["nodeName"].as_str().unwrap().to_string(),
                e["phase"].as_str().unwrap().to_string(),
                e["podsRemaining"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut sorted = entries.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            ("node-a".to_string(), "Draining".to_string(), 2),
            ("node-b".to_string(), "Drained".to_string(), 0),
            ("node-c".to_string(), "Blocked".to_string(), 3),
        ],
        "{obj}"
    );
    let decoded = maintd::api::parse(&obj).expect("the stored object decodes");
    assert_eq!(decoded.status.unwrap().nodes.len(), 3);

    // The counts the printer columns show.
    let (code, out) = common::raw(
        &sim,
        "PATCH",
        &format!(
            "{}/kernel/status?fieldManager=maintd/summary&force=true",
            maintd::api::NODEMAINTENANCES_PATH
        ),
        "application/apply-patch+yaml",
        serde_json::to_vec(&json!({
            "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": "kernel"},
            "status": {"selectedNodes": 3, "drainedNodes": 1},
        }))
        .unwrap(),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let table = k.ok(&["get", "nodemaintenances"]).await;
    let row: Vec<_> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["kernel", "Drain", "3", "1"], "{table}");
    let obj: Value =
        serde_json::from_str(&k.ok(&["get", "nm", "kernel", "-o", "json"]).await).unwrap();
    assert_eq!(
        obj["status"]["nodes"].as_array().unwrap().len(),
        3,
        "the summary keeps the entries: {obj}"
    );
}
