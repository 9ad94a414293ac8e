//! The drain as a requester of the EvictionRequest API (KEP-4563), run
//! with the rights deploy/ gives the agent: where the API server serves
//! EvictionRequests and something acts on them (here the simulator's
//! evictionrequest-controller, which Kubernetes 1.37 does not ship), a pod
//! with a responder of its own (a KubeVirt-like live migration) leaves
//! through an EvictionRequest and the drain names the responder while it
//! works; where the API is not served, or the operator turned it off, the
//! same pod goes through the Eviction API; an undo withdraws the request
//! and the pod stays. What happens where nothing acts on requests is in
//! eviction_request_fallback.rs.

use crate::common;
use crate::eviction_request_support as support;

use common::agent::RunningAgent;
use common::kubectl::Kubectl;
use common::*;
use maintd::config::Config;
use maintd::drain::eviction_requests::{Mode, REQUESTER};
use maintd::drain::progress::{EventKind, PodState};
use maintd_sim::lifecycle::LIVE_MIGRATION;
use maintd_sim::{SimCluster, SimConfig};
use serde_json::json;
use support::{migrating, pod_exists, running_pod};

/// node-a and node-b, the CRDs, and, if `served`, the API with the
/// simulator's controller.
pub(crate) async fn cluster(served: bool) -> SimCluster {
    cluster_with(served, served).await
}

/// As [`cluster`], with the controller on or off (Kubernetes 1.37.2).
pub(crate) async fn cluster_with(served: bool, controller: bool) -> SimCluster {
    let sim = sim_with(SimConfig {
        eviction_requests: served,
        eviction_request_controller: controller,
        disruption_lag: std::time::Duration::ZERO,
        ..SimConfig::default()
    })
    .await;
    create_node(&sim.client(), "node-a").await;
    create_node(&sim.client(), "node-b").await;
    install_crds(&sim.client()).await;
    sim
}

fn agent(sim: &SimCluster, mode: Mode) -> RunningAgent {
    let mut config = Config::for_node("node-a", "/nonexistent/manifests".into());
    config.eviction_requests = mode;
    agent_with(sim, config)
}

/// node-a's agent with these settings and the rights deploy/ gives it.
pub(crate) fn agent_with(sim: &SimCluster, config: Config) -> RunningAgent {
    RunningAgent::start_with(config, maintd::testbed::agent_client(sim, "node-a"))
}

/// Pods of node-a the API was asked to evict (policy/v1), by name.
pub(crate) fn evicted(sim: &SimCluster) -> Vec<String> {
    sim.state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "evict" && e.code < 300)
        .map(|e| e.name)
        .collect()
}

/// What the agent did to EvictionRequests: (verb, name), in order.
pub(crate) fn request_writes(sim: &SimCluster) -> Vec<(String, String)> {
    sim.state
        .audit
        .entries()
        .into_iter()
        .filter(|e| {
            e.resource == "evictionrequests.lifecycle.k8s.io" && e.user_agent.contains("maintd")
        })
        .map(|e| (e.verb, e.name))
        .collect()
}

/// Waits until the agent has given up the request for pod `uid`, and
/// checks how: made, withdrawn (intent Withdrawn), then deleted.
pub(crate) async fn withdrawn_then_deleted(sim: &SimCluster, uid: &str) {
    let name = format!("maintd-{uid}");
    eventually("the request is withdrawn, then deleted", || async move {
        request_writes(sim).iter().any(|(verb, _)| verb == "delete")
    })
    .await;
    assert_eq!(
        request_writes(sim),
        [
            ("create".to_string(), name.clone()),
            ("patch".to_string(), name.clone()),
            ("delete".to_string(), name)
        ],
        "withdrawn (intent Withdrawn) before it is deleted"
    );
}

/// An agent (with every default) draining node-a for a taint, once vm-1's
/// live migration runs and the drain names it.
async fn draining_until_migrating(sim: &SimCluster) -> RunningAgent {
    let running = agent(sim, Mode::Auto);
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    let running_ref = &running;
    eventually("the live migration runs", || async move {
        blocker_of(running_ref, "vm-1").is_some_and(|r| r.contains(LIVE_MIGRATION))
    })
    .await;
    running
}

pub(crate) fn blocker_of(agent: &RunningAgent, pod: &str) -> Option<String> {
    agent
        .progress
        .status()
        .blockers
        .into_iter()
        .find(|b| b.pod == pod)
        .map(|b| b.reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_slow_responder_leaves_through_its_eviction_request_which_the_drain_names() {
    let sim = cluster(true).await;
    let vm = running_pod(&sim, "vm-1", migrating("3")).await;
    running_pod(&sim, "web-1", json!({})).await;
    let k = Kubectl::new(&sim);
    let agent = agent(&sim, Mode::Auto);
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;

    // While the migration runs, the drain says who it waits for and how
    // far it is, and the request is there for anyone to read.
    let agent_ref = &agent;
    eventually("the drain names the live migration", || async move {
        blocker_of(agent_ref, "vm-1")
            .is_some_and(|r| r.contains(LIVE_MIGRATION) && r.contains("expected done by"))
    })
    .await;
    let name = format!("maintd-{vm}");
    let request = k
        .json(&[
            "get",
            "evictionrequests.lifecycle.k8s.io",
            &name,
            "-n",
            "default",
        ])
        .await;
    assert_eq!(request["spec"]["requester"], REQUESTER, "{request}");
    assert_eq!(request["spec"]["intent"], "Eviction");
    assert_eq!(request["spec"]["target"]["pod"]["uid"], vm.as_str());
    assert_eq!(request["metadata"]["labels"]["maintd.io/node"], "node-a");
    let status = serde_json::to_value(agent.progress.status()).unwrap();
    assert!(
        status.to_string().contains(LIVE_MIGRATION),
        "the NodeDrain's status names the responder: {status}"
    );

    agent.wait_event(EventKind::DrainCompleted).await;
    assert!(!pod_exists(&sim, "vm-1").await);
    let asked = evicted(&sim);
    assert!(asked.contains(&"web-1".to_string()), "{asked:?}");
    assert!(
        !asked.contains(&"vm-1".to_string()),
        "the live-migrated pod is never also evicted through the Eviction API: {asked:?}"
    );
    let evicting = agent
        .events()
        .into_iter()
        .find(|e| e.event == EventKind::PodEvicting && e.pod.as_deref() == Some("vm-1"))
        .unwrap();
    assert!(evicting.message.contains(&name), "{}", evicting.message);
    // Once final, the request is deleted, as the KEP asks of a requester.
    let k_ref = &k;
    eventually("the request is deleted", || async move {
        let (ok, out, _) = k_ref
            .run(&[
                "get",
                "evictionrequests.lifecycle.k8s.io",
                "-A",
                "-o",
                "name",
            ])
            .await;
        ok && out.trim().is_empty()
    })
    .await;
    assert_eq!(
        request_writes(&sim),
        [
            ("create".to_string(), name.clone()),
            ("delete".to_string(), name)
        ]
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_api_or_with_it_turned_off_the_same_pod_goes_through_the_eviction_api() {
    for (served, mode) in [(false, Mode::Auto), (true, Mode::Off)] {
        let sim = cluster(served).await;
        running_pod(&sim, "vm-1", migrating("600")).await;
        let agent = agent(&sim, mode);
        taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
        agent.wait_event(EventKind::DrainCompleted).await;
        assert!(
            evicted(&sim).contains(&"vm-1".to_string()),
            "served {served}, {mode:?}: {:?}",
            evicted(&sim)
        );
        assert!(request_writes(&sim).is_empty(), "served {served}, {mode:?}");
        let user = "system:serviceaccount:maintd:maintd";
        let asked_for_requests = sim
            .state
            .audit
            .authorizations()
            .into_iter()
            .any(|a| a.user == user && a.resource == "evictionrequests");
        assert!(!asked_for_requests, "served {served}, {mode:?}");
        agent.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_withdraws_the_request_and_the_pod_stays() {
    let sim = cluster(true).await;
    let vm = running_pod(&sim, "vm-1", migrating("600")).await;
    let agent = draining_until_migrating(&sim).await;
    let state = agent
        .progress
        .status()
        .stages
        .iter()
        .flat_map(|s| s.pods.clone())
        .find(|p| p.name == "vm-1")
        .map(|p| p.state);
    assert_eq!(state, Some(PodState::Blocked));

    taint(&sim.client(), "node-a", "maintd.io/drain", None).await;
    agent.wait_event(EventKind::UndoCompleted).await;
    withdrawn_then_deleted(&sim, &vm).await;
    assert!(
        pod_exists(&sim, "vm-1").await,
        "the migration was cancelled"
    );
    assert!(!is_cordoned(&sim.client(), "node-a").await);
    assert!(evicted(&sim).is_empty());
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_escalates_past_a_slow_responder_as_it_escalates_past_a_budget() {
    let sim = cluster(true).await;
    let vm = running_pod(&sim, "vm-1", migrating("600")).await;
    let config = Config::for_node("node-a", "/nonexistent/manifests".into());
    let locked = common::logind_agent::start(&sim, std::time::Duration::from_secs(6), config).await;
    locked.reboot_in_time().await;
    let agent = &locked.agent;
    agent.wait_event(EventKind::ShutdownReleased).await;
    let events = agent.events();
    let of_vm = |kind: EventKind| {
        events
            .iter()
            .position(|e| e.event == kind && e.pod.as_deref() == Some("vm-1"))
    };
    let asked = of_vm(EventKind::PodEvicting).expect("asked through its request");
    let escalated = of_vm(EventKind::StageEscalated).expect("deleted when its share ran out");
    assert!(asked < escalated);
    assert!(!pod_exists(&sim, "vm-1").await);
    assert!(
        !evicted(&sim).contains(&"vm-1".to_string()),
        "deleted, never also evicted"
    );
    withdrawn_then_deleted(&sim, &vm).await;
    locked.agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_adopts_its_request() {
    let sim = cluster(true).await;
    // Long enough to outlast the first agent.
    let vm = running_pod(&sim, "vm-1", migrating("8")).await;
    let first = draining_until_migrating(&sim).await;
    first.stop().await;

    let second = agent(&sim, Mode::Auto);
    second.wait_event(EventKind::DrainCompleted).await;
    assert!(!pod_exists(&sim, "vm-1").await);
    let asked = evicted(&sim);
    assert!(!asked.contains(&"vm-1".to_string()), "{asked:?}");
    // One request for vm-1 across both agents: the second found the
    // first's (its create answered 409) and followed it.
    let creates: Vec<u16> = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| {
            e.resource == "evictionrequests.lifecycle.k8s.io"
                && e.verb == "create"
                && e.name == format!("maintd-{vm}")
        })
        .map(|e| e.code)
        .collect();
    assert_eq!(creates, [201, 409]);
    let followed = second
        .events()
        .into_iter()
        .any(|e| e.event == EventKind::PodGone && e.pod.as_deref() == Some("vm-1"));
    assert!(followed, "the second agent followed the request to its end");
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_undone_while_its_agent_was_down_has_its_request_withdrawn_by_the_next() {
    let sim = cluster(true).await;
    let vm = running_pod(&sim, "vm-1", migrating("600")).await;
    let first = draining_until_migrating(&sim).await;
    first.stop().await;
    // The maintenance ends while no agent runs.
    taint(&sim.client(), "node-a", "maintd.io/drain", None).await;

    let second = agent(&sim, Mode::Auto);
    second.wait_event(EventKind::UndoCompleted).await;
    withdrawn_then_deleted(&sim, &vm).await;
    assert!(
        pod_exists(&sim, "vm-1").await,
        "the migration was cancelled"
    );
    assert!(evicted(&sim).is_empty());
    second.stop().await;
}
