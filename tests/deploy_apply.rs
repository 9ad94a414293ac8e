//! `kubectl apply -k deploy/` against the simulated cluster, and
//! NodeMaintenance and NodeDrain objects through kubectl: the printer
//! columns, per-node NodeDrains from several agents, and the aggregates one
//! writer keeps in the NodeMaintenance.

use crate::common;

use common::kubectl::Kubectl;

use serde_json::{Value, json};

use maintd_sim::SimCluster;

/// What one agent applies: its own NodeDrain, under its own field manager
/// (the object, then its status).
async fn apply_drain(sim: &SimCluster, node: &str, phase: &str, remaining: i32) {
    let path = maintd::api::nodedrain::NODEDRAINS_PATH;
    for (suffix, body) in [
        (
            "",
            json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain", "metadata": {"name": node}, "spec": {}}),
        ),
        (
            "/status",
            json!({
                "apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain", "metadata": {"name": node},
                "status": {
                    "nodeName": node, "phase": phase, "podsTotal": 10, "podsRemaining": remaining,
                    "progress": format!("{}/10", 10 - remaining), "blockersTotal": i32::from(phase == "Blocked"),
                    "maintenances": ["kernel"],
                },
            }),
        ),
    ] {
        let (code, out) = common::raw(
            sim,
            "PATCH",
            &format!("{path}/{node}{suffix}?fieldManager=maintd/{node}&force=true"),
            "application/apply-patch+yaml",
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
        // 201 where the apply created the object, as Kubernetes answers.
        assert!(
            code == 200 || (code == 201 && suffix.is_empty()),
            "{code}: {out}"
        );
    }
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
        "customresourcedefinition.apiextensions.k8s.io/nodedrains.maintd.io created",
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

    // Three agents report, each in its own NodeDrain.
    apply_drain(&sim, "node-a", "Draining", 6).await;
    apply_drain(&sim, "node-b", "Drained", 0).await;
    apply_drain(&sim, "node-c", "Blocked", 3).await;
    apply_drain(&sim, "node-a", "Draining", 2).await;
    let drains = k.ok(&["get", "nodedrains"]).await;
    let header: Vec<_> = drains.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "STAGE", "PROGRESS", "BLOCKERS", "AGE"],
        "{drains}"
    );
    let row_a: Vec<_> = drains.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row_a[..2], ["node-a", "Draining"], "{drains}");
    assert!(row_a.contains(&"8/10"), "{drains}");

    // The aggregates, as the status writer applies them, in the columns.
    let all: Vec<maintd::api::nodedrain::NodeDrainStatus> = serde_json::from_str::<Value>(
        &k.ok(&["get", "nodedrains", "-o", "json"]).await,
    )
    .unwrap()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_value(d["status"].clone()).unwrap())
        .collect();
    let body = maintd::api::status::status_apply_body(
        "kernel",
        maintd::api::status::aggregate("kernel", &all),
        None,
        "2026-01-01T00:00:00Z",
    );
    let (code, out) = common::raw(
        &sim,
        "PATCH",
        &format!(
            "{}/kernel/status?fieldManager=maintd/status-writer&force=true",
            maintd::api::NODEMAINTENANCES_PATH
        ),
        "application/apply-patch+yaml",
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(code, 200, "{out}");
    let table = k.ok(&["get", "nodemaintenances"]).await;
    let row: Vec<_> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["kernel", "Drain", "3", "1"], "{table}");
    let obj: Value =
        serde_json::from_str(&k.ok(&["get", "nm", "kernel", "-o", "json"]).await).unwrap();
    assert_eq!(
        obj["status"]["attention"],
        json!([{"nodeName": "node-c", "phase": "Blocked"}]),
        "{obj}"
    );
    let decoded = maintd::api::parse(&obj).expect("the stored object decodes");
    assert_eq!(decoded.status.unwrap().blocked_nodes, Some(1));
}
