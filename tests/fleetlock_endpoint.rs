//! FleetLock over the agent's node-local endpoint, as Zincati calls it:
//! pre-reboot takes the reboot slot and answers success only once the node
//! is drained; steady-state undoes the drain and frees the slot.

use crate::common;

use std::net::SocketAddr;

use common::endpoint::{EndpointAgent, send_raw};
use common::*;
use serde_json::{Value, json};

async fn fleetlock(addr: SocketAddr, path: &str, header: bool) -> (u16, Value) {
    let body =
        json!({"client_params": {"id": "node-a-machine-id", "group": "default"}}).to_string();
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n{}Content-Length: {}\r\n\r\n{body}",
        if header {
            "fleet-lock-protocol: true\r\n"
        } else {
            ""
        },
        body.len()
    );
    let (code, text) = send_raw(addr, raw.as_bytes()).await;
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zincati_pre_reboot_waits_for_the_drain_and_steady_state_undoes() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = EndpointAgent::start(&sim, "node-a").await;

    let (code, reply) = fleetlock(agent.fleetlock, "/v1/pre-reboot", false).await;
    assert_eq!(code, 400, "{reply}");
    assert_eq!(reply["kind"], "missing_fleetlock_header");
    let (code, _) = fleetlock(agent.readonly, "/v1/pre-reboot", true).await;
    assert_eq!(code, 404, "not served on the read-only listener");

    let (code, reply) = fleetlock(agent.fleetlock, "/v1/pre-reboot", true).await;
    assert_eq!(code, 503, "{reply}");
    assert_eq!(reply["kind"], "drain_in_progress");
    let local = agent.fleetlock;
    eventually("pre-reboot answers success once drained", || async move {
        fleetlock(local, "/v1/pre-reboot", true).await.0 == 200
    })
    .await;
    let left: Vec<_> = pods_on(&client, "node-a")
        .await
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(
        left,
        ["pinned"],
        "the node was drained before the reboot was allowed"
    );
    let leases = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.resource.contains("leases") && e.code < 300)
        .count();
    assert!(leases >= 1, "a reboot slot was taken");

    // The slot notes the boot it was taken at.
    let boot_before = node_boot(&client, "node-a").await;
    assert_eq!(
        slot_boot(&client).await.as_deref(),
        Some(boot_before.as_str())
    );
    // Not rebooted yet: steady-state is refused, the node stays drained
    // and keeps its slot.
    let (code, reply) = fleetlock(agent.fleetlock, "/v1/steady-state", true).await;
    assert_eq!(code, 409, "{reply}");
    assert_eq!(reply["kind"], "failed_unlock_not_rebooted");
    assert!(
        reply["value"].as_str().unwrap().contains(&boot_before),
        "{reply}"
    );
    assert!(is_cordoned(&client, "node-a").await);
    assert!(slot_boot(&client).await.is_some(), "the slot is still held");

    sim.reboot_node("node-a", std::time::Duration::from_millis(200))
        .unwrap();
    let local = agent.fleetlock;
    eventually(
        "steady-state is honoured once the node booted again",
        || async move { fleetlock(local, "/v1/steady-state", true).await.0 == 200 },
    )
    .await;
    eventually("the node is back in service", || async {
        !is_cordoned(&client, "node-a").await
    })
    .await;
    assert_eq!(slot_boot(&client).await, None, "the slot is given back");
    agent.stop().await;
}

/// A node whose reboot never comes: past the reboot timeout its
/// steady-state is honoured, and a Warning says it went without a reboot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_without_a_reboot_is_honoured_only_past_the_reboot_timeout() {
    let sim = scenario("small.yaml").await;
    let client = sim.client();
    let agent = EndpointAgent::start_with(&sim, "node-a", |c| {
        // Long enough for the drain to finish and the first steady-state
        // to come well within it, however busy the machine.
        c.reboot_timeout = std::time::Duration::from_secs(15);
    })
    .await;
    let local = agent.fleetlock;
    eventually("pre-reboot answers success once drained", || async move {
        fleetlock(local, "/v1/pre-reboot", true).await.0 == 200
    })
    .await;
    let (code, reply) = fleetlock(local, "/v1/steady-state", true).await;
    assert_eq!(
        (code, reply["kind"].as_str()),
        (409, Some("failed_unlock_not_rebooted"))
    );
    let mut reply = Value::Null;
    for _ in 0..300 {
        let (code, r) = fleetlock(local, "/v1/steady-state", true).await;
        if code == 200 {
            reply = r;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        reply["value"]
            .as_str()
            .is_some_and(|v| v.contains("without a reboot")),
        "{reply}"
    );
    eventually("the node is back in service", || async {
        !is_cordoned(&client, "node-a").await
    })
    .await;
    // Counted as a reboot that did not come.
    let (code, metrics) = common::endpoint::request(agent.readonly, "GET", "/metrics", "").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("maintd_reboots_total{outcome=\"overdue\"} 1"),
        "{metrics}"
    );
    agent.stop().await;
}

/// The boot ID the agent's slot Lease (group `default`) was taken at, while
/// it is held.
async fn slot_boot(client: &kube::Client) -> Option<String> {
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), "maintd");
    leases
        .list(&kube::api::ListParams::default().labels("maintd.io/reboot-group=default"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|l| l.spec.as_ref().is_some_and(|s| s.holder_identity.is_some()))
        .find_map(|l| l.metadata.annotations?.get("maintd.io/boot-id").cloned())
}

async fn node_boot(client: &kube::Client, node: &str) -> String {
    let n: k8s_openapi::api::core::v1::Node =
        kube::Api::all(client.clone()).get(node).await.unwrap();
    n.status.unwrap().node_info.unwrap().boot_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_drain_waits_for_the_reboot_slot_another_node_holds() {
    let sim = scenario("small.yaml").await;
    let a = EndpointAgent::start(&sim, "node-a").await;
    let b = EndpointAgent::start(&sim, "node-b").await;
    let drain = json!({"reason": "os update"}).to_string();
    let (code, _) = common::endpoint::request(&a.local, "POST", "/v1/drain", &drain).await;
    assert_eq!(code, 202);
    a.wait_status("node-a drained", |st| st["drain"]["phase"] == "Drained")
        .await;
    let (code, _) = common::endpoint::request(&b.local, "POST", "/v1/drain", &drain).await;
    assert_eq!(code, 202);
    let st = b
        .wait_status("node-b waits for the slot", |st| {
            st["drain"]["waiting"]
                .as_str()
                .is_some_and(|e| e.contains("a reboot slot") && e.contains("held by node-a"))
        })
        .await;
    assert_eq!(
        st["drain"]["phase"], "Idle",
        "node-b does not start while node-a holds the slot"
    );
    let (code, _) = common::endpoint::request(&a.local, "POST", "/v1/undrain", "").await;
    assert_eq!(code, 202);
    b.wait_status("node-b drained once the slot is free", |st| {
        st["drain"]["phase"] == "Drained"
    })
    .await;
    a.stop().await;
    b.stop().await;
}
