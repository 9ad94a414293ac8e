//! Reboot slots and FleetLock against the simulated cluster: the semaphore
//! holds its count under races, dead holders lose their slot, control-plane
//! nodes wait for their peers, and Zincati's requests get the protocol's
//! answers.

use crate::common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use maintd::coordination::{
    Acquisition, CONTROL_PLANE_LABEL, RebootSlots, SlotGuard, SlotHolds, SlotRequest, wait_for_slot,
};
use maintd::index::WatchGuard;

const NS: &str = "kube-system";
const LONG: Duration = Duration::from_secs(60);

fn slots(sim: &maintd_sim::SimCluster, group: &str, max: u32, d: Duration) -> RebootSlots {
    RebootSlots::new(sim.client(), NS, group, max, d)
}

/// `node`'s hold on the free slot of `slots`, renewed until released.
async fn hold(slots: &RebootSlots, node: &str) -> SlotGuard {
    match slots
        .acquire_with_renewal(node, CancellationToken::new())
        .await
        .unwrap()
    {
        Acquisition::Acquired(g) => g,
        other => panic!("{node} should get the free slot, got {other:?}"),
    }
}

/// Every slot of `group` (of `max`) held, by nodes `h-0`, `h-1`... (a node
/// takes only its two candidates, so more nodes than slots ask).
async fn fill_slots(sim: &maintd_sim::SimCluster, group: &str, max: u32) -> Vec<SlotGuard> {
    let mut guards = Vec::new();
    let mut i = 0;
    while guards.len() < max as usize {
        assert!(i < 10_000, "{max} slots of {group} filled");
        let taken = slots(sim, group, max, LONG)
            .acquire_with_renewal(&format!("h-{i}"), CancellationToken::new())
            .await
            .unwrap();
        if let Acquisition::Acquired(g) = taken {
            guards.push(g);
        }
        i += 1;
    }
    guards
}

/// The slot node `n`, in line, takes of `in_line` through the waiter the
/// agent uses, within 30 s (`taking` says what it should take).
async fn wait_in_line(
    sim: &maintd_sim::SimCluster,
    in_line: RebootSlots,
    taking: &str,
) -> SlotGuard {
    let request = SlotRequest {
        slots: in_line,
        node: "n".into(),
        what: "a drain slot, next in line".into(),
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        wait_for_slot(
            sim.client(),
            request,
            WatchGuard::default(),
            CancellationToken::new(),
            CancellationToken::new(),
            std::sync::Arc::new(|_| {}),
        ),
    )
    .await
    .expect(taking)
    .expect("not cancelled")
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

/// A waiting node takes a slot from what its watch shows, without reading
/// the slots again. A watch behind the slots (the slot shown free, or not
/// yet made, is held by now) costs a conflict and a read: never a second
/// holder.
#[tokio::test]
async fn a_take_from_a_watch_behind_the_slots_never_makes_a_second_holder() {
    let sim = common::sim().await;
    let (a, b) = (slots(&sim, "seen", 1, LONG), slots(&sim, "seen", 1, LONG));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(sim.client(), NS);
    let name = a.slot_name(0);
    // Not made yet, in the watch of node-b; node-a makes it meanwhile.
    let guard_a = hold(&a, "node-a").await;
    match b
        .acquire_seen_with_renewal("node-b", Some(&[]), CancellationToken::new())
        .await
        .unwrap()
    {
        Acquisition::Full { holders } => assert_eq!(holders[0].holder, "node-a"),
        other => panic!("node-a holds the only slot: {other:?}"),
    }
    // Free in the watch (node-a gave it back), held again by now.
    guard_a.release().await.unwrap();
    let free = leases.get(&name).await.unwrap();
    let guard_a = hold(&a, "node-a").await;
    let got = b
        .acquire_seen_with_renewal(
            "node-b",
            Some(std::slice::from_ref(&free)),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(holders_of(&got), ["node-a"], "{got:?}");
    // A current view: node-b takes the slot once node-a gives it back.
    guard_a.release().await.unwrap();
    let free = leases.get(&name).await.unwrap();
    let guard_b = match b
        .acquire_seen_with_renewal(
            "node-b",
            Some(std::slice::from_ref(&free)),
            CancellationToken::new(),
        )
        .await
        .unwrap()
    {
        Acquisition::Acquired(g) => g,
        other => panic!("the slot is free: {other:?}"),
    };
    let held = leases.get(&name).await.unwrap();
    assert_eq!(
        held.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("node-b")
    );
    // Its guard gives back exactly its slot.
    assert!(guard_b.release().await.unwrap());
    assert!(b.holders("node-b").await.unwrap().is_empty());
}

/// One agent may hold a slot twice over: a wait stopped just as it took
/// the slot hands its guard back to be given back, while the wait that
/// replaced it finds the slot already the node's and takes it up again.
/// Giving back the first must not end the second's hold: the node goes on
/// with its turn (cordoned, draining), and the next node must not get its
/// slot meanwhile. Built as the agent builds its slots: every set shares
/// the agent's holds.
#[tokio::test]
async fn a_slot_taken_up_again_stays_held_when_the_first_take_is_given_back() {
    let sim = common::sim().await;
    let holds = SlotHolds::new();
    let of_agent = || slots(&sim, "again", 1, LONG).held_with(&holds);
    let (stopped_wait, next_wait, other) = (of_agent(), of_agent(), slots(&sim, "again", 1, LONG));
    let first = hold(&stopped_wait, "node-a").await;
    let second = hold(&next_wait, "node-a").await;
    assert_eq!(
        first.slot(),
        second.slot(),
        "the node's own slot, taken up again"
    );

    assert!(
        !first.release().await.unwrap(),
        "the slot is still held by the agent's other guard"
    );
    assert_eq!(
        holders_of(&other.try_acquire("node-b").await.unwrap()),
        ["node-a"],
        "the next node waits: the slot is still node-a's"
    );
    assert!(
        !stopped_wait.release("node-a").await.unwrap(),
        "a give-back of a slot taken before a restart leaves a held one alone too"
    );
    assert!(second.still_held());

    assert!(
        second.release().await.unwrap(),
        "the last guard gives it back"
    );
    assert!(other.try_acquire("node-b").await.unwrap().is_acquired());
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
    let guard = hold(&a, "node-a").await;
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
    let guard = hold(&a, "node-a").await;
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

/// A holder renews its slot and gives it back with one write each, from
/// its own last write of the Lease: it reads the Lease only once a write
/// is refused because someone else changed it, and a renewal after a
/// takeover finds the slot lost.
#[tokio::test]
async fn a_holder_renews_and_gives_back_from_its_own_write_and_reads_only_after_a_conflict() {
    let sim = common::sim().await;
    let a = slots(&sim, "workers", 1, LONG);
    let guard = hold(&a, "node-a").await;
    let slot = maintd::coordination::slot_name("workers", 0);
    let path = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{slot}");
    let count = |method: &str, code: u16| {
        sim.state.audit.count_requests(|r| {
            r.method == method
                && !r.watch
                && r.path.split('?').next() == Some(&path)
                && r.code == code
        })
    };
    let (reads, writes) = (count("GET", 200), count("PUT", 200));
    for _ in 0..3 {
        a.renew("node-a", &slot).await.unwrap();
    }
    assert_eq!(count("GET", 200), reads, "three renewals, no read");
    assert_eq!(count("PUT", 200), writes + 3);

    // Someone else's change of the Lease (a label): the next renewal is
    // refused once, reads the Lease, and renews it.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(sim.client(), NS);
    leases
        .patch(
            &slot,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "infra"}}})),
        )
        .await
        .unwrap();
    a.renew("node-a", &slot).await.unwrap();
    assert_eq!(count("PUT", 409), 1);
    assert_eq!(count("GET", 200), reads + 1, "one read, after the conflict");
    assert!(guard.release().await.unwrap(), "given back");
    assert_eq!(count("GET", 200), reads + 1, "given back with no read");

    // Taken over while node-b held it: node-b's renewal from its own last
    // write is refused, and the read shows the slot lost.
    let b = slots(&sim, "workers", 1, LONG);
    assert!(b.try_acquire("node-b").await.unwrap().is_acquired());
    let reads = count("GET", 200);
    leases
        .patch(
            &slot,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "node-c"}})),
        )
        .await
        .unwrap();
    let e = b.renew("node-b", &slot).await.unwrap_err();
    assert!(
        matches!(e, maintd::coordination::CoordinationError::Lost { .. }),
        "{e}"
    );
    assert_eq!(count("PUT", 409), 2);
    assert_eq!(count("GET", 200), reads + 1, "one read, after the conflict");
}

// Two worker threads so the two acquirers really run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_acquirers_for_one_slot_exactly_one_wins() {
    let sim = common::sim().await;
    for round in 0..20 {
        let group = format!("race-{round}");
        if round % 2 == 1 {
            // Odd rounds race for an expired slot instead of a missing one:
            // its holder died (no renewal since) with a one-second hold.
            let old = slots(&sim, &group, 1, Duration::from_secs(1));
            assert!(old.try_acquire("node-dead").await.unwrap().is_acquired());
        }
        let (a, b) = (slots(&sim, &group, 1, LONG), slots(&sim, &group, 1, LONG));
        if round % 2 == 1 {
            // Both have watched the dead holder's hold go unrenewed for its
            // duration: it has lapsed for both.
            let clock = maintd::coordination::LeaseClock::new();
            let (a2, b2) = (
                a.clone().watched_with(&clock),
                b.clone().watched_with(&clock),
            );
            assert!(!a2.try_acquire("node-a").await.unwrap().is_acquired());
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let (ra, rb) = tokio::join!(
                tokio::spawn(async move { a2.try_acquire("node-a").await.unwrap().is_acquired() }),
                tokio::spawn(async move { b2.try_acquire("node-b").await.unwrap().is_acquired() }),
            );
            let winners = [ra.unwrap(), rb.unwrap()].iter().filter(|w| **w).count();
            assert_eq!(winners, 1, "round {round}: exactly one node holds the slot");
            continue;
        }
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
    let guard = hold(&a, "node-a").await;
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

/// A slot taken over behind its holder's back (its Lease rewritten while
/// the holder was paused, say): the holder's next renewal finds it so,
/// stops renewing, says it no longer holds it, and giving it back leaves
/// the new holder's hold alone.
#[tokio::test]
async fn a_holder_whose_slot_was_taken_over_knows_it_and_leaves_it_alone() {
    let sim = common::sim().await;
    let a = slots(&sim, "workers", 1, Duration::from_secs(2));
    let guard = hold(&a, "node-a").await;
    assert_eq!(guard.group(), "workers");
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(sim.client(), NS);
    let lease = leases.get(guard.slot()).await.unwrap();
    assert_eq!(
        lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref()),
        Some("node-a"),
        "the guard names the Lease it holds"
    );
    assert!(guard.still_held());
    leases
        .patch(
            guard.slot(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "node-b"}})),
        )
        .await
        .unwrap();
    let held = || guard.still_held();
    common::eventually("node-a's renewal finds the slot lost", || {
        let lost = !held();
        async move { lost }
    })
    .await;
    assert!(
        !guard.release().await.unwrap(),
        "nothing of node-a's to give back"
    );
    assert_eq!(
        holders_of(&a.try_acquire("node-a").await.unwrap()),
        ["node-b"],
        "node-b keeps the slot"
    );
}

/// A control-plane node waiting for its slot while a peer is NotReady says
/// which peer it waits for, asks again every few seconds rather than in a
/// loop (at 5,000 nodes, a waiter that spins is load on the API server),
/// and takes the slot once the peer is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_node_waiting_on_a_not_ready_peer_asks_again_every_few_seconds() {
    let sim = common::sim().await;
    let client = sim.client();
    control_plane_node(&client, "cp-1", true).await;
    control_plane_node(&client, "cp-2", false).await;
    let request = SlotRequest {
        slots: control_plane_slots(&client, "cp-1").await,
        node: "cp-1".into(),
        what: "a reboot slot".into(),
    };
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s = said.clone();
    let waiting = tokio::spawn(wait_for_slot(
        client.clone(),
        request,
        WatchGuard::default(),
        CancellationToken::new(),
        CancellationToken::new(),
        std::sync::Arc::new(move |m: maintd::drain::progress::WaitWords| {
            s.lock().unwrap().push(m.text)
        }),
    ));
    let last = || said.lock().unwrap().last().cloned().unwrap_or_default();
    common::eventually("the wait names the NotReady peer", || {
        let m = last();
        async move { m.contains("another control-plane node is NotReady (cp-2)") }
    })
    .await;
    // Each try reads the node first; a try is made at most every five
    // seconds (plus a random pause), so four or more in 12 s is a loop.
    let tries = || {
        sim.state
            .audit
            .count_requests(|r| r.method == "GET" && r.path == "/api/v1/nodes/cp-1")
    };
    let before = tries();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let during = tries() - before;
    assert!(during <= 3, "{during} tries in 12 s");
    assert!(!waiting.is_finished());

    set_ready(&client, "cp-2", true).await;
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the slot is taken once the peer is Ready")
        .unwrap()
        .expect("not cancelled");
    assert_eq!(guard.group(), "control-plane");
    assert!(guard.release().await.unwrap());
}

/// Giving a slot back is tried again only while the hold would last
/// anyway: once the Lease has lapsed by itself there is nothing left to
/// give back, and the last error is returned rather than trying forever.
#[tokio::test]
async fn giving_a_slot_back_stops_trying_once_the_hold_has_lapsed_by_itself() {
    let sim = common::sim().await;
    let a = RebootSlots::new(
        sim.client_with(false),
        NS,
        "workers",
        1,
        Duration::from_secs(2),
    );
    let guard = hold(&a, "node-a").await;
    sim.state.faults.fail_requests(1.0, 503);
    let given_back = tokio::time::timeout(Duration::from_secs(30), guard.release())
        .await
        .expect("the release ends once the hold has lapsed");
    sim.state.faults.clear();
    assert!(given_back.is_err(), "{given_back:?}");
    // The lapsed hold is no hold: the next node takes the slot, once it
    // has seen it go unrenewed for its duration itself.
    let b = slots(&sim, "workers", 1, Duration::from_secs(2));
    common::eventually("node-b takes the lapsed slot", || {
        let b = b.clone();
        async move { b.try_acquire("node-b").await.unwrap().is_acquired() }
    })
    .await;
}

/// A node waiting behind a holder that died (no release, no renewals)
/// names the holder, and takes the slot once the hold has expired: no
/// write shows the expiry, so the waiter's own timer must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waiting_behind_a_dead_holder_takes_the_slot_when_the_hold_expires() {
    let sim = common::sim().await;
    let d = Duration::from_secs(3);
    let guard = hold(&slots(&sim, "workers", 1, d), "node-a").await;
    // The agent dies: its hold lasts out its duration and then lapses.
    drop(guard);
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s = said.clone();
    let request = SlotRequest {
        slots: slots(&sim, "workers", 1, d),
        node: "node-b".into(),
        what: "a reboot slot".into(),
    };
    let guard = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::spawn(wait_for_slot(
            sim.client(),
            request,
            WatchGuard::default(),
            CancellationToken::new(),
            CancellationToken::new(),
            std::sync::Arc::new(move |m: maintd::drain::progress::WaitWords| {
                s.lock().unwrap().push(m.text)
            }),
        )),
    )
    .await
    .expect("the slot is taken once the dead holder's hold expires")
    .expect("the wait does not panic")
    .expect("not cancelled");
    assert_eq!(
        holders_of(
            &slots(&sim, "workers", 1, d)
                .try_acquire("node-a")
                .await
                .unwrap()
        ),
        ["node-b"]
    );
    let said = said.lock().unwrap().clone();
    assert!(
        said.first().is_some_and(|m| m.contains("node-a")),
        "the wait named the holder first: {said:?}"
    );
    assert!(guard.release().await.unwrap());
}

/// A renewal or a release that loses a race with another write (409) reads
/// the slot again and writes again, a bounded number of times; any other
/// error is said as the API server said it, after one write, and a release
/// that cannot be written is not taken for one with nothing to give back.
#[tokio::test]
async fn a_renewal_or_release_that_loses_a_race_is_tried_again_and_other_errors_are_said() {
    let sim = common::sim().await;
    let a = RebootSlots::new(sim.client_with(false), NS, "workers", 1, LONG);
    let b = slots(&sim, "workers", 1, LONG);
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    let faults = &sim.state.faults;
    // A failed write is not a lost race: no "full" with nobody holding.
    faults.fail_writes(&leases, 500, 1);
    let e = a.try_acquire("node-a").await.unwrap_err().to_string();
    assert!(
        e.contains("taking the slot") && e.contains("injected fault"),
        "{e}"
    );
    let Acquisition::Acquired(slot) = a.try_acquire("node-a").await.unwrap() else {
        panic!("the slot is free");
    };
    // Asking again while holding it renews it, through lost races too.
    faults.fail_writes(&leases, 409, 2);
    match a.try_acquire("node-a").await.unwrap() {
        Acquisition::Acquired(again) => assert_eq!(again, slot),
        other => panic!("node-a holds {slot}, got {other:?}"),
    }
    faults.fail_writes(&leases, 500, 1);
    let e = a.try_acquire("node-a").await.unwrap_err().to_string();
    assert!(
        e.contains("renewing the slot") && e.contains("injected fault"),
        "{e}"
    );
    // The writes to the slots answered with `code` so far.
    let failed = |code: u16| {
        sim.state
            .audit
            .count_requests(|r| r.method == "PUT" && r.path.starts_with(&leases) && r.code == code)
    };

    faults.fail_writes(&leases, 409, 2);
    a.renew("node-a", &slot)
        .await
        .expect("renewed on the third write");
    faults.fail_writes(&leases, 409, 100);
    let e = a.renew("node-a", &slot).await.unwrap_err().to_string();
    assert!(e.contains("kept changing under 5 attempts"), "{e}");
    assert_eq!(failed(409), 2 + 2 + 5);
    faults.clear();
    faults.fail_writes(&leases, 500, 100);
    let e = a.renew("node-a", &slot).await.unwrap_err().to_string();
    assert!(
        e.contains("renewing the slot") && e.contains("injected fault"),
        "{e}"
    );
    assert_eq!(failed(500), 2);

    let e = tokio::time::timeout(Duration::from_secs(30), a.release("node-a"))
        .await
        .expect("a failing release ends")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("releasing the slot") && e.contains("injected fault"),
        "{e}"
    );
    assert_eq!(failed(500), 3);
    faults.clear();
    faults.fail_writes(&leases, 409, 100);
    let e = a.release("node-a").await.unwrap_err().to_string();
    assert!(e.contains("releasing the slot"), "{e}");
    assert_eq!(failed(409), 9 + 6, "the first write and five more");
    faults.clear();
    assert!(
        !b.try_acquire("node-b").await.unwrap().is_acquired(),
        "still node-a's"
    );

    faults.fail_writes(&leases, 409, 2);
    assert!(
        a.release("node-a").await.unwrap(),
        "given back on the third write"
    );
    assert!(b.try_acquire("node-b").await.unwrap().is_acquired());
}

/// A node in line watches the free slots of its two buckets only: with
/// forty slots all held, one slot near it and one far from it given back,
/// its watch's selector finds exactly the near one, and it takes that
/// one; the far one stays free for the nodes near it.
#[tokio::test]
async fn a_node_in_line_sees_and_takes_a_free_slot_of_its_buckets_not_a_far_one() {
    let sim = common::sim().await;
    let group = "nm-wide";
    // Forty holders: each node may take only its two candidates.
    let guards = fill_slots(&sim, group, 40).await;
    let in_line = slots(&sim, group, 40, LONG).any_slot(40);
    let near = in_line.near("n");
    let far = (0..40).find(|i| !near.contains(i)).unwrap();
    let near_slot = maintd::coordination::slot_name(group, near[4]);
    let far_slot = maintd::coordination::slot_name(group, far);
    // Give back one slot near it and one far from it.
    let mut kept = Vec::new();
    for g in guards {
        if g.slot() == near_slot || g.slot() == far_slot {
            assert!(g.release().await.unwrap());
        } else {
            kept.push(g);
        }
    }
    let (_, free) = in_line.watch_selectors("n").pop().unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(sim.client(), NS);
    let seen: Vec<String> = leases
        .list(&kube::api::ListParams::default().labels(&free.unwrap()))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|l| l.metadata.name)
        .collect();
    assert_eq!(
        seen,
        std::slice::from_ref(&near_slot),
        "its free-slot watch sees the near slot alone"
    );
    let taken = wait_in_line(&sim, in_line, "the near slot is taken").await;
    assert_eq!(taken.slot(), near_slot);
    let far_now = leases.get(&far_slot).await.unwrap();
    assert!(
        far_now.spec.and_then(|s| s.holder_identity).is_none(),
        "the far slot stays free"
    );
    assert!(taken.release().await.unwrap());
    for g in kept {
        g.release().await.unwrap();
    }
}

/// A node in line, with two slots near it given back at once: the first
/// in its order has a node holding its place in line (it goes first for
/// that slot), the other's place is empty. It takes the one nobody goes
/// first for, without waiting out that node's head start, and leaves the
/// other to its own node.
#[tokio::test]
async fn a_node_in_line_takes_the_freed_slot_whose_place_is_empty_and_leaves_the_other_to_its_node()
{
    let sim = common::sim().await;
    let (group, places_group) = ("nm-own", "nm.ahead.own");
    let guards = fill_slots(&sim, group, 20).await;
    let in_line = slots(&sim, group, 20, LONG)
        .any_slot(20)
        .placed_in(places_group);
    // Its two candidates come first in its order.
    let near = in_line.near("n");
    let (first, other) = (near[0], near[1]);
    let name = |i: u32| maintd::coordination::slot_name(group, i);
    // The first's place is held by a node that goes first for it; the
    // other's place was held and given back.
    let take_place = |node: &'static str, i: u32| {
        let places = slots(&sim, places_group, 20, LONG).any_slot(0).alone(i);
        async move {
            match places
                .acquire_with_renewal(node, CancellationToken::new())
                .await
                .unwrap()
            {
                Acquisition::Acquired(g) => g,
                other => panic!("{node} should get place {i}, got {other:?}"),
            }
        }
    };
    let first_place = take_place("r", first).await;
    let other_place = take_place("s", other).await;
    assert_eq!(
        (first_place.index(), other_place.index()),
        (Some(first), Some(other))
    );
    assert!(other_place.release().await.unwrap());
    // Both slots given back at once.
    let mut kept = Vec::new();
    for g in guards {
        if g.slot() == name(first) || g.slot() == name(other) {
            assert!(g.release().await.unwrap());
        } else {
            kept.push(g);
        }
    }
    let taken = wait_in_line(&sim, in_line, "a slot is taken").await;
    assert_eq!(
        taken.slot(),
        name(other),
        "the slot whose place is empty, though the other comes first"
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(sim.client(), NS);
    let first_now = leases.get(&name(first)).await.unwrap();
    assert!(
        first_now.spec.and_then(|s| s.holder_identity).is_none(),
        "the slot with its own node stays free for it"
    );
    assert!(taken.release().await.unwrap());
    assert!(first_place.release().await.unwrap());
    for g in kept {
        g.release().await.unwrap();
    }
}
