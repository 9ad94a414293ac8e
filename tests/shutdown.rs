//! A reboot of the node, as logind runs it: the agent holds a delay lock,
//! drains in plan order when PrepareForShutdown(true) comes, and lets go
//! when the node is drained — or, with a budget too small for the pods,
//! escalates and lets go before logind's limit. A cancelled shutdown takes
//! the lock again and undoes the drain.

use crate::common;
use crate::logind_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use maintd::agent::Agent;
use maintd::config::{Config, ShutdownSettings};
use maintd::drain::budget;
use maintd::drain::progress::{DrainEvent, EventKind};
use maintd::logind::{BusAddress, Logind};
use maintd_sim::SimCluster;
use maintd_sim::dbus::PrivateBus;
use maintd_sim::logind::{SimLogind, SimLogindConfig};
use serde_json::json;
use support::DbusMock;
use tokio_util::sync::CancellationToken;
use zbus::zvariant::Value;

struct Setup {
    _bus: PrivateBus,
    logind: SimLogind,
    sim: SimCluster,
    events: Arc<Mutex<Vec<DrainEvent>>>,
    stop: CancellationToken,
}

async fn setup(budget: Duration, margin: Duration) -> Setup {
    setup_with(budget, margin, false).await
}

/// With `sleep`, the lock delays suspend too (`--inhibit-sleep`).
async fn setup_with(budget: Duration, margin: Duration, sleep: bool) -> Setup {
    let bus = PrivateBus::start().expect("dbus-daemon starts (CI installs the dbus package)");
    let logind = SimLogind::start(
        &bus.address,
        SimLogindConfig {
            inhibit_delay_max: budget,
        },
    )
    .await
    .unwrap();
    let sim = scenario("small.yaml").await;
    // As deploy/ installs them: the node's status is written as it goes.
    install_crds(&sim.client()).await;
    let (events, stop) = start_agent(&sim, &bus, margin, sleep);
    let l = logind.clone();
    eventually("maintd holds its lock", || {
        let held = l
            .inhibitors()
            .iter()
            .any(|i| i.who == "maintd" && i.mode == "delay" && i.what.contains("shutdown"));
        async move { held }
    })
    .await;
    Setup {
        _bus: bus,
        logind,
        sim,
        events,
        stop,
    }
}

/// The agent on node-a, holding its lock on `bus`; its events collected.
fn start_agent(
    sim: &SimCluster,
    bus: &PrivateBus,
    margin: Duration,
    sleep: bool,
) -> (Arc<Mutex<Vec<DrainEvent>>>, CancellationToken) {
    let mut config = Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap());
    config.shutdown = Some(ShutdownSettings {
        sleep,
        margin,
        bus: Some(bus.address.clone()),
    });
    let agent = Agent::new(config, maintd::testbed::agent_client(sim, "node-a"));
    let events = common::agent::collect_events(agent.progress());
    let stop = CancellationToken::new();
    tokio::spawn(agent.run(stop.clone()));
    (events, stop)
}

/// Waits until the agent's event stream has caught up with `kind`: logind
/// can record the shutdown before the agent has reported the release.
async fn wait_event(events: &Arc<Mutex<Vec<DrainEvent>>>, kind: EventKind) -> Vec<DrainEvent> {
    let evs = events.clone();
    eventually(&format!("{kind:?}"), || {
        let seen = evs.lock().unwrap().iter().any(|e| e.event == kind);
        async move { seen }
    })
    .await;
    events.lock().unwrap().clone()
}

/// Puts one more pod on node-a and lets the cluster settle.
async fn add_pod(s: &Setup, pod: serde_json::Value) {
    post_pod(&s.sim, &pod).await;
    s.sim.wait_settled(Duration::from_secs(30)).await.unwrap();
}

/// Asks logind to reboot and returns its record of the shutdown, which
/// must go ahead before logind's own limit.
async fn reboot_in_time(s: &Setup) -> maintd_sim::logind::ShutdownRecord {
    s.logind.reboot().await;
    let record = tokio::time::timeout(Duration::from_secs(30), s.logind.wait_for_shutdowns(1))
        .await
        .expect("the reboot proceeds")[0]
        .clone();
    assert!(
        !record.timed_out,
        "the lock was released before logind gave up waiting: {record:?}"
    );
    record
}

fn position(evs: &[DrainEvent], kind: EventKind) -> Option<usize> {
    evs.iter().position(|e| e.event == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_waits_for_the_ordered_drain_then_proceeds() {
    let s = setup(Duration::from_secs(60), Duration::from_secs(5)).await;
    let k = common::kubectl::Kubectl::new(&s.sim);
    let watch = k.watch_json(&["node", "node-a"]);
    // kubectl takes a moment to start (more on a busy machine): the reboot
    // waits for its first object, the Node as it was before the reboot.
    let first = watch.seen.clone();
    eventually("kubectl's watch shows the Node", || {
        let shown = !first.lock().unwrap().is_empty();
        async move { shown }
    })
    .await;
    s.logind.reboot().await;
    let record = tokio::time::timeout(Duration::from_secs(60), s.logind.wait_for_shutdowns(1))
        .await
        .expect("the reboot proceeds")[0]
        .clone();
    assert!(
        !record.timed_out,
        "released before logind's limit: {record:?}"
    );
    assert_eq!(record.waited_for, ["maintd"]);
    wait_event(&s.events, EventKind::ShutdownReleased).await;
    let evs = wait_event(&s.events, EventKind::DrainCompleted).await;
    let preparing = position(&evs, EventKind::ShutdownPreparing).expect("PrepareForShutdown seen");
    let drained = position(&evs, EventKind::DrainCompleted).expect("drained");
    let released = position(&evs, EventKind::ShutdownReleased).expect("released");
    let evictions: Vec<usize> = evs
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event == EventKind::PodEvicted)
        .map(|(i, _)| i)
        .collect();
    assert!(!evictions.is_empty());
    assert!(
        evictions.iter().all(|i| *i > preparing && *i < drained),
        "evictions happen between PrepareForShutdown and the end of the drain"
    );
    assert!(
        evictions.iter().all(|i| *i < released),
        "the lock goes only once the node is drained"
    );
    let left = pods_on(&s.sim.client(), "node-a").await;
    let names: Vec<_> = left
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        ["pinned"],
        "only the opted-out pod stays for the reboot"
    );
    // KEP-5683's GracefulNodeShutdownInProgress, as a watcher of the Node
    // saw it: set while maintd delayed the shutdown (beside the drain's own
    // conditions, for the shutdown), gone once it let go.
    let shows = |node: &serde_json::Value, kind: &str, reason: &str| {
        node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == kind && c["status"] == "True" && c["reason"] == reason)
    };
    let seen = watch.seen.clone();
    eventually("the Node shows the shutdown no more", || {
        let last = seen.lock().unwrap().last().cloned().unwrap_or_default();
        async move {
            !shows(&last, "GracefulNodeShutdownInProgress", "NodeShutdown")
                && shows(&last, "Drained", "DrainCompleted")
        }
    })
    .await;
    let seen = watch.seen.lock().unwrap().clone();
    let during = seen
        .iter()
        .position(|n| shows(n, "GracefulNodeShutdownInProgress", "NodeShutdown"))
        .expect("GracefulNodeShutdownInProgress was set");
    assert!(
        shows(&seen[during], "MaintenanceInProgress", "NodeShutdown"),
        "the maintenance is the shutdown's: {}",
        seen[during]["status"]["conditions"]
    );
    assert!(
        !shows(&seen[0], "GracefulNodeShutdownInProgress", "NodeShutdown"),
        "not before the reboot"
    );
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_longer_than_the_budget_escalates_and_releases_in_time() {
    let s = setup(Duration::from_secs(6), Duration::from_secs(1)).await;
    // A pod that takes a minute to stop: far beyond the 6 s budget.
    let mut slow = pod_json("default", "slow", "node-a", json!({}));
    slow["metadata"]["annotations"] = json!({"sim.maintd.io/shutdown-seconds": "60"});
    slow["spec"]["terminationGracePeriodSeconds"] = json!(60);
    add_pod(&s, slow).await;
    let record = reboot_in_time(&s).await;
    assert!(record.delayed < Duration::from_secs(6));
    let evs = wait_event(&s.events, EventKind::ShutdownReleased).await;
    assert!(
        evs.iter()
            .any(|e| e.event == EventKind::StageEscalated && e.pod.as_deref() == Some("slow")),
        "the slow pod's stage was escalated"
    );
    assert!(position(&evs, EventKind::ShutdownReleased).is_some());
    assert!(
        position(&evs, EventKind::DrainFailed).is_none(),
        "escalation got the pod out in time"
    );
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_never_goes_does_not_hold_the_reboot_and_the_drain_says_it_failed() {
    let s = setup(Duration::from_secs(6), Duration::from_secs(1)).await;
    // A finalizer nobody removes: neither eviction nor deletion gets it off
    // the node.
    let mut stuck = pod_json("default", "stuck", "node-a", json!({}));
    stuck["metadata"]["finalizers"] = json!(["example.com/never"]);
    add_pod(&s, stuck).await;
    reboot_in_time(&s).await;
    let evs = wait_event(&s.events, EventKind::ShutdownReleased).await;
    let failed = position(&evs, EventKind::DrainFailed).expect("the drain is reported failed");
    assert!(failed < position(&evs, EventKind::ShutdownReleased).unwrap());
    assert!(
        evs[failed].message.contains(" pods left"),
        "{}",
        evs[failed].message
    );
    assert!(
        position(&evs, EventKind::DrainCompleted).is_none(),
        "the node was never drained"
    );
    assert!(
        evs.iter()
            .any(|e| e.event == EventKind::StageEscalated && e.pod.as_deref() == Some("stuck")),
        "deletion was tried too"
    );
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shutdown_takes_the_lock_again_and_undoes_the_drain() {
    let s = setup(Duration::from_secs(60), Duration::from_secs(5)).await;
    s.logind.reboot().await;
    let evs = s.events.clone();
    eventually("the drain started", || {
        let started = evs
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.event == EventKind::NodeMarked);
        async move { started }
    })
    .await;
    assert!(s.logind.cancel_shutdown().await);
    eventually("the drain is undone", || {
        let done = evs
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.event == EventKind::UndoCompleted);
        async move { done }
    })
    .await;
    let node = Api::<Node>::all(s.sim.client())
        .get("node-a")
        .await
        .unwrap();
    let spec = node.spec.unwrap();
    assert_ne!(spec.unschedulable, Some(true), "uncordoned");
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != "maintd.io/draining")
    );
    let l = s.logind.clone();
    eventually("exactly one lock of maintd's again", || {
        let n = l.inhibitors().iter().filter(|i| i.who == "maintd").count();
        async move { n == 1 }
    })
    .await;
    assert!(s.logind.shutdown_records().is_empty(), "nothing shut down");
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_drains_then_lets_go_and_the_resume_undoes_the_drain() {
    let s = setup_with(Duration::from_secs(60), Duration::from_secs(5), true).await;
    assert!(
        s.logind
            .inhibitors()
            .iter()
            .any(|i| i.who == "maintd" && i.what.contains("sleep")),
        "the lock delays suspend too"
    );
    s.logind.suspend().await;
    let record = tokio::time::timeout(Duration::from_secs(60), s.logind.wait_for_shutdowns(1))
        .await
        .expect("the suspend proceeds")[0]
        .clone();
    assert_eq!(record.action, "suspend");
    assert!(
        !record.timed_out,
        "released once drained, not when logind gave up: {record:?}"
    );
    let evs = wait_event(&s.events, EventKind::UndoCompleted).await;
    // The lock goes once the agent sees the pods gone (its own judgement,
    // not the executor's DrainCompleted event, which may come a moment
    // later): every eviction happened before it.
    let released = position(&evs, EventKind::ShutdownReleased).expect("released");
    let undone = position(&evs, EventKind::UndoCompleted).unwrap();
    let last_eviction = evs
        .iter()
        .rposition(|e| e.event == EventKind::PodEvicted)
        .expect("pods were evicted before the suspend");
    assert!(
        last_eviction < released && released < undone,
        "drain, let go, resume, undo"
    );
    assert!(
        !is_cordoned(&s.sim.client(), "node-a").await,
        "back in service"
    );
    let l = s.logind.clone();
    eventually("the lock is taken again after the resume", || {
        let n = l.inhibitors().iter().filter(|i| i.who == "maintd").count();
        async move { n == 1 }
    })
    .await;
    s.stop.cancel();
}

/// A pod no eviction moves (its budget never allows a disruption), first in
/// the plan, that uses all of its 30 s grace period once deleted.
async fn add_guarded(sim: &SimCluster) {
    unmovable_budget(sim, "guarded").await;
    let mut pod = pod_json("default", "guarded", "node-a", json!({"app": "guarded"}));
    pod["metadata"]["annotations"] = json!({"sim.maintd.io/shutdown-seconds": "600"});
    pod["spec"]["priority"] = json!(-10);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
    post_pod(sim, &pod).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();
}

/// The grace period the guarded pod's deletion asked for, as the API shows
/// it while the pod terminates.
async fn guarded_deletion_grace(sim: &SimCluster) -> i64 {
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        let pod = pods.get_opt("guarded").await.expect("get the guarded pod");
        let pod = pod.expect("the guarded pod is seen terminating before it goes");
        if let Some(g) = pod.metadata.deletion_grace_period_seconds {
            return g;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the guarded pod was never deleted");
}

/// The grace the guarded pod's stage leads to: half its share of the drain
/// time `total` (six stages, each needing 30 s), by the plan's own rule.
fn planned_grace(total: Duration) -> i64 {
    let needs = vec![budget::StageNeed { seconds: 30.0 }; 6];
    budget::escalation(budget::split_budget(total, &needs)[0], 30).grace_seconds
}

/// Checks the drain's events: the guarded pod was deleted (escalated), was
/// gone before the next stage started, and the node was drained in time.
/// The lock may go before DrainCompleted is reported (the release is
/// decided from the pods seen gone), so callers wait for that event.
fn assert_escalated_then_gone(evs: &[DrainEvent]) {
    let guarded = |kind: EventKind| {
        evs.iter()
            .position(|e| e.event == kind && e.pod.as_deref() == Some("guarded"))
    };
    let escalated = guarded(EventKind::StageEscalated).expect("the guarded pod was deleted");
    let gone = guarded(EventKind::PodGone).expect("the guarded pod went");
    let next = evs
        .iter()
        .position(|e| e.event == EventKind::StageStarted && e.stage == Some(2))
        .expect("the next stage started");
    assert!(
        escalated < gone && gone < next,
        "deleted, gone, then the next stage"
    );
    assert!(position(evs, EventKind::DrainCompleted).is_some());
    assert!(position(evs, EventKind::DrainFailed).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_cannot_be_evicted_is_deleted_with_a_grace_that_fits_its_stage() {
    let (budget_s, margin_s) = (40, 1);
    let s = setup(Duration::from_secs(budget_s), Duration::from_secs(margin_s)).await;
    add_guarded(&s.sim).await;
    let plan = maintd::drain::plan::build_plan(
        &pods_on(&s.sim.client(), "node-a")
            .await
            .iter()
            .map(|p| maintd::drain::plan::PodInfo::from_json(&serde_json::to_value(p).unwrap()))
            .collect::<Vec<_>>(),
        None,
        &Default::default(),
    );
    assert_eq!(
        plan.stages.len(),
        6,
        "the guarded pod's stage comes first of six"
    );
    s.logind.reboot().await;
    let grace = guarded_deletion_grace(&s.sim).await;
    // At most half of what its stage could have had; at least half of what
    // it has with a few seconds lost before the drain began. The old rule
    // (what is left of the share when it is over) gave 0 or 1.
    let total = Duration::from_secs(budget_s - margin_s);
    let (lo, hi) = (
        planned_grace(total - Duration::from_secs(5)),
        planned_grace(total),
    );
    assert!(lo >= 2, "the test's budget leaves room for a real grace");
    assert!(
        (lo..=hi).contains(&grace),
        "deleted with a {grace}s grace period, want {lo}..={hi}"
    );
    let record = tokio::time::timeout(Duration::from_secs(60), s.logind.wait_for_shutdowns(1))
        .await
        .expect("the reboot proceeds")[0]
        .clone();
    assert!(
        !record.timed_out,
        "released before logind's limit: {record:?}"
    );
    assert!(record.delayed < Duration::from_secs(budget_s));
    wait_event(&s.events, EventKind::ShutdownReleased).await;
    assert_escalated_then_gone(&wait_event(&s.events, EventKind::DrainCompleted).await);
    s.stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_cannot_be_evicted_is_deleted_with_a_grace_under_dbusmock_logind() {
    let bus = PrivateBus::start().expect("dbus-daemon starts");
    let mock = DbusMock::start(&bus, true).await;
    mock.add_property("InhibitDelayMaxUSec", Value::U64(40_000_000))
        .await;
    // The template's Reboot does nothing; make it announce the shutdown.
    mock.add_method(
        "Reboot",
        "b",
        "",
        "self.EmitSignal('org.freedesktop.login1.Manager', 'PrepareForShutdown', 'b', [True])",
    )
    .await;
    let sim = scenario("small.yaml").await;
    add_guarded(&sim).await;
    let (events, stop) = start_agent(&sim, &bus, Duration::from_secs(1), false);
    let logind = Logind::connect(&BusAddress::Address(bus.address.clone()))
        .await
        .expect("connect to the private bus");
    let maintd_locks = || async {
        let list = logind.list_inhibitors().await.expect("ListInhibitors");
        list.iter().filter(|i| i.who == "maintd").count()
    };
    eventually("maintd holds its lock", || async {
        maintd_locks().await == 1
    })
    .await;
    logind.reboot().await.expect("Reboot");
    let grace = guarded_deletion_grace(&sim).await;
    let total = Duration::from_secs(39);
    let (lo, hi) = (
        planned_grace(total - Duration::from_secs(5)),
        planned_grace(total),
    );
    assert!(
        (lo..=hi).contains(&grace),
        "deleted with a {grace}s grace period, want {lo}..={hi}"
    );
    wait_event(&events, EventKind::ShutdownReleased).await;
    eventually("dbusmock dropped maintd's lock", || async {
        maintd_locks().await == 0
    })
    .await;
    assert_escalated_then_gone(&wait_event(&events, EventKind::DrainCompleted).await);
    stop.cancel();
}

/// The suspend of `a_suspend_drains_then_lets_go_and_the_resume_undoes_the_drain`
/// against python-dbusmock's logind, an implementation that is not ours:
/// the lock covers sleep, a PrepareForSleep drains the node and lets the
/// lock go once drained, and the resume takes it again and undoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspend_under_dbusmock_logind_drains_lets_go_and_the_resume_undoes() {
    let bus = PrivateBus::start().expect("dbus-daemon starts");
    let mock = DbusMock::start(&bus, true).await;
    mock.add_property("InhibitDelayMaxUSec", Value::U64(60_000_000))
        .await;
    let sim = scenario("small.yaml").await;
    let (events, stop) = start_agent(&sim, &bus, Duration::from_secs(5), true);
    let logind = Logind::connect(&BusAddress::Address(bus.address.clone()))
        .await
        .expect("connect to the private bus");
    let maintd_locks = |what: &'static str| {
        let logind = &logind;
        async move {
            let list = logind.list_inhibitors().await.expect("ListInhibitors");
            list.iter()
                .filter(|i| i.who == "maintd" && i.what.contains(what))
                .count()
        }
    };
    eventually("maintd's lock covers sleep", || {
        maintd_locks("sleep").then(|n| async move { n == 1 })
    })
    .await;

    mock.emit_prepare_for_sleep(true).await;
    eventually("the lock goes once the node is drained", || {
        maintd_locks("sleep").then(|n| async move { n == 0 })
    })
    .await;
    let evs = wait_event(&events, EventKind::ShutdownReleased).await;
    let released = position(&evs, EventKind::ShutdownReleased).unwrap();
    let last_eviction = evs
        .iter()
        .rposition(|e| e.event == EventKind::PodEvicted)
        .expect("pods were evicted before the suspend");
    assert!(last_eviction < released, "drained, then let go");
    assert!(
        evs[released].message.contains("drained"),
        "released because drained, not at the deadline: {}",
        evs[released].message
    );

    mock.emit_prepare_for_sleep(false).await;
    wait_event(&events, EventKind::UndoCompleted).await;
    assert!(
        !is_cordoned(&sim.client(), "node-a").await,
        "back in service"
    );
    eventually("the lock is taken again after the resume", || {
        maintd_locks("sleep").then(|n| async move { n == 1 })
    })
    .await;
    stop.cancel();
}
