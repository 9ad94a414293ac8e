//! The NodeMaintenance trigger against the simulated cluster: ready without
//! a CRD, then following objects as they are created and changed.

mod common;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use maintd::trigger::maintenance::MaintenanceTrigger;

fn node_a() -> Value {
    json!({"metadata": {"name": "node-a", "labels": {"pool": "gpu"}}})
}

#[tokio::test]
async fn without_the_crd_the_trigger_is_ready_with_nothing_to_do() {
    let sim = common::sim().await;
    let stop = CancellationToken::new();
    // maintd's own, and medik8s' (with --medik8s).
    for trigger in [MaintenanceTrigger::new(), MaintenanceTrigger::medik8s()] {
        tokio::spawn(
            trigger
                .clone()
                .run(sim.client(), Default::default(), stop.clone()),
        );
        tokio::time::timeout(Duration::from_secs(10), trigger.wait_ready())
            .await
            .expect("ready although the CRD is missing");
        assert!(trigger.evaluate(&node_a()).effective.is_none());
        assert!(trigger.index.all().is_empty());
    }
    stop.cancel();
}

#[tokio::test]
async fn follows_objects_as_they_are_created_changed_and_deleted() {
    let sim = common::sim().await;
    let client = sim.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &maintd::api::crd().unwrap())
        .await
        .unwrap();
    let ar = ApiResource {
        group: "maintd.io".into(),
        version: "v1alpha1".into(),
        api_version: "maintd.io/v1alpha1".into(),
        kind: "NodeMaintenance".into(),
        plural: "nodemaintenances".into(),
    };
    let nms: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let create = |name: &str, spec: Value| {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        let nms = nms.clone();
        async move { nms.create(&PostParams::default(), &obj).await.unwrap() }
    };
    create(
        "unknown-stage",
        json!({"nodeName": "node-a", "stage": "Evacuate"}),
    )
    .await;
    create(
        "gpu",
        json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "stage": "Cordon"}),
    )
    .await;

    let trigger = MaintenanceTrigger::new();
    let stop = CancellationToken::new();
    tokio::spawn(
        trigger
            .clone()
            .run(client.clone(), Default::default(), stop.clone()),
    );
    tokio::time::timeout(Duration::from_secs(10), trigger.wait_ready())
        .await
        .expect("the first list arrives");
    let ev = trigger.evaluate(&node_a());
    assert_eq!(ev.effective.as_ref().unwrap().stage.as_str(), "Cordon");
    assert_eq!(ev.invalid.len(), 1);
    assert!(ev.invalid[0].problems[0].contains("\"Evacuate\" is not a stage"));

    let t = trigger.clone();
    let stage_is = move |want: Option<&'static str>| {
        let t = t.clone();
        async move {
            t.evaluate(&node_a())
                .effective
                .map(|e| e.stage.as_str().to_string())
                .as_deref()
                == want
        }
    };
    nms.patch(
        "gpu",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Drain"}})),
    )
    .await
    .unwrap();
    common::eventually("the change to Drain is seen", || stage_is(Some("Drain"))).await;
    nms.patch(
        "gpu",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Complete"}})),
    )
    .await
    .unwrap();
    common::eventually("Complete asks nothing", || stage_is(None)).await;
    create("kernel", json!({"nodeName": "node-a", "stage": "Drain"})).await;
    common::eventually("a new object is seen", || stage_is(Some("Drain"))).await;
    nms.delete("kernel", &Default::default()).await.unwrap();
    common::eventually("a deleted object asks nothing", || stage_is(None)).await;
    stop.cancel();
}
