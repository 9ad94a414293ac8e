//! Reboot slots hold when clocks disagree. A node's agent decides that
//! another node's hold on a slot has lapsed only after it has seen the
//! hold go unrenewed for the Lease's duration by its own clock: whatever
//! the holder's renew times read against this node's wall clock (a node
//! just booted, its time not yet synchronised, is exactly the node a
//! reboot rollout meets).

use crate::common;

use std::time::Duration;

use common::agent::RunningAgent;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, PostParams};
use maintd::drain::progress::Phase;
use maintd_sim::SimCluster;
use serde_json::{Value, json};

fn nodemaintenances(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeMaintenance".into(),
            plural: "nodemaintenances".into(),
        },
    )
}

/// node-0 and node-1 in pool blue, two pods on node-1, maintd's CRD and
/// namespace.
async fn two_node_pool() -> SimCluster {
    let sim = sim().await;
    let client = sim.client();
    install_crds(&client).await;
    create_namespace(&sim, "maintd").await;
    for name in ["node-0", "node-1"] {
        let mut node = node_json(name);
        node["metadata"]["labels"]["pool"] = json!("blue");
        Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(node).unwrap(),
            )
            .await
            .unwrap();
        for i in 0..2 {
            let pod = pod_json("default", &format!("{name}-app-{i}"), name, json!({}));
            post_pod(&sim, &pod).await;
        }
    }
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
    sim
}

async fn roll(client: &kube::Client, name: &str, extra: Value) {
    let mut obj = json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": "blue"}},
            "stage": "Drain",
            "maxConcurrentDrains": 1,
        },
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        obj["spec"][k] = v.clone();
    }
    nodemaintenances(client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(obj).unwrap(),
        )
        .await
        .unwrap();
}

async fn slot(client: &kube::Client, name: &str) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), "maintd")
        .get_opt(name)
        .await
        .unwrap()
}

fn holder(l: &Option<Lease>) -> Option<String> {
    l.as_ref()?.spec.as_ref()?.holder_identity.clone()
}

/// node-0's hold on the slot, renewed as its agent would renew it, but
/// by a clock `skew` away from this node's, with a short duration.
fn skewed_hold(name: &str, group: &str, skew: jiff::SignedDuration, rv: Option<String>) -> Lease {
    let now = jiff::Timestamp::now() + skew;
    let at = now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let mut lease: Lease = serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": "maintd",
            "labels": {
                "maintd.io/reboot-group": group,
                "maintd.io/reboot-holder": "node-0",
                "maintd.io/reboot-bucket": "0",
            },
        },
        "spec": {
            "holderIdentity": "node-0",
            "leaseDurationSeconds": HOLD_SECONDS,
            "acquireTime": at, "renewTime": at,
        },
    }))
    .unwrap();
    lease.metadata.resource_version = rv;
    lease
}

const HOLD_SECONDS: u64 = 2;

/// The slot of a rolling maintenance held by node-0, whose clock is
/// `skew` away from node-1's: while node-0 renews, node-1's agent waits
/// (for three of the hold's durations); once node-0 stops, node-1 takes
/// the slot over, and not before the hold's duration has passed.
async fn a_skewed_holder_keeps_its_slot_while_it_renews(skew: jiff::SignedDuration) {
    if let Ok(filter) = std::env::var("MAINTD_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    let sim = two_node_pool().await;
    let client = sim.client();
    let name = if skew.is_positive() {
        "skew-ahead"
    } else {
        "skew-behind"
    };
    let group = format!("nm-{name}");
    let lease_name = format!("maintd-reboot-{group}-0");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "maintd");
    let mut held = leases
        .create(
            &PostParams::default(),
            &skewed_hold(&lease_name, &group, skew, None),
        )
        .await
        .unwrap();
    roll(&client, name, json!({})).await;
    let agent = RunningAgent::start(&sim, "node-1", None);
    agent
        .wait_for("node-1 waits for node-0's slot", |_| {
            agent
                .progress
                .status()
                .waiting
                .is_some_and(|w| w.contains("held by node-0"))
        })
        .await;
    // node-0 renews every half second, for three of its durations.
    let renewals = (HOLD_SECONDS * 3 * 2) as usize;
    for _ in 0..renewals {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let next = skewed_hold(
            &lease_name,
            &group,
            skew,
            held.metadata.resource_version.clone(),
        );
        held = leases
            .replace(&lease_name, &PostParams::default(), &next)
            .await
            .expect("node-0 keeps its slot: nobody took it over");
        assert!(!is_cordoned(&client, "node-1").await, "node-1 waits");
    }
    // node-0 stops renewing (it died): node-1 takes over, after the hold's
    // duration by its own clock, drains, and gives the slot back.
    let stopped = tokio::time::Instant::now();
    agent
        .wait_for("node-1 took the slot over and drained", |_| {
            agent.progress.status().phase == Phase::Drained
        })
        .await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(HOLD_SECONDS),
        "not before the hold's duration"
    );
    let after = slot(&client, &lease_name).await;
    assert_ne!(holder(&after).as_deref(), Some("node-0"));
    assert!(
        after
            .as_ref()
            .and_then(|l| l.spec.as_ref()?.lease_transitions)
            .is_some_and(|t| t >= 1),
        "the slot changed hands: {after:?}"
    );
    assert!(is_cordoned(&client, "node-1").await);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_clock_is_ten_minutes_behind_keeps_its_slot_while_it_renews() {
    a_skewed_holder_keeps_its_slot_while_it_renews(jiff::SignedDuration::from_mins(-10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_clock_is_ten_minutes_ahead_keeps_its_slot_and_loses_it_when_it_stops() {
    a_skewed_holder_keeps_its_slot_while_it_renews(jiff::SignedDuration::from_mins(10)).await;
}

/// libfaketime's library for threaded programs, where Debian puts it.
fn faketime_library() -> std::path::PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists());
    found.expect("libfaketime is installed (scripts/install-test-deps installs faketime)")
}

/// The rollout an operator tried: one slot, node-0 holds it and waits for
/// its reboot; node-1's agent, a real process whose wall clock runs ten
/// minutes ahead (libfaketime), starts meanwhile. It waits for node-0's
/// slot, naming node-0, and cordons nothing: both nodes never go through
/// one slot at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_clock_runs_ahead_does_not_take_a_slot_held_for_a_reboot() {
    let sim = two_node_pool().await;
    let client = sim.client();
    let holder_agent = RunningAgent::start(&sim, "node-0", None);
    roll(
        &client,
        "reboots",
        json!({"waitForReboot": {"timeoutSeconds": 3600}}),
    )
    .await;
    let lease_name = "maintd-reboot-nm-reboots-0";
    holder_agent
        .wait_for("node-0 drained, waiting for its reboot", |_| {
            holder_agent.progress.status().phase == Phase::Drained
        })
        .await;
    assert_eq!(
        holder(&slot(&client, lease_name).await).as_deref(),
        Some("node-0")
    );

    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        kubeconfig.path(),
        maintd::testbed::agent_kubeconfig(&sim, "node-1"),
    )
    .unwrap();
    let status = common::endpoint::free_port();
    let ahead = std::process::Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args(["run", "--node", "node-1", "--listen-local", ""])
        .arg("--listen")
        .arg(status.to_string())
        .arg("--kubeconfig")
        .arg(kubeconfig.path())
        .arg("--static-pod-dir")
        .arg("/nonexistent/manifests")
        .env("LD_PRELOAD", faketime_library())
        .env("FAKETIME", "+10m")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("MAINTD_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the maintd binary starts");
    // Killed however the test ends.
    let _ahead = KillOnDrop(ahead);
    let said = eventually_value("node-1 waits for node-0's slot", || async move {
        let (code, body) = common::endpoint::request(status, "GET", "/v1/status", "").await;
        let st: Value = serde_json::from_str(&body).unwrap_or_default();
        let waiting = st["drain"]["waiting"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (code == 200 && waiting.contains("held by node-0")).then_some(st)
    })
    .await;
    // Its clock does run ahead.
    let updated: jiff::Timestamp = said["drain"]["updated_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("the status is stamped");
    assert!(
        updated.duration_since(jiff::Timestamp::now()) > jiff::SignedDuration::from_mins(9),
        "node-1's wall clock is ten minutes ahead: {updated}"
    );
    // Still waiting a while on: node-0 keeps its slot, node-1 serves on.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        holder(&slot(&client, lease_name).await).as_deref(),
        Some("node-0")
    );
    assert!(!is_cordoned(&client, "node-1").await);
    assert_eq!(pods_on(&client, "node-1").await.len(), 2);
    holder_agent.stop().await;
}

/// A child process killed (and reaped) when the test lets go of it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits (bounded) until `check` gives a value, and returns it.
async fn eventually_value<F, Fut, T>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting until {what}");
}
