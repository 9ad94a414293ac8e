//! Reboot slots and FleetLock against the simulated cluster: the semaphore
//! holds its count under races, dead holders lose their slot, control-plane
//! nodes wait for their peers, and Zincati's requests get the protocol's
//! answers.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use maintd::coordination::{Acquisition, CONTROL_PLANE_LABEL, RebootSlots};

const NS: &str = "kube-system";
const LONG: Duration = Duration::from_secs(60);

fn slots(sim: &maintd::sim::SimCluster, group: &str, max: u32, d: Duration) -> RebootSlots {
    RebootSlots::new(sim.client(), NS, group, max, d)
}

fn holders_of<T>(a: &Acquisition<T>) -> Vec<String> {
    match a {
        Acquisition::Full { holders } => holders.iter().map(|h| h.holder.clone()).collect(),
        _ => vec![],
    }
}

#[tokio::test]
async fn one_slot_the_second_node_waits_until_the_first_releases() {
    let sim = common::sim().await;
    let (a, b) = (
        slots(&sim, "workers", 1, LONG),
        slots(&sim, "workers", 1, LONG),
    );
    assert!(a.try_acquire("node-a").await.unwrap().is_acquired());
    // Recursive: asking again keeps the same slot, and takes no second one.
    assert!(a.try_acquire("node-a").await.unwrap().is_acquired());
    let refused = b.try_acquire("node-b").await.unwrap();
    assert_eq!(holders_of(&refused), ["node-a"], "Full names the holder");
    assert_eq!(a.holders("node-a").await.unwrap().len(), 1);

    assert!(a.release("node-a").await.unwrap());
    assert!(
        !a.release("node-a").await.unwrap(),
        "a second release is a no-op"
    );
    assert!(b.try_acquire("node-b").await.unwrap().is_acquired());
    assert_eq!(
        holders_of(&a.try_acquire("node-a").await.unwrap()),
        ["node-b"]
    );
}

#[tokio::test]
async fn two_slots_hold_two_nodes_and_refuse_a_third() {
    let sim = common::sim().await;
    let s = |_| slots(&sim, "workers", 2, LONG);
    assert!(s(0).try_acquire("node-a").await.unwrap().is_acquired());
    assert!(s(1).try_acquire("node-b").await.unwrap().is_acquired());
    let mut full = holders_of(&s(2).try_acquire("node-c").await.unwrap());
    full.sort();
    assert_eq!(full, ["node-a", "node-b"]);
    // Another group has its own slots.
    assert!(
        slots(&sim, "db", 1, LONG)
            .try_acquire("node-c")
            .await
            .unwrap()
            .is_acquired()
    );
}

#[tokio::test]
async fn a_dead_holder_loses_its_slot_once_the_lease_expires() {
    let sim = common::sim().await;
    let d = Duration::from_secs(2);
    let a = slots(&sim, "workers", 1, d);
    let guard = match a
        .acquire_with_renewal("node-a", CancellationToken::new())
        .await
        .unwrap()
    {
        Acquisition::Acquired(g) => g,
        other => panic!("node-a should get the free slot, got {other:?}"),
    };
    let b = slots(&sim, "workers", 1, d);
    assert!(!b.try_acquire("node-b").await.unwrap().is_acquired());
    // The agent dies: no release, no more renewals.
    drop(guard);
    common::eventually("node-b takes over the expired slot", || {
        let b = b.clone();
        async move { b.try_acquire("node-b").await.unwrap().is_acquired() }
    })
    .await;
    assert_eq!(
        holders_of(&a.try_acquire("node-a").await.unwrap()),
        ["node-b"]
    );
}

#[tokio::test]
async fn a_renewing_holder_keeps_its_slot_past_the_lease_duration() {
    let sim = common::sim().await;
    let d = Duration::from_secs(2);
    let a = slots(&sim, "workers", 1, d);
    let guard = match a
        .acquire_with_renewal("node-a", CancellationToken::new())
        .await
        .unwrap()
    {
        Acquisition::Acquired(g) => g,
        other => panic!("node-a should get the free slot, got {other:?}"),
    };
    let b = slots(&sim, "workers", 1, d);
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            holders_of(&b.try_acquire("node-b").await.unwrap()),
            ["node-a"]
        );
    }
    assert!(guard.still_held());
    assert!(guard.release().await.unwrap());
    assert!(b.try_acquire("node-b").await.unwrap().is_acquired());
}

// Two worker threads so the two acquirers really run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_acquirers_for_one_slot_exactly_one_wins() {
    let sim = common::sim().await;
    let names = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(sim.client(), NS);
    for round in 0..30 {
        let group = format!("race-{round}");
        if round % 2 == 1 {
            // Odd rounds race for an expired slot instead of a missing one.
            let old = slots(&sim, &group, 1, Duration::from_secs(1));
            assert!(old.try_acquire("node-dead").await.unwrap().is_acquired());
            let lease = names
                .get(&maintd::coordination::slot_name(&group, 0))
                .await
                .unwrap();
            let mut stale = serde_json::to_value(&lease).unwrap();
            stale["spec"]["renewTime"] = json!("2020-01-01T00:00:00.000000Z");
            let stale = serde_json::from_value(stale).unwrap();
            names
                .replace(
                    &maintd::coordination::slot_name(&group, 0),
                    &PostParams::default(),
                    &stale,
                )
                .await
                .unwrap();
        }
        let (a, b) = (slots(&sim, &group, 1, LONG), slots(&sim, &group, 1, LONG));
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { a.try_acquire("node-a").await.unwrap().is_acquired() }),
            tokio::spawn(async move { b.try_acquire("node-b").await.unwrap().is_acquired() }),
        );
        let winners = [ra.unwrap(), rb.unwrap()].iter().filter(|w| **w).count();
        assert_eq!(winners, 1, "round {round}: exactly one node holds the slot");
        let holders = slots(&sim, &group, 1, LONG)
            .holders("node-a")
            .await
            .unwrap();
        assert_eq!(holders.len(), 1, "round {round}");
    }
}

async fn control_plane_node(client: &kube::Client, name: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut body = common::node_json(name);
    body["metadata"]["labels"][CONTROL_PLANE_LABEL] = json!("");
    let node: Node = serde_json::from_value(body).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_ready(client, name, ready).await;
}

async fn set_ready(client: &kube::Client, name: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

async fn control_plane_slots(client: &kube::Client, name: &str) -> RebootSlots {
    let node = Api::<Node>::all(client.clone()).get(name).await.unwrap();
    // Asking for a group of five: a control-plane node still gets its own
    // group with one holder.
    RebootSlots::for_node(client.clone(), NS, &node, "default", 5, LONG)
}

#[tokio::test]
async fn a_control_plane_node_waits_while_another_is_not_ready() {
    let sim = common::sim().await;
    let client = sim.client();
    control_plane_node(&client, "cp-1", true).await;
    control_plane_node(&client, "cp-2", false).await;
    let cp1 = control_plane_slots(&client, "cp-1").await;
    assert_eq!(cp1.group(), "control-plane");
    match cp1.try_acquire("cp-1").await.unwrap() {
        Acquisition::QuorumBlocked { not_ready } => assert_eq!(not_ready, ["cp-2"]),
        other => panic!("cp-1 must wait for cp-2, got {other:?}"),
    }
    assert!(
        cp1.holders("cp-1").await.unwrap().is_empty(),
        "no slot taken while blocked"
    );

    set_ready(&client, "cp-2", true).await;
    assert!(cp1.try_acquire("cp-1").await.unwrap().is_acquired());
    let cp2 = control_plane_slots(&client, "cp-2").await;
    assert_eq!(
        holders_of(&cp2.try_acquire("cp-2").await.unwrap()),
        ["cp-1"]
    );
}

/// An API server too busy to answer when a node gives its slot back: the
/// release is tried again until it lands, rather than leaving the slot
/// held, unrenewed, for the others to wait out until it expires.
#[tokio::test]
async fn a_slot_given_back_while_the_api_server_fails_is_given_back_once_it_answers() {
    let sim = common::sim().await;
    // Without kube's own retries, as the agent's client is.
    let a = RebootSlots::new(sim.client_with(false), NS, "workers", 1, LONG);
    let b = slots(&sim, "workers", 1, LONG);
    let guard = match a
        .acquire_with_renewal("node-a", CancellationToken::new())
        .await
        .unwrap()
    {
        Acquisition::Acquired(g) => g,
        _ => panic!("the only slot is free"),
    };
    sim.state.faults.fail_requests(1.0, 503);
    let release = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !release.is_finished(),
        "still trying while every call fails"
    );
    sim.state.faults.clear();
    assert!(
        release.await.unwrap().unwrap(),
        "given back once it answers"
    );
    assert!(b.try_acquire("node-b").await.unwrap().is_acquired());
}
