//! The shutdown inhibitor against the simulated logind and against
//! python-dbusmock's logind template, each on a private dbus-daemon.
//! Assertions are about order and counts; timeouts only stop a hang.

#[path = "logind/dbusmock.rs"]
mod dbusmock;
use crate::logind_support as support;

use std::time::Duration;

use maintd::inhibitor::{InhibitorHandle, ShutdownEvent, ShutdownInhibitor};
use maintd_sim::dbus::PrivateBus;
use maintd_sim::logind::{RestartMode, SimLogind, SimLogindConfig};
use support::*;
use tokio::io::AsyncBufReadExt;

const KUBELET_WHY: &str = "Kubelet needs time to handle node shutdown";

async fn sim(bus: &PrivateBus, delay: Duration) -> SimLogind {
    SimLogind::start(
        &bus.address,
        SimLogindConfig {
            inhibit_delay_max: delay,
        },
    )
    .await
    .expect("start simulated logind")
}

/// A simulated logind on its own bus, and an inhibitor that has taken its
/// lock there: the bus, logind, the lock's token, the handle and its events.
type Held = (
    PrivateBus,
    SimLogind,
    String,
    InhibitorHandle,
    tokio::sync::mpsc::Receiver<ShutdownEvent>,
);

async fn held(delay: Duration) -> Held {
    let bus = PrivateBus::start().unwrap();
    let sim = sim(&bus, delay).await;
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    (bus, sim, token, handle, events)
}

#[tokio::test]
async fn sim_lock_taken_at_start_and_listed() {
    let (bus, sim, token, handle, _events) = held(Duration::from_secs(600)).await;
    let list = client(&bus).await.list_inhibitors().await.unwrap();
    let mine: Vec<_> = list.iter().filter(|i| i.why.contains(&token)).collect();
    assert_eq!(mine.len(), 1, "{list:?}");
    assert_eq!(
        (
            mine[0].what.as_str(),
            mine[0].who.as_str(),
            mine[0].mode.as_str()
        ),
        ("shutdown", "maintd", "delay")
    );
    assert!(mine[0].why.contains("node-a"));
    assert_eq!(sim.inhibitors().len(), 1);
    let status = handle.status();
    assert!(status.held);
    assert_eq!(status.token, token);
}

#[tokio::test]
async fn sim_reboot_waits_for_release_then_proceeds() {
    let (bus, sim, token, handle, mut events) = held(Duration::from_secs(600)).await;

    // As `systemctl reboot` does it: over D-Bus.
    let logind = client(&bus).await;
    logind.reboot().await.unwrap();
    assert_eq!(
        next_event(&mut events).await,
        ShutdownEvent::Preparing {
            budget: Duration::from_secs(600),
            already_in_progress: false
        }
    );
    assert!(logind.preparing_for_shutdown().await.unwrap());
    assert_eq!(handle.status().budget, Some(Duration::from_secs(600)));
    // Our lock is held, so logind is still waiting.
    assert!(sim.shutdown_records().is_empty());

    handle.release().await.unwrap();
    let records = sim.wait_for_shutdowns(1).await;
    assert_eq!(records[0].action, "reboot");
    assert_eq!(records[0].waited_for, vec!["maintd".to_string()]);
    assert!(
        !records[0].timed_out,
        "shutdown proceeded because of the release"
    );
    assert_eq!(count_ours(&logind, &token).await, 0);
    assert!(!handle.status().held);
}

/// An agent that lets go of its inhibitor (its shutdown path, or the
/// handle dropped on the way out) must not leave the lock behind: a lock
/// nobody holds any more would still delay every reboot.
#[tokio::test]
async fn sim_dropping_the_handle_lets_the_lock_go() {
    let (bus, _sim, token, handle, _events) = held(Duration::from_secs(600)).await;
    let logind = client(&bus).await;
    assert_eq!(count_ours(&logind, &token).await, 1);
    drop(handle);
    eventually("the lock goes with its handle", || async {
        count_ours(&logind, &token).await == 0
    })
    .await;
}

#[tokio::test]
async fn sim_budget_runs_out_while_lock_still_held() {
    let (_bus, sim, _, handle, _events) = held(Duration::from_millis(50)).await;

    sim.reboot().await;
    let records = sim.wait_for_shutdowns(1).await;
    assert!(records[0].timed_out, "logind does not wait past its budget");
    assert!(handle.status().held, "the fd was never closed");
}

/// Not a test on its own: `sim_killed_agent_releases_the_shutdown_at_once`
/// runs this binary again with MAINTD_TEST_CHILD_BUS set, so this body
/// becomes an agent process holding the lock until it is killed.
#[tokio::test]
async fn helper_agent_process() {
    let Ok(address) = std::env::var("MAINTD_TEST_CHILD_BUS") else {
        return;
    };
    let mut cfg = maintd::inhibitor::InhibitorConfig::new("node-a");
    cfg.bus = maintd::logind::BusAddress::Address(address);
    cfg.token = std::env::var("MAINTD_TEST_CHILD_TOKEN").unwrap();
    let (_handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    println!("LOCK_HELD");
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

#[tokio::test]
async fn sim_killed_agent_releases_the_shutdown_at_once() {
    let bus = PrivateBus::start().unwrap();
    let sim = sim(&bus, Duration::from_secs(600)).await;
    let token = format!("{:016x}", rand::random::<u64>());
    // The helper's name as the test harness knows it: its module path
    // without the crate's.
    let helper = module_path!()
        .split_once("::")
        .map_or(String::new(), |(_, m)| format!("{m}::"))
        + "helper_agent_process";
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([helper.as_str(), "--exact", "--nocapture"])
        .args(["--test-threads=1"])
        .env("MAINTD_TEST_CHILD_BUS", &bus.address)
        .env("MAINTD_TEST_CHILD_TOKEN", &token)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("LOCK_HELD") {
                return;
            }
        }
        panic!("agent process exited before taking the lock");
    };
    tokio::time::timeout(PATIENCE, ready).await.unwrap();
    let held = sim.inhibitors();
    assert_eq!(held.len(), 1);
    assert!(held[0].why.contains(&token));
    assert_eq!(Some(held[0].pid), child.id(), "logind sees the agent's pid");

    sim.reboot().await;
    assert!(sim.shutdown_records().is_empty(), "waits for the agent");
    // kill -9: no cleanup code runs; the kernel closes the fd.
    child.start_kill().unwrap();
    let records = sim.wait_for_shutdowns(1).await;
    assert_eq!(records[0].waited_for, vec!["maintd".to_string()]);
    assert!(
        !records[0].timed_out,
        "proceeded on the fd closing, not the budget"
    );
    assert!(sim.inhibitors().is_empty());
}

#[tokio::test]
async fn sim_restart_keeping_state_leaves_exactly_one_lock() {
    let (bus, sim, token, handle, mut events) = held(Duration::from_secs(600)).await;

    sim.restart(RestartMode::KeepState).await.unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::LockLost { .. }
    ));
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    let logind = client(&bus).await;
    assert_eq!(count_ours(&logind, &token).await, 1);
    assert_eq!(
        sim.locks_granted(),
        1,
        "the restored lock was kept, not re-taken"
    );
    assert!(handle.status().held);

    // The surviving lock is the one our fd holds: releasing clears it.
    handle.release().await.unwrap();
    eventually("restored lock released", || async {
        count_ours(&logind, &token).await == 0
    })
    .await;
}

#[tokio::test]
async fn sim_restart_losing_state_retakes_exactly_one_lock() {
    let (bus, sim, token, handle, mut events) = held(Duration::from_secs(600)).await;

    sim.restart(RestartMode::LoseState).await.unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::LockLost { .. }
    ));
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    let logind = client(&bus).await;
    assert_eq!(count_ours(&logind, &token).await, 1);
    assert_eq!(sim.locks_granted(), 2, "re-taken once");

    // And the new lock still delays a reboot.
    logind.reboot().await.unwrap();
    event_matching(&mut events, |e| {
        matches!(e, ShutdownEvent::Preparing { .. })
    })
    .await;
    assert!(sim.shutdown_records().is_empty());
    handle.release().await.unwrap();
    assert!(!sim.wait_for_shutdowns(1).await[0].timed_out);
}

#[tokio::test]
async fn sim_cancel_reacquires_lock_and_kubelet_is_reported() {
    let bus = PrivateBus::start().unwrap();
    let sim = sim(&bus, Duration::from_secs(600)).await;
    let logind = client(&bus).await;
    let _kubelet = logind
        .inhibit("shutdown", "kubelet", KUBELET_WHY, "delay")
        .await
        .unwrap();
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(
        next_event(&mut events).await,
        ShutdownEvent::CompetingInhibitor {
            who: "kubelet".into(),
            why: KUBELET_WHY.into()
        }
    );
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    assert_eq!(handle.status().competing.len(), 1);

    logind.reboot().await.unwrap();
    event_matching(&mut events, |e| {
        matches!(e, ShutdownEvent::Preparing { .. })
    })
    .await;
    handle.release().await.unwrap();
    // The kubelet's lock still holds the shutdown, so it can be cancelled.
    assert!(sim.cancel_shutdown().await);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::Cancelled);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    eventually("exactly one lock of ours after cancel", || async {
        count_ours(&logind, &token).await == 1
    })
    .await;
    assert!(sim.shutdown_records().is_empty());
    let status = handle.status();
    assert!(status.held && !status.preparing);
}

#[tokio::test]
async fn sim_shutdown_already_in_progress_at_start() {
    let bus = PrivateBus::start().unwrap();
    let sim = sim(&bus, Duration::from_secs(600)).await;
    let logind = client(&bus).await;
    let _kubelet = logind
        .inhibit("shutdown", "kubelet", KUBELET_WHY, "delay")
        .await
        .unwrap();
    sim.reboot().await;

    let cfg = config(&bus);
    let conservative = cfg.in_progress_budget;
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    match next_event(&mut events).await {
        ShutdownEvent::Preparing {
            budget,
            already_in_progress: true,
        } => assert!(budget <= conservative),
        other => panic!("expected Preparing first, got {other:?}"),
    }
    // logind refuses new delay locks once the shutdown is under way.
    event_matching(&mut events, |e| matches!(e, ShutdownEvent::LockLost { .. })).await;
    let status = handle.status();
    assert!(!status.held && status.preparing);
    assert!(
        status
            .last_error
            .unwrap_or_default()
            .contains("OperationInProgress")
    );
}

#[tokio::test]
async fn sim_bus_restart_reports_lost_then_reconnects_with_one_lock() {
    let mut bus = PrivateBus::start().unwrap();
    let _sim = sim(&bus, Duration::from_secs(600)).await;
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);

    bus.restart().unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::LockLost { .. }
    ));
    assert!(handle.status().last_error.is_some());
    // A new logind on the new bus; the agent finds it by itself.
    let _sim2 = sim(&bus, Duration::from_secs(600)).await;
    event_matching(&mut events, |e| *e == ShutdownEvent::LockHeld).await;
    assert_eq!(count_ours(&client(&bus).await, &token).await, 1);
}

#[tokio::test]
async fn sim_restart_losing_state_mid_shutdown_counts_as_cancel() {
    let bus = PrivateBus::start().unwrap();
    let sim = sim(&bus, Duration::from_secs(600)).await;
    let logind = client(&bus).await;
    let _kubelet = logind
        .inhibit("shutdown", "kubelet", KUBELET_WHY, "delay")
        .await
        .unwrap();
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    event_matching(&mut events, |e| *e == ShutdownEvent::LockHeld).await;
    sim.reboot().await;
    event_matching(&mut events, |e| {
        matches!(e, ShutdownEvent::Preparing { .. })
    })
    .await;
    handle.release().await.unwrap();

    // The new logind knows of no shutdown: ours is over, take the lock again.
    sim.restart(RestartMode::LoseState).await.unwrap();
    assert_eq!(next_event(&mut events).await, ShutdownEvent::Cancelled);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    assert_eq!(count_ours(&logind, &token).await, 1);
    assert!(!handle.status().preparing);
}

/// logind restarting in the middle of a shutdown, with its state kept, is
/// the same shutdown: the lock is found again, and the agent is not told
/// of a second shutdown (which would start its drain's clock again).
#[tokio::test]
async fn sim_restart_keeping_state_mid_shutdown_is_the_same_shutdown() {
    let (bus, sim, token, handle, mut events) = held(Duration::from_secs(600)).await;
    sim.reboot().await;
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::Preparing {
            already_in_progress: false,
            ..
        }
    ));

    sim.restart(RestartMode::KeepState).await.unwrap();
    let mut after = vec![];
    loop {
        let e = next_event(&mut events).await;
        after.push(e.clone());
        if e == ShutdownEvent::LockHeld {
            break;
        }
    }
    assert!(
        matches!(
            after.as_slice(),
            [ShutdownEvent::LockLost { .. }, ShutdownEvent::LockHeld]
        ),
        "{after:?}"
    );
    assert!(handle.status().preparing);
    assert_eq!(count_ours(&client(&bus).await, &token).await, 1);
}

/// With logind's bus gone (a socket that takes connections and closes
/// them), the lock holder tries again with a growing pause, capped, and
/// does not spin: a node agent looping on a dead bus burns the node's CPU.
#[tokio::test]
async fn a_dead_bus_is_retried_with_a_growing_pause() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bus");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let tries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = tries.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(conn);
        }
    });
    let mut cfg = maintd::inhibitor::InhibitorConfig::new("node-a");
    cfg.bus = maintd::logind::BusAddress::Address(format!("unix:path={}", path.display()));
    cfg.reconnect_initial = Duration::from_millis(100);
    cfg.reconnect_max = Duration::from_millis(800);
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    assert!(matches!(
        next_event(&mut events).await,
        ShutdownEvent::LockLost { .. }
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = tries.load(std::sync::atomic::Ordering::SeqCst);
    // Pauses of 0.1, 0.2, 0.4, then 0.8 s: about seven tries in 3 s.
    assert!((3..=12).contains(&n), "{n} connection attempts in 3 s");
    assert!(!handle.status().held);
    assert!(handle.status().last_error.is_some());
}

/// A logind that answers before it has read its locks back from /run
/// lists none of them for a moment: the agent gives it that moment
/// (`restore_grace`) rather than taking a second lock at once, and ends
/// with the one lock it held.
#[tokio::test]
async fn sim_restart_restoring_state_late_keeps_the_one_lock() {
    let (bus, sim, token, handle, mut events) = held(Duration::from_secs(600)).await;

    sim.restart(RestartMode::KeepStateLate(Duration::from_millis(100)))
        .await
        .unwrap();
    event_matching(&mut events, |e| *e == ShutdownEvent::LockHeld).await;
    assert_eq!(count_ours(&client(&bus).await, &token).await, 1);
    assert_eq!(sim.locks_granted(), 1, "no second lock was taken");
    assert!(handle.status().held);
}

/// logind refusing the lock (its InhibitorsMax reached) is reported, and
/// the lock is asked for again until it is given: a refusal that passes
/// must not leave the node's reboots unguarded.
#[tokio::test]
async fn sim_a_refused_lock_is_asked_for_again_until_given() {
    let bus = PrivateBus::start().unwrap();
    let sim = sim(&bus, Duration::from_secs(600)).await;
    let logind = client(&bus).await;
    let other = logind
        .inhibit("shutdown", "updater", "applying updates", "delay")
        .await
        .unwrap();
    sim.set_inhibitors_max(Some(1));
    let cfg = config(&bus);
    let token = cfg.token.clone();
    let (handle, mut events) = ShutdownInhibitor::start(cfg);
    match next_event(&mut events).await {
        ShutdownEvent::LockLost { reason } => {
            assert!(reason.contains("Too many inhibitors"), "{reason}");
            assert!(
                !reason.starts_with("D-Bus"),
                "a refusal is no lost bus: {reason}"
            );
        }
        other => panic!("expected LockLost, got {other:?}"),
    }
    assert!(!handle.status().held);
    // Asked again with a growing pause (50 ms doubling to 400 ms here):
    // about eight times in 2 s; one that spins asks hundreds of times.
    let before = sim.inhibit_calls();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = sim.inhibit_calls() - before;
    assert!((2..=15).contains(&asked), "asked {asked} times in 2 s");
    // The other lock goes; no bus event tells the agent so.
    drop(other);
    assert_eq!(next_event(&mut events).await, ShutdownEvent::LockHeld);
    assert_eq!(count_ours(&logind, &token).await, 1);
    assert!(handle.status().held);
}
