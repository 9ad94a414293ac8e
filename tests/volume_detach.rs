//! The drain's last step, with the rights deploy/ gives the agent: once
//! every pod is gone, the node is Drained only when the volumes the
//! drained pods used are detached. A volume left attached holds the drain
//! and is named; when it goes, the drain completes; the wait is bounded;
//! a claim a pod that stays still mounts is not waited for.

use crate::common;

use common::agent::RunningAgent;
use common::kubectl::Kubectl;
use common::*;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, Patch, PatchParams};
use maintd::config::Config;
use maintd::drain::progress::{EventKind, Phase};
use maintd_sim::volumes::{DETACH_ANNOTATION, attachment_name, csi_volume};
use maintd_sim::{SimCluster, SimConfig};
use serde_json::{Value, json};

const DRIVER: &str = "csi.example.com";

async fn cluster() -> SimCluster {
    let sim = sim_with(SimConfig {
        disruption_lag: std::time::Duration::ZERO,
        ..SimConfig::default()
    })
    .await;
    create_node(&sim.client(), "node-a").await;
    create_node(&sim.client(), "node-b").await;
    install_crds(&sim.client()).await;
    sim
}

/// A CSI volume for claim `default/<claim>`, detaching after `detach`
/// seconds once no pod on the node uses it.
async fn volume(sim: &SimCluster, claim: &str, pv: &str, detach: &str) {
    let (mut volume, claim_obj) = csi_volume("default", claim, pv, DRIVER);
    volume["metadata"]["annotations"] = json!({DETACH_ANNOTATION: detach});
    let k = Kubectl::new(sim);
    for obj in [volume, claim_obj] {
        k.apply_yaml(&obj.to_string()).await;
    }
}

/// A running pod on node-a mounting `claim`; `labels` on it.
async fn pod_with_claim(sim: &SimCluster, name: &str, claim: &str, labels: Value) {
    let mut pod = pod_json("default", name, "node-a", labels);
    pod["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    post_pod(sim, &pod).await;
    let attachment = attachment_name(&format!("{}-handle", pv_of(claim)), DRIVER, "node-a");
    let k = Kubectl::new(sim);
    let k = &k;
    let attachment = &attachment;
    eventually("the volume is attached to node-a", || async move {
        let (ok, out, _) = k
            .run(&[
                "get",
                "volumeattachments.storage.k8s.io",
                attachment,
                "-o",
                "json",
            ])
            .await;
        ok && serde_json::from_str::<Value>(&out).is_ok_and(|va| va["status"]["attached"] == true)
    })
    .await;
}

fn pv_of(claim: &str) -> String {
    format!("pv-{claim}")
}

fn agent(sim: &SimCluster, timeout: std::time::Duration) -> RunningAgent {
    let mut config = Config::for_node("node-a", "/nonexistent/manifests".into());
    config.volume_detach_timeout = timeout;
    RunningAgent::start_with(config, maintd::testbed::agent_client(sim, "node-a"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_left_attached_holds_drained_and_is_named_until_it_goes() {
    let sim = cluster().await;
    volume(&sim, "data", &pv_of("data"), "3600").await;
    pod_with_claim(&sim, "db-0", "data", json!({"app": "db"})).await;
    let agent = agent(&sim, std::time::Duration::from_secs(600));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;

    agent.wait_event(EventKind::VolumesDetaching).await;
    let agent_ref = &agent;
    eventually(
        "the volume is named as what the drain waits for",
        || async move {
            let st = agent_ref.progress.status();
            st.blockers.iter().any(|b| {
                b.reason.contains("pv-data")
                    && b.reason.contains("claim default/data")
                    && b.reason.contains("VolumeAttachment csi-")
            }) && st.phase == Phase::Draining
        },
    )
    .await;
    assert!(
        pods_on(&sim.client(), "node-a").await.is_empty(),
        "the pod is gone"
    );
    assert_eq!(
        agent.count(EventKind::DrainCompleted),
        0,
        "not Drained while attached"
    );

    // The attacher finishes: the drain completes.
    let pvs: Api<PersistentVolume> = Api::all(sim.client());
    pvs.patch(
        "pv-data",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {DETACH_ANNOTATION: "0"}}})),
    )
    .await
    .unwrap();
    agent.wait_event(EventKind::DrainCompleted).await;
    let events = agent.events();
    let detached = events
        .iter()
        .position(|e| e.event == EventKind::VolumesDetached)
        .expect("the detach is reported");
    let drained = events
        .iter()
        .position(|e| e.event == EventKind::DrainCompleted)
        .unwrap();
    assert!(detached < drained);
    assert!(agent.progress.status().blockers.is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_is_bounded_and_says_what_is_left() {
    let sim = cluster().await;
    volume(&sim, "data", &pv_of("data"), "3600").await;
    pod_with_claim(&sim, "db-0", "data", json!({"app": "db"})).await;
    let agent = agent(&sim, std::time::Duration::from_secs(2));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    let warning = agent
        .events()
        .into_iter()
        .find(|e| e.event == EventKind::Warning && e.message.contains("still attached"))
        .expect("a warning names what is left");
    assert!(warning.message.contains("pv-data"), "{}", warning.message);
    let st = agent.progress.status();
    assert_eq!(st.phase, Phase::Drained);
    assert!(
        st.warnings.iter().any(|w| w.contains("pv-data")),
        "{:?}",
        st.warnings
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_a_pod_that_stays_still_mounts_is_not_waited_for() {
    let sim = cluster().await;
    volume(&sim, "shared", &pv_of("shared"), "3600").await;
    pod_with_claim(&sim, "db-0", "shared", json!({"app": "db"})).await;
    // Never drained: it keeps the volume on the node.
    pod_with_claim(
        &sim,
        "keeper",
        "shared",
        json!({"app": "keeper", "maintd.io/drain": "skip"}),
    )
    .await;
    let agent = agent(&sim, std::time::Duration::from_secs(600));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent.wait_event(EventKind::DrainCompleted).await;
    assert_eq!(agent.count(EventKind::VolumesDetaching), 0);
    let left: Vec<String> = pods_on(&sim.client(), "node-a")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(left, ["keeper"]);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_waits_for_the_volumes_to_detach_within_its_budget() {
    let sim = cluster().await;
    volume(&sim, "data", &pv_of("data"), "2").await;
    pod_with_claim(&sim, "db-0", "data", json!({"app": "db"})).await;
    let config = Config::for_node("node-a", "/nonexistent/manifests".into());
    let locked =
        common::logind_agent::start(&sim, std::time::Duration::from_secs(20), config).await;
    locked.reboot_in_time().await;
    let agent = &locked.agent;
    agent.wait_event(EventKind::ShutdownReleased).await;
    let events = agent.events();
    let at = |kind: EventKind| events.iter().position(|e| e.event == kind);
    let detached = at(EventKind::VolumesDetached).expect("the volume detached");
    let released = at(EventKind::ShutdownReleased).unwrap();
    assert!(
        at(EventKind::VolumesDetaching).unwrap() < detached && detached < released,
        "the lock went only once the volume was detached"
    );
    locked.agent.stop().await;
}
