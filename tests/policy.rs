//! Planned drains wait for the agent's policy, as kured's reboots do: the
//! maintenance window and blocking pods hold a local drain, FleetLock and
//! a planned NodeMaintenance back, and say why and until when; shutdowns
//! and taints are never held back.

use crate::common;

use std::time::Duration;

use common::endpoint::{EndpointAgent, request};
use common::*;
use maintd::policy::{BlockingPods, Policy, Window};
use serde_json::{Value, json};

/// A window that opens `after` from now and stays open a while, written
/// in UTC as an operator would write it (HH:MM:SS).
fn window_opening_in(after: Duration) -> Window {
    let now = jiff::Timestamp::now();
    let at = |d: Duration| {
        now.checked_add(jiff::SignedDuration::try_from(d).unwrap())
            .unwrap()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .strftime("%H:%M:%S")
            .to_string()
    };
    Window::parse(
        "",
        &at(after),
        &at(after + Duration::from_secs(3600)),
        "UTC",
    )
    .unwrap()
}

fn evictions(sim: &maintd_sim::SimCluster) -> usize {
    sim.state
        .audit
        .entries()
        .iter()
        .filter(|e| e.verb == "evict")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_drain_outside_its_window_waits_says_until_when_and_starts_when_it_opens() {
    let sim = scenario("small.yaml").await;
    let a = EndpointAgent::start_with(&sim, "node-a", |c| {
        c.policy = Policy {
            window: Some(window_opening_in(Duration::from_secs(8))),
            ..Policy::default()
        };
    })
    .await;
    let (code, _) = request(&a.local, "POST", "/v1/drain", r#"{"reason": "os update"}"#).await;
    assert_eq!(code, 202);
    let st = a
        .wait_status("the drain says it waits for the window", |st| {
            st["drain"]["waiting"].as_str().is_some_and(|w| {
                w.contains("outside the maintenance window") && w.contains("waiting until it opens")
            })
        })
        .await;
    assert_eq!(
        st["drain"]["phase"], "Idle",
        "nothing happens before it opens"
    );
    assert!(
        !is_cordoned(&sim.client(), "node-a").await,
        "not even a cordon"
    );
    assert_eq!(evictions(&sim), 0);
    // The gauge says why.
    let (_, metrics) = request(a.readonly, "GET", "/metrics", "").await;
    assert!(
        metrics.contains(r#"maintd_planned_drain_waiting{reason="window"} 1"#),
        "{metrics}"
    );
    a.wait_status("drained once the window opened", |st| {
        st["drain"]["phase"] == "Drained"
    })
    .await;
    let st = a.status().await;
    assert!(st["drain"]["waiting"].is_null(), "{st}");
    assert!(evictions(&sim) > 0);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_pod_holds_a_planned_drain_until_it_is_gone_but_not_a_taint() {
    let sim = scenario("small.yaml").await;
    let mut backup = pod_json(
        "batch",
        "nightly-backup",
        "node-a",
        json!({"app": "backup"}),
    );
    backup["metadata"]["annotations"] = json!({"sim.maintd.io/shutdown-seconds": "0.2"});
    create_namespace(&sim, "batch").await;
    post_pod(&sim, &backup).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    let a = EndpointAgent::start_with(&sim, "node-a", |c| {
        c.policy = Policy {
            blocking: vec![BlockingPods::parse("app=backup").unwrap()],
            ..Policy::default()
        };
    })
    .await;
    request(&a.local, "POST", "/v1/drain", r#"{"reason": "kernel"}"#).await;
    a.wait_status("the drain names the blocking pod", |st| {
        st["drain"]["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("blocking selector") && w.contains("batch/nightly-backup"))
    })
    .await;
    // FleetLock asks too: refused with the pod's name.
    let (code, body) = common::endpoint::request_with_headers(
        a.fleetlock,
        "POST",
        "/v1/pre-reboot",
        &[("fleet-lock-protocol", "true")],
        r#"{"client_params": {"id": "machine-1", "group": "default"}}"#,
    )
    .await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body.contains("failed_lock_policy") && body.contains("nightly-backup"),
        "{body}"
    );
    assert_eq!(evictions(&sim), 0, "nothing evicted while the pod runs");
    // The pod finishes its work and goes: the drain starts.
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(sim.client(), "batch");
    pods.delete("nightly-backup", &Default::default())
        .await
        .unwrap();
    a.wait_status("drained once the pod is gone", |st| {
        st["drain"]["phase"] == "Drained"
    })
    .await;
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_is_never_held_back_by_the_window() {
    let sim = scenario("small.yaml").await;
    let a = EndpointAgent::start_with(&sim, "node-a", |c| {
        c.policy = Policy {
            window: Some(window_opening_in(Duration::from_secs(3000))),
            ..Policy::default()
        };
    })
    .await;
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("now")).await;
    let st = a
        .wait_status("drained at once", |st| st["drain"]["phase"] == "Drained")
        .await;
    assert!(st["drain"]["waiting"].is_null(), "{st}");
    a.stop().await;
}

/// FleetLock's pre-reboot outside the window: refused with its own error
/// kind and the time the window opens, and no slot is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetlock_outside_the_window_is_refused_with_until_when() {
    let sim = scenario("small.yaml").await;
    let a = EndpointAgent::start_with(&sim, "node-a", |c| {
        c.policy = Policy {
            window: Some(window_opening_in(Duration::from_secs(3000))),
            ..Policy::default()
        };
    })
    .await;
    let (code, body) = common::endpoint::request_with_headers(
        a.fleetlock,
        "POST",
        "/v1/pre-reboot",
        &[("fleet-lock-protocol", "true")],
        r#"{"client_params": {"id": "machine-1", "group": "default"}}"#,
    )
    .await;
    assert_eq!(code, 409, "{body}");
    let reply: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["kind"], "failed_lock_policy");
    assert!(
        reply["value"].as_str().is_some_and(
            |v| v.contains("outside the maintenance window") && v.contains("retry after")
        ),
        "{reply}"
    );
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(sim.client(), "maintd");
    let held = leases
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some("node-a"))
        .count();
    assert_eq!(held, 0, "no slot taken");
    a.stop().await;
}
