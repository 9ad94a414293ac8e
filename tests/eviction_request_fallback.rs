//! The drain where the API server serves EvictionRequests but nothing acts
//! on them, as in Kubernetes 1.37.2, which ships no evictionrequest
//! controller: a request that shows no sign of progress within
//! `--eviction-request-progress-timeout-seconds` is withdrawn and deleted,
//! the drain says so with a Warning naming the pod, and the pod goes
//! through the Eviction API; a request something acts on is followed past
//! that bound; a request that fails falls back the same way.

use std::time::Duration;

use crate::common;
use crate::eviction_request_drain::{
    agent_with, blocker_of, cluster, cluster_with, evicted, withdrawn_then_deleted,
};
use crate::eviction_request_support as support;

use common::*;
use kube::api::{ListParams, Patch, PatchParams};
use maintd::config::Config;
use maintd::drain::progress::EventKind;
use maintd_sim::SimCluster;
use serde_json::{Value, json};
use support::{migrating, pod_exists, running_pod};

fn config(progress_timeout: Duration) -> Config {
    let mut config = Config::for_node("node-a", "/nonexistent/manifests".into());
    config.eviction_request_progress_timeout = progress_timeout;
    config
}

/// The Node's Events (events.k8s.io/v1) as the cluster has them.
async fn node_events(sim: &SimCluster) -> Vec<Value> {
    let (_, list) = raw(sim, "GET", "/apis/events.k8s.io/v1/events", "", vec![]).await;
    list["items"].as_array().cloned().unwrap_or_default()
}

async fn evictions(sim: &SimCluster) -> usize {
    support::api(sim, "Eviction")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_nothing_acts_on_a_request_the_pod_goes_through_the_eviction_api_after_the_bound() {
    let sim = cluster_with(true, false).await;
    let vm = running_pod(&sim, "vm-1", migrating("600")).await;
    running_pod(&sim, "web-1", json!({})).await;
    let agent = agent_with(&sim, config(Duration::from_secs(2)));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;

    // While it waits, the drain says for what, and until when.
    let agent_ref = &agent;
    eventually(
        "the drain names the request nothing acts on",
        || async move {
            blocker_of(agent_ref, "vm-1").is_some_and(|b| {
                b.contains("no controller has acted on it yet")
                    && b.contains("the Eviction API is used if none has within 2 s")
            })
        },
    )
    .await;
    agent.wait_event(EventKind::DrainCompleted).await;

    let why = format!(
        "no controller acted on its EvictionRequest maintd-{vm} within 2 s (Kubernetes 1.37 serves the API without one); evicting through the Eviction API"
    );
    let events = agent.events();
    let of_vm = |kind: EventKind| {
        events
            .iter()
            .position(|e| e.event == kind && e.pod.as_deref() == Some("vm-1"))
            .unwrap_or_else(|| panic!("a {kind:?} event for vm-1"))
    };
    assert!(of_vm(EventKind::PodEvicting) < of_vm(EventKind::PodError));
    assert_eq!(events[of_vm(EventKind::PodError)].message, why);
    let asked = evicted(&sim);
    assert!(
        asked.contains(&"vm-1".to_string()) && asked.contains(&"web-1".to_string()),
        "{asked:?}"
    );
    assert!(!pod_exists(&sim, "vm-1").await);
    let status = agent.progress.status();
    assert!(
        status
            .warnings
            .contains(&format!("pod default/vm-1: {why}")),
        "the status says why: {:?}",
        status.warnings
    );
    // The cluster sees it too: a Warning on the Node naming the pod.
    let sim_ref = &sim;
    let note = why.clone();
    eventually("a Warning Event names the pod and why", || {
        let note = note.clone();
        async move {
            node_events(sim_ref).await.iter().any(|e| {
                e["type"] == "Warning"
                    && e["reason"] == "EvictionFailed"
                    && e["regarding"]["name"] == "node-a"
                    && e["note"]
                        .as_str()
                        .is_some_and(|n| n.contains("default/vm-1") && n.contains(&note))
            })
        }
    })
    .await;
    // Given up as any request: withdrawn, then deleted (at once: nothing
    // would ever make it final).
    withdrawn_then_deleted(&sim, &vm).await;
    assert_eq!(evictions(&sim).await, 0, "nothing made an Eviction");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_something_acts_on_is_followed_past_the_bound() {
    let sim = cluster(true).await;
    running_pod(&sim, "vm-1", migrating("4")).await;
    let agent = agent_with(&sim, config(Duration::from_secs(1)));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent.wait_event(EventKind::DrainCompleted).await;

    let asked = evicted(&sim);
    assert!(
        !asked.contains(&"vm-1".to_string()),
        "the migration, longer than the bound, took the pod: {asked:?}"
    );
    let events = agent.events();
    let vm = |kind: EventKind| {
        events
            .iter()
            .any(|e| e.event == kind && e.pod.as_deref() == Some("vm-1"))
    };
    assert!(vm(EventKind::PodGone), "taken by its responder");
    assert!(!vm(EventKind::PodError), "never given up");
    assert!(agent.progress.status().warnings.is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_falls_back_to_the_eviction_api() {
    let sim = cluster_with(true, false).await;
    let vm = running_pod(&sim, "vm-1", migrating("600")).await;
    let agent = agent_with(&sim, config(Duration::from_secs(600)));
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;

    // The test does what the missing controller would: every responder
    // ended and none evicted the pod.
    let name = format!("maintd-{vm}");
    let requests = support::api(&sim, "EvictionRequest");
    let requests_ref = &requests;
    let name_ref = name.as_str();
    eventually("the agent made its request", || async move {
        requests_ref.get_opt(name_ref).await.unwrap().is_some()
    })
    .await;
    let failed = json!({"status": {"observedGeneration": 1, "conditions": [{
        "type": "Failed", "status": "True", "reason": "NoFurtherResponder",
        "message": "No responder evicted the target and no further responder is available.",
        "lastTransitionTime": "2026-11-26T00:00:00Z", "observedGeneration": 1,
    }]}});
    requests
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .unwrap();
    agent.wait_event(EventKind::DrainCompleted).await;

    let error = agent
        .events()
        .into_iter()
        .find(|e| e.event == EventKind::PodError && e.pod.as_deref() == Some("vm-1"))
        .expect("the failed request is reported");
    assert_eq!(
        error.message,
        format!(
            "EvictionRequest {name} failed (NoFurtherResponder: No responder evicted the target and no further responder is available.); evicting through the Eviction API"
        )
    );
    assert!(evicted(&sim).contains(&"vm-1".to_string()));
    withdrawn_then_deleted(&sim, &vm).await;
    agent.stop().await;
}
