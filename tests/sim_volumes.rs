//! Persistent volumes in the simulated cluster, asked of it as clients
//! would (kube's typed Api, raw HTTP, kubectl): claims and volumes that
//! name each other are Bound; a CSI volume a pod on a node uses is
//! attached there (a VolumeAttachment named as Kubernetes names it) for
//! as long as any pod on that node uses it, terminating pods included,
//! and detached after the volume's detach time once none does.
//!
//! "Still attached" is asserted after a sync point, not after a sleep: a
//! probe pod with a volume of its own is started, and once its attachment
//! appears the controller has made a pass that saw everything before it.

use crate::common;

use std::time::Duration;

use common::kubectl::Kubectl;
use common::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use maintd_sim::kubelet::SHUTDOWN_ANNOTATION;
use maintd_sim::volumes::{DETACH_ANNOTATION, attachment_name, csi_volume};
use maintd_sim::{SimCluster, SimConfig};

const DRIVER: &str = "disk.csi.example.com";
const NS: &str = "default";

/// A cluster with a quick default detach and nodes `n1` and `n2`.
async fn cluster() -> (SimCluster, kube::Client) {
    let sim = sim_with(SimConfig {
        volume_detach: Duration::from_millis(200),
        ..SimConfig::default()
    })
    .await;
    let client = sim.client();
    for node in ["n1", "n2"] {
        create_node(&client, node).await;
    }
    (sim, client)
}

/// Creates CSI volume `pv` and claim `claim` bound to each other, the
/// volume's detach taking `detach` seconds if given.
async fn volume(client: &kube::Client, claim: &str, pv: &str, detach: Option<&str>) {
    let (mut v, c) = csi_volume(NS, claim, pv, DRIVER);
    if let Some(secs) = detach {
        v["metadata"]["annotations"] = json!({DETACH_ANNOTATION: secs});
    }
    create_pair(client, v, c).await;
}

async fn create_pair(client: &kube::Client, pv: Value, claim: Value) {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    pvs.create(&PostParams::default(), &serde_json::from_value(pv).unwrap())
        .await
        .expect("volume created");
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(claim).unwrap(),
        )
        .await
        .expect("claim created");
}

/// Starts pod `name` on `node` with `claim` mounted; `slow` makes it take
/// an hour to stop, so it stays terminating when deleted.
async fn pod_using(client: &kube::Client, name: &str, node: &str, claim: &str, slow: bool) {
    let mut pod = pod_json(NS, name, node, json!({}));
    pod["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    if slow {
        pod["metadata"]["annotations"] = json!({SHUTDOWN_ANNOTATION: "3600"});
        pod["spec"]["terminationGracePeriodSeconds"] = json!(3600);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("pod created");
}

async fn delete_pod(client: &kube::Client, name: &str, grace: Option<u32>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let params = DeleteParams {
        grace_period_seconds: grace,
        ..DeleteParams::default()
    };
    pods.delete(name, &params).await.expect("pod deleted");
}

async fn pod_gone(client: &kube::Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(&format!("pod {name} is gone"), || async {
        pods.get_opt(name).await.unwrap().is_none()
    })
    .await;
}

/// The name Kubernetes gives the attachment of `pv` (made by [`volume`])
/// to `node`.
fn attachment_of(pv: &str, node: &str) -> String {
    attachment_name(&format!("{pv}-handle"), DRIVER, node)
}

async fn attachment(client: &kube::Client, name: &str) -> Option<Value> {
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    let got = api.get_opt(name).await.expect("the attachment is read");
    got.map(|a| serde_json::to_value(a).unwrap())
}

async fn attached(client: &kube::Client, pv: &str, node: &str) -> Value {
    let name = attachment_of(pv, node);
    eventually(&format!("{pv} is attached to {node}"), || async {
        attachment(client, &name)
            .await
            .is_some_and(|a| a["status"]["attached"] == true)
    })
    .await;
    attachment(client, &name).await.unwrap_or_default()
}

async fn detached(client: &kube::Client, pv: &str, node: &str) {
    let name = attachment_of(pv, node);
    eventually(&format!("{pv} is detached from {node}"), || async {
        attachment(client, &name).await.is_none()
    })
    .await;
}

/// A sync point: a probe pod on `node` with a volume of its own, waited
/// until attached. The controller's pass that attached it saw every change
/// made before.
async fn sync(client: &kube::Client, node: &str, probe: &str) {
    volume(
        client,
        &format!("{probe}-claim"),
        &format!("{probe}-pv"),
        None,
    )
    .await;
    pod_using(client, probe, node, &format!("{probe}-claim"), false).await;
    attached(client, &format!("{probe}-pv"), node).await;
}

async fn phase_of_claim(client: &kube::Client, claim: &str) -> String {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let c = api.get(claim).await.expect("claim");
    c.status.and_then(|s| s.phase).unwrap_or_default()
}

async fn phase_of_volume(client: &kube::Client, pv: &str) -> String {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let v = api.get(pv).await.expect("volume");
    v.status.and_then(|s| s.phase).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_volumes_that_name_each_other_are_bound() {
    let (_sim, client) = cluster().await;
    volume(&client, "data", "pv-1", None).await;
    eventually("the claim and its volume are Bound", || async {
        phase_of_claim(&client, "data").await == "Bound"
            && phase_of_volume(&client, "pv-1").await == "Bound"
    })
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let claim = serde_json::to_value(claims.get("data").await.unwrap()).unwrap();
    assert_eq!(claim["status"]["capacity"]["storage"], "1Gi", "{claim}");
    assert_eq!(claim["status"]["accessModes"], json!(["ReadWriteOnce"]));
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = serde_json::to_value(pvs.get("pv-1").await.unwrap()).unwrap();
    assert_eq!(
        pv["spec"]["claimRef"]["uid"], claim["metadata"]["uid"],
        "the binder completes the claimRef: {pv}"
    );

    // A claim that names a volume not made for it: the binder gives the
    // volume its claimRef.
    let (mut v, mut c) = csi_volume(NS, "late", "pv-2", DRIVER);
    v["spec"]["claimRef"] = Value::Null;
    c["spec"]["volumeName"] = json!("pv-2");
    create_pair(&client, v, c).await;
    eventually("a claim naming a free volume binds it", || async {
        phase_of_claim(&client, "late").await == "Bound"
            && phase_of_volume(&client, "pv-2").await == "Bound"
    })
    .await;

    // The claim goes: its volume is Released, not free for another.
    claims
        .delete("late", &DeleteParams::default())
        .await
        .unwrap();
    eventually("a volume whose claim is gone is Released", || async {
        phase_of_volume(&client, "pv-2").await == "Released"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_is_attached_while_any_pod_on_the_node_uses_it() {
    let (_sim, client) = cluster().await;
    volume(&client, "data", "pv-1", None).await;
    pod_using(&client, "a", "n1", "data", false).await;
    let va = attached(&client, "pv-1", "n1").await;
    assert_eq!(
        va["metadata"]["name"],
        attachment_name("pv-1-handle", DRIVER, "n1")
    );
    assert_eq!(
        va["spec"],
        json!({"attacher": DRIVER, "nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}})
    );
    assert_eq!(
        va["metadata"]["finalizers"],
        json!(["external-attacher/disk-csi-example-com"])
    );

    // A second pod on the node shares the attachment; the first leaves.
    pod_using(&client, "b", "n1", "data", true).await;
    delete_pod(&client, "a", Some(0)).await;
    pod_gone(&client, "a").await;
    sync(&client, "n1", "probe-1").await;
    let va = attachment(&client, &attachment_of("pv-1", "n1")).await;
    let va = va.expect("still attached while pod b uses the volume");
    assert!(va["metadata"]["deletionTimestamp"].is_null(), "{va}");

    // The last pod is terminating: it still uses the volume.
    delete_pod(&client, "b", None).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let b = pods.get("b").await.expect("b stops slowly");
    assert!(b.metadata.deletion_timestamp.is_some());
    sync(&client, "n1", "probe-2").await;
    let va = attachment(&client, &attachment_of("pv-1", "n1")).await;
    let va = va.expect("still attached while pod b is terminating");
    assert!(va["metadata"]["deletionTimestamp"].is_null(), "{va}");
    assert!(pods.get_opt("b").await.unwrap().is_some());

    // Gone: the attachment goes after the detach time.
    delete_pod(&client, "b", Some(0)).await;
    pod_gone(&client, "b").await;
    detached(&client, "pv-1", "n1").await;
    // The probes still hold theirs.
    attached(&client, "probe-1-pv", "n1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_are_per_node() {
    let (_sim, client) = cluster().await;
    // Two nodes using one volume (as a ReadWriteMany volume would).
    volume(&client, "data", "pv-1", None).await;
    pod_using(&client, "a", "n1", "data", false).await;
    pod_using(&client, "b", "n2", "data", false).await;
    attached(&client, "pv-1", "n1").await;
    attached(&client, "pv-1", "n2").await;
    delete_pod(&client, "a", Some(0)).await;
    detached(&client, "pv-1", "n1").await;
    let other = attachment(&client, &attachment_of("pv-1", "n2")).await;
    assert!(other.is_some_and(|a| a["metadata"]["deletionTimestamp"].is_null()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_detach_holds_the_volume_until_its_time_is_lowered() {
    let (_sim, client) = cluster().await;
    volume(&client, "stuck", "pv-stuck", Some("3600")).await;
    volume(&client, "quick", "pv-quick", None).await;
    pod_using(&client, "a", "n1", "stuck", false).await;
    pod_using(&client, "b", "n1", "quick", false).await;
    attached(&client, "pv-stuck", "n1").await;
    attached(&client, "pv-quick", "n1").await;
    delete_pod(&client, "a", Some(0)).await;
    delete_pod(&client, "b", Some(0)).await;

    // The quick one detaches; the slow one is being detached, still there.
    detached(&client, "pv-quick", "n1").await;
    let name = attachment_of("pv-stuck", "n1");
    eventually("the slow volume is being detached", || async {
        attachment(&client, &name)
            .await
            .is_some_and(|a| !a["metadata"]["deletionTimestamp"].is_null())
    })
    .await;
    let va = attachment(&client, &name).await.unwrap_or_default();
    assert_eq!(va["status"]["attached"], true, "{va}");

    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let lower = json!({"metadata": {"annotations": {DETACH_ANNOTATION: "0.1"}}});
    pvs.patch("pv-stuck", &PatchParams::default(), &Patch::Merge(&lower))
        .await
        .unwrap();
    detached(&client, "pv-stuck", "n1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_csi_volumes_are_attached() {
    let (_sim, client) = cluster().await;
    let (mut v, c) = csi_volume(NS, "local", "pv-local", DRIVER);
    v["spec"]["csi"] = Value::Null;
    v["spec"]["hostPath"] = json!({"path": "/srv/data"});
    create_pair(&client, v, c).await;
    eventually("the hostPath claim is Bound", || async {
        phase_of_claim(&client, "local").await == "Bound"
    })
    .await;
    pod_using(&client, "a", "n1", "local", false).await;
    sync(&client, "n1", "probe").await;
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    let names: Vec<String> = api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|a| a.metadata.name)
        .collect();
    assert_eq!(names, [attachment_of("probe-pv", "n1")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resources_are_served_as_the_api_server_serves_them() {
    let (sim, client) = cluster().await;
    let resources = |list: &Value| -> Vec<(String, bool)> {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    r["namespaced"] == true,
                )
            })
            .collect()
    };
    let (_, core) = raw(&sim, "GET", "/api/v1", "application/json", vec![]).await;
    let core = resources(&core);
    for want in [
        ("persistentvolumeclaims", true),
        ("persistentvolumeclaims/status", true),
        ("persistentvolumes", false),
        ("persistentvolumes/status", false),
    ] {
        assert!(core.contains(&(want.0.to_string(), want.1)), "{want:?}");
    }
    let (_, storage) = raw(
        &sim,
        "GET",
        "/apis/storage.k8s.io/v1",
        "application/json",
        vec![],
    )
    .await;
    let storage = resources(&storage);
    assert!(storage.contains(&("volumeattachments".into(), false)));
    assert!(storage.contains(&("volumeattachments/status".into(), false)));

    // Admission: what the API server refuses, as 422 with the field.
    let va = json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": "by-hand"}, "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv-x"}}});
    let path = "/apis/storage.k8s.io/v1/volumeattachments";
    let (code, status) = raw(
        &sim,
        "POST",
        path,
        "application/json",
        va.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"], "spec.attacher",
        "{status}"
    );
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "bad"},
        "spec": {"resources": {"requests": {"storage": "1Gi"}}}});
    let path = "/api/v1/namespaces/default/persistentvolumeclaims";
    let (code, status) = raw(
        &sim,
        "POST",
        path,
        "application/json",
        claim.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 422, "{status}");

    volume(&client, "data", "pv-1", None).await;
    pod_using(&client, "a", "n1", "data", false).await;
    attached(&client, "pv-1", "n1").await;
    // An attachment's spec is fixed.
    let api: Api<VolumeAttachment> = Api::all(client.clone());
    let moved = json!({"spec": {"nodeName": "n2"}});
    let err = api
        .patch(
            &attachment_of("pv-1", "n1"),
            &PatchParams::default(),
            &Patch::Merge(&moved),
        )
        .await
        .expect_err("the spec is immutable");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );

    // kubectl: discovery, the server's columns.
    let kubectl = Kubectl::new(&sim);
    let out = kubectl.ok(&["get", "volumeattachments"]).await;
    let header = out.lines().next().unwrap_or("");
    for col in ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"] {
        assert!(header.contains(col), "{out}");
    }
    let row = out
        .lines()
        .find(|l| l.starts_with(&attachment_of("pv-1", "n1")))
        .unwrap_or_else(|| panic!("the attachment is listed:\n{out}"));
    for cell in [DRIVER, "pv-1", "n1", "true"] {
        assert!(row.split_whitespace().any(|c| c == cell), "{cell} in {row}");
    }
    let out = kubectl.ok(&["get", "pv", "pv-1"]).await;
    assert!(
        out.contains("Bound") && out.contains("default/data") && out.contains("RWO"),
        "{out}"
    );
    let out = kubectl.ok(&["get", "pvc", "data"]).await;
    assert!(
        out.contains("Bound") && out.contains("pv-1") && out.contains("1Gi"),
        "{out}"
    );
}
