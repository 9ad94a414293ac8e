//! KEP-5683's lifecycle conditions on the agent's Node, read with kubectl
//! as any other component would: a drain shows `DrainInProgress` then
//! `Drained` under `MaintenanceInProgress`, and its undo clears them; a
//! planned drain waiting for its window shows `MaintenancePlanned`; an
//! admin's own `MaintenancePlanned` is left as the admin wrote it.

use crate::common;

use common::agent::RunningAgent;
use common::endpoint::{EndpointAgent, request};
use common::kubectl::Kubectl;
use common::*;
use maintd::policy::{Policy, Window};
use serde_json::Value;
use std::collections::BTreeMap;

const LIFECYCLE: [&str; 5] = [
    "MaintenancePlanned",
    "MaintenanceInProgress",
    "DrainInProgress",
    "Drained",
    "GracefulNodeShutdownInProgress",
];

/// The lifecycle conditions a Node shows True, with their reasons.
fn lifecycle(node: &Value) -> BTreeMap<String, String> {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| LIFECYCLE.contains(&c["type"].as_str().unwrap_or_default()))
        .filter(|c| c["status"] == "True")
        .map(|c| {
            (
                c["type"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn states(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(t, r)| (t.to_string(), r.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_drain_shows_drain_in_progress_then_drained_and_its_undo_clears_them() {
    let sim = scenario("small.yaml").await;
    install_crds(&sim.client()).await;
    let k = Kubectl::new(&sim);
    let watch = k.watch_json(&["node", "node-a"]);
    let agent = RunningAgent::start(&sim, "node-a", None);
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent
        .wait_event(maintd::drain::progress::EventKind::DrainCompleted)
        .await;
    let k_ref = &k;
    eventually("kubectl shows node-a drained", || async move {
        lifecycle(&k_ref.json(&["get", "node", "node-a"]).await).contains_key("Drained")
    })
    .await;
    let node = k.json(&["get", "node", "node-a"]).await;
    let drained = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Drained")
        .unwrap();
    let message = drained["message"].as_str().unwrap();
    assert!(
        message.starts_with("maintd: ")
            && message.contains("taint maintd.io/drain=kernel:NoSchedule")
            && message.contains("kubectl get nodedrain node-a"),
        "names the trigger and the NodeDrain: {message}"
    );
    assert!(drained["lastTransitionTime"].is_string());
    taint(&sim.client(), "node-a", "maintd.io/drain", None).await;
    eventually(
        "kubectl shows no lifecycle condition on node-a",
        || async move { lifecycle(&k_ref.json(&["get", "node", "node-a"]).await).is_empty() },
    )
    .await;

    // What a watcher of the Node saw, in order, each state once.
    let mut seen: Vec<BTreeMap<String, String>> =
        watch.seen.lock().unwrap().iter().map(lifecycle).collect();
    seen.dedup();
    let draining = states(&[
        ("MaintenanceInProgress", "AdminRequested"),
        ("DrainInProgress", "AdminRequested"),
    ]);
    let drained = states(&[
        ("MaintenanceInProgress", "AdminRequested"),
        ("Drained", "DrainCompleted"),
    ]);
    assert_eq!(
        seen,
        [BTreeMap::new(), draining, drained, BTreeMap::new()],
        "the states a watcher of node-a saw"
    );
    // maintd's own condition is still written, deprecated, beside them.
    let node = k.json(&["get", "node", "node-a"]).await;
    assert!(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "MaintdDrain" && c["reason"] == "Idle")
    );
    agent.stop().await;
}

/// A window that opens in an hour: a planned drain waits for it.
fn window_in_an_hour() -> Window {
    let at = |d: u64| {
        jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(d as i64))
            .unwrap()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .strftime("%H:%M:%S")
            .to_string()
    };
    Window::parse("", &at(3600), &at(7200), "UTC").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_waiting_for_its_window_shows_maintenance_planned_and_an_admins_is_left_alone() {
    let sim = scenario("small.yaml").await;
    install_crds(&sim.client()).await;
    let k = Kubectl::new(&sim);
    let k_ref = &k;
    let a = EndpointAgent::start_with(&sim, "node-a", |c| {
        c.policy = Policy {
            window: Some(window_in_an_hour()),
            ..Policy::default()
        };
    })
    .await;
    let (code, _) = request(&a.local, "POST", "/v1/drain", r#"{"reason": "os update"}"#).await;
    assert_eq!(code, 202);
    eventually(
        "kubectl shows MaintenancePlanned for the window",
        || async move {
            lifecycle(&k_ref.json(&["get", "node", "node-a"]).await)
                == states(&[("MaintenancePlanned", "MaintenanceWindow")])
        },
    )
    .await;
    let node = k.json(&["get", "node", "node-a"]).await;
    let planned = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "MaintenancePlanned")
        .unwrap()
        .clone();
    let message = planned["message"].as_str().unwrap();
    assert!(
        message.contains("local: os update") && message.contains("maintenance window"),
        "{message}"
    );
    // Withdrawn: the plan is gone, and so is the condition.
    let (code, _) = request(&a.local, "POST", "/v1/undrain", "").await;
    assert_eq!(code, 202);
    eventually("MaintenancePlanned is cleared", || async move {
        lifecycle(&k_ref.json(&["get", "node", "node-a"]).await).is_empty()
    })
    .await;

    // An admin plans maintenance of their own; the agent's next planned
    // drain leaves it as the admin wrote it, and so does its withdrawal.
    let admins = r#"{"status":{"conditions":[{"type":"MaintenancePlanned","status":"True","reason":"AdminRequested","message":"disk swap on Thursday","lastTransitionTime":"2026-11-25T00:00:00Z"}]}}"#;
    k.ok(&[
        "patch",
        "node",
        "node-a",
        "--subresource=status",
        "--type=strategic",
        "-p",
        admins,
    ])
    .await;
    let agent_node_writes = || node_status_writes(&sim, "node-a");
    let before = agent_node_writes();
    let (code, _) = request(&a.local, "POST", "/v1/drain", r#"{"reason": "os update"}"#).await;
    assert_eq!(code, 202);
    // The node's NodeDrain and its conditions are written in the same
    // round: once the NodeDrain says it waits, the conditions were decided.
    eventually("the NodeDrain says the drain waits", || async move {
        k_ref.json(&["get", "nodedrain", "node-a"]).await["status"]["waiting"].is_string()
    })
    .await;
    let (code, _) = request(&a.local, "POST", "/v1/undrain", "").await;
    assert_eq!(code, 202);
    eventually("the NodeDrain says it waits no more", || async move {
        k_ref.json(&["get", "nodedrain", "node-a"]).await["status"]["waiting"].is_null()
    })
    .await;
    assert_eq!(
        agent_node_writes(),
        before,
        "the admin's MaintenancePlanned is not the agent's to write or clear"
    );
    let node = k.json(&["get", "node", "node-a"]).await;
    let planned: Vec<&Value> = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "MaintenancePlanned")
        .collect();
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0]["message"], "disk swap on Thursday", "{node}");
    assert_eq!(planned[0]["reason"], "AdminRequested");
    a.stop().await;
}
