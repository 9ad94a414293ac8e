//! FleetLock against the simulated cluster: Zincati's requests get the
//! protocol's answers, one group's nodes reboot one at a time, control-plane
//! nodes wait for their peers, and a restarted agent keeps its slot.

use crate::common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use maintd::coordination::{CONTROL_PLANE_LABEL, RebootSlots, groups_held_by};
use maintd::fleetlock::{self, DrainControl, DrainState, FleetLock};

const NS: &str = "kube-system";
const LONG: Duration = Duration::from_secs(60);

async fn control_plane_node(client: &kube::Client, name: &str, ready: bool) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut body = common::node_json(name);
    body["metadata"]["labels"][CONTROL_PLANE_LABEL] = json!("");
    let node: Node = serde_json::from_value(body).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    set_ready(client, name, ready).await;
}

async fn set_ready(client: &kube::Client, name: &str, ready: bool) {
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": status}]}});
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// The agent side of FleetLock, faked: drains after `steps` requests;
/// its node's boot ID is `boot-<n>` after n reboots (the slots note
/// `boot-0` when taken).
struct FakeDrain {
    steps: usize,
    requests: AtomicUsize,
    undos: AtomicUsize,
    reasons: Mutex<Vec<String>>,
    boots: AtomicUsize,
}

impl FakeDrain {
    fn after(steps: usize) -> Self {
        FakeDrain {
            steps,
            requests: AtomicUsize::new(0),
            undos: AtomicUsize::new(0),
            reasons: Mutex::new(vec![]),
            boots: AtomicUsize::new(0),
        }
    }

    /// The node boots again.
    fn reboot(&self) {
        self.boots.fetch_add(1, Ordering::SeqCst);
    }
}

impl DrainControl for &FakeDrain {
    async fn request_drain(&self, reason: &str) -> Result<DrainState, String> {
        self.reasons.lock().unwrap().push(reason.to_string());
        let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(if n > self.steps {
            DrainState::Drained
        } else {
            DrainState::InProgress {
                detail: "stage 1/3, blocked by pdb default/web".into(),
            }
        })
    }
    async fn undo(&self) -> Result<(), String> {
        self.undos.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn boot_id(&self) -> Option<String> {
        Some(format!("boot-{}", self.boots.load(Ordering::SeqCst)))
    }
}

fn zincati_headers() -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(fleetlock::PROTOCOL_HEADER, "true".parse().unwrap());
    h
}

fn zincati_body(id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"client_params": {"id": id, "group": "workers"}})).unwrap()
}

fn fleetlock<'a>(
    sim: &maintd_sim::SimCluster,
    node: &str,
    drain: &'a FakeDrain,
) -> FleetLock<&'a FakeDrain> {
    fleetlock_with(sim, node, drain, LONG)
}

fn fleetlock_with<'a>(
    sim: &maintd_sim::SimCluster,
    node: &str,
    drain: &'a FakeDrain,
    lease: Duration,
) -> FleetLock<&'a FakeDrain> {
    let client = sim.client();
    FleetLock::new(
        node,
        Box::new(move |group| {
            Ok(RebootSlots::new(client.clone(), NS, group, 1, lease)
                .noting_boot(Some("boot-0".into())))
        }),
        drain,
        CancellationToken::new(),
    )
}

#[tokio::test]
async fn fleetlock_second_node_waits_for_the_first_steady_state() {
    let sim = common::sim().await;
    let (drain_a, drain_b) = (FakeDrain::after(1), FakeDrain::after(0));
    let (a, b) = (
        fleetlock(&sim, "node-a", &drain_a),
        fleetlock(&sim, "node-b", &drain_b),
    );
    let h = zincati_headers();

    let first = a.pre_reboot(&h, &zincati_body("id-a")).await;
    assert_eq!(
        (first.status, first.kind.as_str()),
        (503, fleetlock::kind::DRAIN_IN_PROGRESS)
    );
    assert!(
        first.value.contains("pdb default/web"),
        "says what blocks: {}",
        first.value
    );
    assert!(
        a.pre_reboot(&h, &zincati_body("id-a")).await.is_success(),
        "drained on the retry"
    );
    assert!(drain_a.reasons.lock().unwrap()[0].contains("id-a"));

    let waits = b.pre_reboot(&h, &zincati_body("id-b")).await;
    assert_eq!(
        (waits.status, waits.kind.as_str()),
        (409, fleetlock::kind::SEMAPHORE_FULL)
    );
    assert!(waits.value.contains("node-a"), "{}", waits.value);
    assert_eq!(
        drain_b.requests.load(Ordering::SeqCst),
        0,
        "no drain without a slot"
    );

    // Not rebooted yet: node-a keeps its slot and its drain.
    let early = a.steady_state(&h, &zincati_body("id-a")).await;
    assert_eq!(early.kind, fleetlock::kind::NOT_REBOOTED, "{}", early.value);
    assert_eq!(drain_a.undos.load(Ordering::SeqCst), 0);
    drain_a.reboot();
    assert!(a.steady_state(&h, &zincati_body("id-a")).await.is_success());
    assert_eq!(drain_a.undos.load(Ordering::SeqCst), 1);
    assert!(b.pre_reboot(&h, &zincati_body("id-b")).await.is_success());

    // After a reboot the agent holds no guard: steady-state still frees the slot.
    drain_b.reboot();
    let b_rebooted = fleetlock(&sim, "node-b", &drain_b);
    assert!(
        b_rebooted
            .steady_state(&h, &zincati_body("id-b"))
            .await
            .is_success()
    );
    assert!(a.pre_reboot(&h, &zincati_body("id-a")).await.is_success());
}

#[tokio::test]
async fn fleetlock_control_plane_pre_reboot_refused_while_a_peer_is_not_ready() {
    let sim = common::sim().await;
    let client = sim.client();
    control_plane_node(&client, "cp-1", true).await;
    control_plane_node(&client, "cp-2", false).await;
    let node = Api::<Node>::all(client.clone()).get("cp-1").await.unwrap();
    let drain = FakeDrain::after(0);
    let lock = FleetLock::new(
        "cp-1",
        Box::new(move |group| {
            Ok(RebootSlots::for_node(
                client.clone(),
                NS,
                &node,
                group,
                3,
                LONG,
            ))
        }),
        &drain,
        CancellationToken::new(),
    );
    let refused = lock
        .pre_reboot(&zincati_headers(), &zincati_body("id-cp-1"))
        .await;
    assert_eq!(
        (refused.status, refused.kind.as_str()),
        (409, fleetlock::kind::QUORUM_GUARD)
    );
    assert!(refused.value.contains("cp-2"));
    assert_eq!(drain.requests.load(Ordering::SeqCst), 0);

    set_ready(&sim.client(), "cp-2", true).await;
    assert!(
        lock.pre_reboot(&zincati_headers(), &zincati_body("id-cp-1"))
            .await
            .is_success()
    );
}

#[tokio::test]
async fn fleetlock_rejects_malformed_requests_with_protocol_errors() {
    let sim = common::sim().await;
    let drain = FakeDrain::after(0);
    let lock = fleetlock(&sim, "node-a", &drain);
    let cases: [(http::HeaderMap, &[u8], &str); 3] = [
        (
            http::HeaderMap::new(),
            br#"{"client_params": {"id": "x", "group": "workers"}}"#,
            "missing_fleetlock_header",
        ),
        (zincati_headers(), b"{\"client_params\": ", "bad_request"),
        (
            zincati_headers(),
            br#"{"client_params": {"group": "workers"}}"#,
            "bad_request",
        ),
    ];
    for (headers, body, kind) in cases {
        for reply in [
            lock.pre_reboot(&headers, body).await,
            lock.steady_state(&headers, body).await,
        ] {
            assert_eq!(reply.status, 400);
            let body: Value = serde_json::from_slice(&reply.body()).unwrap();
            assert_eq!(body["kind"], kind);
            assert!(body["value"].as_str().is_some_and(|v| !v.is_empty()));
        }
    }
    assert_eq!(
        drain.requests.load(Ordering::SeqCst) + drain.undos.load(Ordering::SeqCst),
        0
    );
    assert!(
        RebootSlots::new(sim.client(), NS, "workers", 1, LONG)
            .holders("node-a")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_restarted_agent_resumes_renewing_its_slot() {
    let sim = common::sim().await;
    let lease = Duration::from_secs(3);
    let drain = FakeDrain::after(0);
    let h = zincati_headers();
    {
        let before = fleetlock_with(&sim, "node-a", &drain, lease);
        assert!(
            before
                .pre_reboot(&h, &zincati_body("id-a"))
                .await
                .is_success()
        );
        // The agent stops here (the node reboots): its renewals end.
    }
    drain.reboot();
    let after = fleetlock_with(&sim, "node-a", &drain, lease);
    let groups = groups_held_by(sim.client(), NS, "node-a").await.unwrap();
    assert_eq!(groups, ["workers"]);
    for group in &groups {
        assert!(after.resume(group).await.unwrap());
    }
    let other = FakeDrain::after(0);
    let b = fleetlock_with(&sim, "node-b", &other, lease);
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let reply = b.pre_reboot(&h, &zincati_body("id-b")).await;
        assert_eq!(
            reply.kind,
            fleetlock::kind::SEMAPHORE_FULL,
            "node-a still holds it"
        );
    }
    assert!(
        after
            .steady_state(&h, &zincati_body("id-a"))
            .await
            .is_success()
    );
    assert!(b.pre_reboot(&h, &zincati_body("id-b")).await.is_success());
}
