//! A NodeMaintenance object drives the agent: stage Cordon cordons and
//! taints only, Drain runs the plan, Complete undoes.

mod common;

use common::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::progress::{EventKind, Phase};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn resource() -> ApiResource {
    ApiResource {
        group: "maintd.io".into(),
        version: "v1alpha1".into(),
        api_version: "maintd.io/v1alpha1".into(),
        kind: "NodeMaintenance".into(),
        plural: "nodemaintenances".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_then_drain_then_complete() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &maintd::api::crd().unwrap())
        .await
        .unwrap();
    let agent = Agent::new(
        Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap()),
        sim.client_with(false),
    );
    let progress = agent.progress().clone();
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));

    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "kernel-upgrade"},
        "spec": {"nodeName": "node-a", "stage": "Cordon", "reason": "kernel upgrade"},
    }))
    .unwrap();
    nms.create(&PostParams::default(), &obj).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("node-a cordoned and tainted", || {
        let nodes = nodes.clone();
        async move {
            let spec = nodes.get("node-a").await.unwrap().spec.unwrap_or_default();
            spec.unschedulable == Some(true)
                && spec
                    .taints
                    .unwrap_or_default()
                    .iter()
                    .any(|t| t.key == "maintd.io/draining")
        }
    })
    .await;
    assert!(
        sim.state.audit.entries().iter().all(|e| e.verb != "evict"),
        "Cordon evicts nothing"
    );
    assert_eq!(progress.status().phase, Phase::Cordoned);

    let stage = |s: &str| json!({"spec": {"stage": s}});
    nms.patch(
        "kernel-upgrade",
        &PatchParams::default(),
        &Patch::Merge(stage("Drain")),
    )
    .await
    .unwrap();
    let p = progress.clone();
    eventually("node-a drained", || {
        let drained = p.status().phase == Phase::Drained;
        async move { drained }
    })
    .await;
    let left: Vec<_> = pods_on(&client, "node-a")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["pinned"]);

    let mut events = progress.subscribe();
    nms.patch(
        "kernel-upgrade",
        &PatchParams::default(),
        &Patch::Merge(stage("Complete")),
    )
    .await
    .unwrap();
    loop {
        if events.recv().await.unwrap().event == EventKind::UndoCompleted {
            break;
        }
    }
    let spec = nodes.get("node-a").await.unwrap().spec.unwrap_or_default();
    assert_ne!(spec.unschedulable, Some(true), "uncordoned");
    eventually("the entry says Completed", || {
        let api = nms.clone();
        async move {
            api.get("kernel-upgrade").await.unwrap().data["status"]["nodes"][0]["phase"]
                == "Completed"
        }
    })
    .await;
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != "maintd.io/draining")
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_agents_share_one_object_without_overwriting_each_other() {
    let sim = scenario("realistic.yaml").await;
    let client = sim.client();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &maintd::api::crd().unwrap())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    for node in ["node-a", "node-b", "node-c"] {
        let dir = sim.static_pod_dir(node).unwrap();
        let agent = Agent::new(Config::for_node(node, dir), sim.client_with(false));
        tokio::spawn(agent.run(stop.clone()));
    }
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "fleet-cordon"},
        "spec": {"nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}}, "stage": "Cordon", "reason": "rack move"},
    }))
    .unwrap();
    nms.create(&PostParams::default(), &obj).await.unwrap();
    eventually("every node's entry reads Cordoned", || {
        let api = nms.clone();
        async move {
            let nm = api.get("fleet-cordon").await.unwrap();
            let mut entries: Vec<(String, String)> = nm.data["status"]["nodes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            (
                                e["nodeName"].as_str().unwrap_or("").to_string(),
                                e["phase"].as_str().unwrap_or("").to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            entries.sort();
            entries
                == [
                    ("node-a".into(), "Cordoned".into()),
                    ("node-b".into(), "Cordoned".into()),
                    ("node-c".into(), "Cordoned".into()),
                ]
        }
    })
    .await;
    let nm = nms.get("fleet-cordon").await.unwrap();
    let managers: Vec<_> = nm
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    for node in ["node-a", "node-b", "node-c"] {
        assert!(managers.contains(&format!("maintd/{node}")), "{managers:?}");
    }
    assert!(
        sim.state.audit.entries().iter().all(|e| e.verb != "evict"),
        "Cordon evicts nothing"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_object_gets_a_condition_naming_the_problem_and_causes_no_action() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &maintd::api::crd().unwrap())
        .await
        .unwrap();
    let agent = Agent::new(
        Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap()),
        sim.client_with(false),
    );
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "both"},
        "spec": {"nodeName": "node-a", "nodeSelector": {"matchLabels": {"a": "b"}}, "stage": "Drain"},
    }))
    .unwrap();
    nms.create(&PostParams::default(), &obj).await.unwrap();
    eventually("the Valid condition says what is wrong", || {
        let api = nms.clone();
        async move {
            let nm = api.get("both").await.unwrap();
            nm.data["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c["type"] == "Valid"
                            && c["status"] == "False"
                            && c["message"].as_str().is_some_and(|m| {
                                m.contains("nodeName") && m.contains("nodeSelector")
                            })
                    })
                })
        }
    })
    .await;
    let spec = Api::<Node>::all(client.clone())
        .get("node-a")
        .await
        .unwrap()
        .spec
        .unwrap_or_default();
    assert_ne!(
        spec.unschedulable,
        Some(true),
        "no action on an invalid object"
    );
    assert!(sim.state.audit.entries().iter().all(|e| e.verb != "evict"));
    stop.cancel();
}
