//! Deployments run their pods through ReplicaSets in the simulated cluster
//! as on a real one, seen through kube-rs: one set per pod template, owned
//! by the Deployment, and a new template rolled out over the old.

use crate::common;

use std::collections::HashMap;

use common::*;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::{Value, json};

fn deployment(name: &str, replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "sim.maintd.io/startup-seconds": "0.2",
                    "sim.maintd.io/shutdown-seconds": "0.2",
                }},
                "spec": {"containers": [{"name": name, "image": image}]},
            },
        },
    })
}

async fn rolled_out(deploys: &Api<Deployment>, name: &str, replicas: i32) {
    let done = await_condition(deploys.clone(), name, move |d: Option<&Deployment>| {
        d.is_some_and(|d| {
            let st = d.status.clone().unwrap_or_default();
            st.observed_generation == d.metadata.generation
                && st.updated_replicas == Some(replicas)
                && st.available_replicas == Some(replicas)
                && st.replicas == Some(replicas)
        })
    });
    tokio::time::timeout(PATIENCE, done)
        .await
        .expect("the deployment rolls out")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_runs_its_pods_through_a_replicaset_and_rolls_a_new_template_out() {
    let sim = sim().await;
    for n in ["node-a", "node-b"] {
        create_node(&sim.client(), n).await;
    }
    let client = sim.client();
    let deploys: Api<Deployment> = Api::default_namespaced(client.clone());
    let sets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let d: Deployment = serde_json::from_value(deployment("web", 3, "nginx:1.27")).unwrap();
    deploys.create(&PostParams::default(), &d).await.unwrap();
    rolled_out(&deploys, "web", 3).await;

    let rs = sets.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(rs.len(), 1);
    let rs = &rs[0];
    let hash = rs.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    assert_eq!(
        rs.metadata.name.as_deref(),
        Some(format!("web-{hash}").as_str())
    );
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );
    let web_pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    assert_eq!(web_pods.len(), 3);
    for p in &web_pods {
        assert_eq!(owner_kind(p).as_deref(), Some("ReplicaSet"));
        assert_eq!(
            p.metadata.labels.as_ref().unwrap()["pod-template-hash"],
            hash
        );
    }
    let d = deploys.get("web").await.unwrap();
    let conds = d.status.unwrap().conditions.unwrap();
    let cond = |t: &str| {
        conds
            .iter()
            .find(|c| c.type_.as_deref() == Some(t))
            .cloned()
            .unwrap()
    };
    assert_eq!(
        (
            cond("Available").status.as_deref(),
            cond("Available").reason.as_deref()
        ),
        (Some("True"), Some("MinimumReplicasAvailable"))
    );
    assert_eq!(
        cond("Progressing").reason.as_deref(),
        Some("NewReplicaSetAvailable")
    );

    // A new image: a second ReplicaSet takes over, the first goes to 0.
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}})),
        )
        .await
        .unwrap();
    rolled_out(&deploys, "web", 3).await;
    let rs = sets.list(&ListParams::default()).await.unwrap().items;
    let by_name: HashMap<String, i32> = rs
        .iter()
        .map(|r| (r.metadata.name.clone().unwrap(), r.spec.replicas.unwrap()))
        .collect();
    assert_eq!(by_name.len(), 2, "{by_name:?}");
    assert_eq!(by_name[&format!("web-{hash}")], 0, "{by_name:?}");
    eventually("only pods of the new image are left", || {
        let pods = pods.clone();
        async move {
            let items = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .unwrap()
                .items;
            items.len() == 3
                && items.iter().all(|p| {
                    p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:1.28")
                })
        }
    })
    .await;
}
