//! The NodeMaintenance trigger against the simulated cluster: ready without
//! a CRD, then following objects as they are created and changed.

use crate::common;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use maintd::api::NODEMAINTENANCES_PATH;
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
        ready(&trigger, "ready although the CRD is missing").await;
        assert!(trigger.evaluate(&node_a()).effective.is_none());
        assert!(trigger.index.all().is_empty());
    }
    stop.cancel();
}

/// Installs maintd's NodeMaintenance CRD; its objects.
async fn with_the_crd(client: &kube::Client) -> Api<DynamicObject> {
    with_a_crd(client, maintd::api::crd().unwrap()).await
}

/// The NodeMaintenance CRD as a maintd from before `stage` had an enum
/// installed it: the API server lets an unknown stage through, and the
/// trigger has to report it.
fn crd_without_stage_enum() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(maintd::api::crd().unwrap()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["stage"]
        .as_object_mut()
        .unwrap()
        .remove("enum");
    serde_json::from_value(crd).unwrap()
}

/// Installs this version of the NodeMaintenance CRD; its objects.
async fn with_a_crd(client: &kube::Client, crd: CustomResourceDefinition) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let ar = ApiResource {
        group: "maintd.io".into(),
        version: "v1alpha1".into(),
        api_version: "maintd.io/v1alpha1".into(),
        kind: "NodeMaintenance".into(),
        plural: "nodemaintenances".into(),
    };
    Api::all_with(client.clone(), &ar)
}

/// A cluster with the CRD installed and these objects (name, spec).
async fn cluster_with(
    objects: &[(&str, Value)],
) -> (maintd_sim::SimCluster, kube::Client, Api<DynamicObject>) {
    let sim = common::sim().await;
    let client = sim.client();
    let nms = with_the_crd(&client).await;
    for (name, spec) in objects {
        create(&nms, name, spec.clone()).await;
    }
    (sim, client, nms)
}

async fn create(nms: &Api<DynamicObject>, name: &str, spec: Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    nms.create(&PostParams::default(), &obj).await.unwrap();
}

/// Sets the stage of NodeMaintenance `name`.
async fn set_stage(nms: &Api<DynamicObject>, name: &str, stage: &str) {
    nms.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": stage}})),
    )
    .await
    .unwrap();
}

/// Waits until at least `n` reads of paths starting with `prefix` were
/// answered with an error.
async fn failed_reads(sim: &maintd_sim::SimCluster, prefix: &str, n: usize) {
    common::eventually(&format!("{n} failed reads of {prefix}"), || {
        let failed = reads_failed(sim, prefix);
        async move { failed >= n }
    })
    .await;
}

fn reads_failed(sim: &maintd_sim::SimCluster, prefix: &str) -> usize {
    sim.state
        .audit
        .count_requests(|r| r.method == "GET" && r.path.starts_with(prefix) && r.code >= 500)
}

/// maintd's NodeMaintenance trigger, running until the token is cancelled.
fn started(client: kube::Client) -> (MaintenanceTrigger, CancellationToken) {
    let trigger = MaintenanceTrigger::new();
    let stop = CancellationToken::new();
    tokio::spawn(
        trigger
            .clone()
            .run(client, Default::default(), stop.clone()),
    );
    (trigger, stop)
}

/// Waits until the stage the trigger asks of node-a is `want`.
async fn stage_becomes(trigger: &MaintenanceTrigger, what: &str, want: Option<&str>) {
    common::eventually(what, || {
        let now = stage(trigger);
        async move { now.as_deref() == want }
    })
    .await;
}

/// Waits (10 s at most) until the trigger may be acted on.
async fn ready(trigger: &MaintenanceTrigger, what: &str) {
    tokio::time::timeout(Duration::from_secs(10), trigger.wait_ready())
        .await
        .expect(what);
}

fn stage(trigger: &MaintenanceTrigger) -> Option<String> {
    trigger
        .evaluate(&node_a())
        .effective
        .map(|e| e.stage.as_str().to_string())
}

#[tokio::test]
async fn follows_objects_as_they_are_created_changed_and_deleted() {
    let sim = common::sim().await;
    let client = sim.client();
    let nms = with_a_crd(&client, crd_without_stage_enum()).await;
    for (name, spec) in [
        (
            "unknown-stage",
            json!({"nodeName": "node-a", "stage": "Evacuate"}),
        ),
        (
            "gpu",
            json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "stage": "Cordon"}),
        ),
    ] {
        create(&nms, name, spec).await;
    }

    let (trigger, stop) = started(client.clone());
    ready(&trigger, "the first list arrives").await;
    let ev = trigger.evaluate(&node_a());
    assert_eq!(ev.effective.as_ref().unwrap().stage.as_str(), "Cordon");
    assert_eq!(ev.invalid.len(), 1);
    assert!(ev.invalid[0].problems[0].contains("\"Evacuate\" is not a stage"));

    set_stage(&nms, "gpu", "Drain").await;
    stage_becomes(&trigger, "the change to Drain is seen", Some("Drain")).await;
    set_stage(&nms, "gpu", "Complete").await;
    stage_becomes(&trigger, "Complete asks nothing", None).await;
    create(
        &nms,
        "kernel",
        json!({"nodeName": "node-a", "stage": "Drain"}),
    )
    .await;
    stage_becomes(&trigger, "a new object is seen", Some("Drain")).await;
    nms.delete("kernel", &Default::default()).await.unwrap();
    stage_becomes(&trigger, "a deleted object asks nothing", None).await;
    stop.cancel();
}

/// A CRD check that fails (a 500, not a 404) says nothing about whether
/// the CRD is there: the trigger stays not ready, so the agent undoes no
/// drain for want of objects, and it says why; once the API answers, the
/// objects are read.
#[tokio::test]
async fn a_crd_check_that_fails_keeps_the_trigger_not_ready_and_says_why() {
    let (sim, client, _) =
        cluster_with(&[("kernel", json!({"nodeName": "node-a", "stage": "Drain"}))]).await;
    sim.state.faults.fail_reads("/apis/maintd.io/", 500);
    let (trigger, stop) = started(client);
    failed_reads(&sim, "/apis/maintd.io/", 3).await;
    assert!(!trigger.ready(), "a failed check is not a missing CRD");
    let error = trigger.view().last_error().unwrap_or_default();
    assert!(
        error.contains("nodemaintenances") && error.contains("injected fault"),
        "{error}"
    );
    sim.state.faults.clear();
    ready(&trigger, "ready once the API answers").await;
    assert_eq!(stage(&trigger).as_deref(), Some("Drain"));
    stop.cancel();
}

/// A spec change whose object cannot be read is read again until it is:
/// no later event is needed for the agent to act on it. The reads are
/// paced: every agent reads every object, so a read retried at once would
/// multiply with the node count (it once was: 65,000 reads in 2 s).
#[tokio::test]
async fn a_changed_object_that_cannot_be_read_is_read_again() {
    let (sim, client, nms) =
        cluster_with(&[("gpu", json!({"nodeName": "node-a", "stage": "Cordon"}))]).await;
    let (trigger, stop) = started(client);
    ready(&trigger, "the first list arrives").await;
    assert_eq!(stage(&trigger).as_deref(), Some("Cordon"));

    let gpu = format!("{NODEMAINTENANCES_PATH}/gpu");
    sim.state.faults.fail_reads(&gpu, 500);
    set_stage(&nms, "gpu", "Drain").await;
    failed_reads(&sim, &gpu, 2).await;
    assert_eq!(
        stage(&trigger).as_deref(),
        Some("Cordon"),
        "the new spec is not known yet"
    );
    let error = trigger.view().last_error().unwrap_or_default();
    assert!(
        error.contains("reading") && error.contains("gpu"),
        "{error}"
    );
    // Other objects change meanwhile: each is read, and none of them
    // hurries the failing object's next read.
    for i in 0..10 {
        create(
            &nms,
            &format!("other-{i}"),
            json!({"nodeName": "node-b", "stage": "Idle"}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reads = reads_failed(&sim, &gpu);
    assert!(
        (2..=6).contains(&reads),
        "{reads} reads in about 3 s; the pause doubles from 1 s"
    );
    assert_eq!(trigger.index.all().len(), 11, "the others were read");
    sim.state.faults.clear();
    stage_becomes(
        &trigger,
        "the change is read once the API answers",
        Some("Drain"),
    )
    .await;
    stop.cancel();
}

/// An object deleted between its event and its read (its read answers 404)
/// is taken as gone, not as an error: the others are acted on without it.
#[tokio::test]
async fn an_object_gone_before_it_is_read_does_not_hold_the_others_back() {
    let (sim, client, _) = cluster_with(&[
        ("kernel", json!({"nodeName": "node-a", "stage": "Drain"})),
        ("gone", json!({"nodeName": "node-a", "stage": "Cordon"})),
    ])
    .await;
    sim.state
        .faults
        .fail_reads(&format!("{NODEMAINTENANCES_PATH}/gone"), 404);
    let (trigger, stop) = started(client);
    ready(&trigger, "ready without the object that went").await;
    assert_eq!(stage(&trigger).as_deref(), Some("Drain"));
    assert_eq!(trigger.view().last_error(), None);
    stop.cancel();
}
