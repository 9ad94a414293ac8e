//! A reboot of a real node (scripts/real-node), its logind the tests'
//! simulated one on the node's system bus: maintd's delay lock (taken by
//! deploy/'s node helper) and, when its graceful node shutdown is on, the
//! kubelet's. What each does once logind announces the shutdown, and when
//! each lock goes, is measured from the API server's audit log, a watch
//! of the node's pods and logind's own table; docs/reboots.md ("The
//! kubelet's graceful node shutdown") gives the figures.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use maintd_sim::logind::ShutdownRecord;

use crate::real_kubelet::node::{NodeOptions, RealNode};
use crate::real_kubelet::scenario::{self, APPS, Kind};
use crate::real_kubelet::timeline::{self, LockLog, PodWatch, ReadyFloor, secs};

/// A reboot's timeline, for the log: each pod's eviction by maintd, kill
/// by the kubelet and end, relative to logind's announcement; each
/// change of the locks.
fn report(node: &RealNode, start: Timestamp, locks: &LockLog, watch: &PodWatch) -> String {
    let lives = timeline::pod_lives(&node.audit_log(), &node.name);
    let rel =
        |t: Option<Timestamp>| t.map_or("-".to_string(), |t| format!("{:+.2}s", secs(start, t)));
    let mut out = String::new();
    for (key, seen) in watch.seen() {
        let life = lives.get(&key).cloned().unwrap_or_default();
        out.push_str(&format!(
            "  {key:<36} prio {:>10} {:<10} evicted by maintd {:>7} killed by kubelet {:>7} deleted by maintd {:>7} gone {:>7}{}\n",
            seen.priority,
            seen.owner,
            rel(life.evicted),
            rel(seen.killed_by_kubelet),
            rel(life.deleted_by_maintd.first().copied()),
            rel(life.gone.or(seen.gone)),
            if life.refused > 0 { format!(" (refused {}x)", life.refused) } else { String::new() },
        ));
    }
    for (at, holders) in locks.changes() {
        out.push_str(&format!(
            "  delay locks from {}: {holders:?}\n",
            rel(Some(at))
        ));
    }
    out
}

/// Reboots the node through logind; returns logind's record and when the
/// announcement went out, once logind went ahead (within its budget).
async fn reboot(node: &RealNode, budget: Duration) -> (ShutdownRecord, Timestamp) {
    let start = Timestamp::now();
    node.logind.reboot().await;
    let record = tokio::time::timeout(
        budget + Duration::from_secs(10),
        node.logind.wait_for_shutdowns(1),
    )
    .await
    .expect("logind goes ahead within its budget")[0]
        .clone();
    (record, start)
}

/// The kubelet's graceful node shutdown on (shutdownGracePeriod 30 s, 10 s
/// of it for critical pods) beside maintd, logind's budget 60 s. At the
/// announcement both act at once: maintd evicts its first stage through
/// the Eviction API; the kubelet kills every other pod at once, whatever
/// its priority or budget, and once they are gone kills the critical ones,
/// maintd's own pod among them, which ends maintd's lock. Neither lock
/// outlives logind's budget, and maintd's writes never bypass a budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_with_the_kubelets_graceful_shutdown_on_beside_maintd() {
    let options = NodeOptions::default();
    let (budget, critical) = (
        options.inhibit_delay_max,
        f64::from(options.shutdown_grace_period_critical_pods),
    );
    let default_group = f64::from(options.shutdown_grace_period) - critical;
    let (node, client) = scenario::installed(options).await;
    let pods = scenario::run_apps(&node, &client, &APPS).await;
    node.kwok_node(&client, "spare").await;
    let watch = PodWatch::start(&client, &node.name);
    let web_floor = ReadyFloor::start(&client, scenario::NS, "web");
    let locks = LockLog::start(&node.logind);
    let maintd_pod = node.maintd_pod(&client, Duration::from_secs(10)).await;
    let maintd_pod = format!("maintd/{}", maintd_pod.metadata.name.unwrap_or_default());
    let before = node.logind.inhibitors();
    assert!(
        ["kubelet", "maintd"]
            .iter()
            .all(|w| before.iter().any(|i| i.who == *w && i.delays("shutdown"))),
        "both hold a delay lock: {before:?}"
    );

    let t = Instant::now();
    let (record, start) = reboot(&node, budget).await;
    let waited = t.elapsed();
    // The kubelet's and maintd's last writes land after logind went ahead.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let story = report(&node, start, &locks, &watch);
    eprintln!(
        "logind: {record:?} after {waited:?}; web's least Ready {}\n{story}",
        web_floor.least()
    );

    // logind waited for both, and neither lock outlived its budget.
    assert_eq!(
        record.waited_for,
        vec!["kubelet".to_string(), "maintd".to_string()],
        "{story}"
    );
    assert!(
        !record.timed_out && record.delayed < budget,
        "{record:?}\n{story}"
    );
    let maintd_released = locks.released("maintd", start).expect("maintd's lock went");
    let kubelet_released = locks
        .released("kubelet", start)
        .expect("the kubelet's lock went");
    assert_eq!(locks.most_held("maintd"), 1, "maintd never held two locks");

    let lives = timeline::pod_lives(&node.audit_log(), &node.name);
    let seen = watch.seen();
    // maintd evicted its first stage through the Eviction API, at once.
    for key in &pods[APPS[0].name] {
        let evicted = lives.get(key).and_then(|l| l.evicted);
        let evicted = evicted.unwrap_or_else(|| panic!("maintd evicted {key}\n{story}"));
        assert!(
            secs(start, evicted) < 2.0,
            "{key} evicted {:.2}s in\n{story}",
            secs(start, evicted)
        );
    }
    // The kubelet killed every other pod, whatever its priority or kind,
    // within its period for ordinary pods: all at once, not stage by stage.
    let mut last_killed = start;
    for app in &APPS[1..] {
        let keys = match app.kind {
            Kind::Static => vec![scenario::mirror(app, &node.name)],
            _ => pods[app.name].clone(),
        };
        for key in keys {
            let killed = seen
                .get(&key)
                .and_then(|s| s.killed_by_kubelet)
                .unwrap_or_else(|| panic!("the kubelet killed {key}\n{story}"));
            assert!(
                secs(start, killed) < default_group,
                "{key} killed {:.2}s in\n{story}",
                secs(start, killed)
            );
            last_killed = last_killed.max(killed);
        }
    }
    // Then the critical pods, maintd's own among them: maintd's lock is
    // gone by then at the latest, and the kubelet's goes once they are.
    let maintd_killed = seen
        .get(&maintd_pod)
        .and_then(|s| s.killed_by_kubelet)
        .unwrap_or_else(|| panic!("the kubelet killed maintd's pod {maintd_pod}\n{story}"));
    assert!(
        secs(start, maintd_released) < default_group + critical,
        "maintd's lock went {:.2}s in\n{story}",
        secs(start, maintd_released)
    );
    assert!(
        kubelet_released >= maintd_released,
        "the kubelet's lock goes last\n{story}"
    );
    eprintln!(
        "ordinary pods killed by {:.2}s, maintd's pod by {:.2}s; maintd's lock went at {:.2}s, \
         the kubelet's at {:.2}s; manifests stashed: {:?}",
        secs(start, last_killed),
        secs(start, maintd_killed),
        secs(start, maintd_released),
        secs(start, kubelet_released),
        scenario::files(&node.stash()).keys().collect::<Vec<_>>()
    );
    // maintd's writes to pods: evictions the budgets' check let through,
    // and deletes of pods the kubelet had already stopped.
    for (key, life) in &lives {
        for deleted in &life.deleted_by_maintd {
            let stopped = seen.get(key).and_then(|s| s.killed_by_kubelet);
            assert!(
                stopped.is_some_and(|s| s <= *deleted),
                "maintd deleted {key}, which still ran\n{story}"
            );
        }
    }
}

/// The kubelet's graceful node shutdown off (shutdownGracePeriod 0, its
/// default: no lock), as docs/reboots.md asks beside maintd. maintd alone
/// drains the node in plan order within logind's budget, through the
/// Eviction API behind the budgets, stashes the static pods' manifests,
/// and lets logind go ahead as soon as the node is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_with_maintd_alone_drains_in_plan_order_within_the_budget() {
    let options = NodeOptions {
        shutdown_grace_period: 0,
        shutdown_grace_period_critical_pods: 0,
        inhibit_delay_max: Duration::from_secs(120),
    };
    let budget = options.inhibit_delay_max;
    let (node, client) = scenario::installed(options).await;
    let pods = scenario::run_apps(&node, &client, &APPS).await;
    let manifests = scenario::manifests(&node, &APPS);
    node.kwok_node(&client, "spare").await;
    let watch = PodWatch::start(&client, &node.name);
    let web_floor = ReadyFloor::start(&client, scenario::NS, "web");
    let locks = LockLog::start(&node.logind);
    let before: Vec<String> = node
        .logind
        .inhibitors()
        .into_iter()
        .map(|i| i.who)
        .collect();
    assert_eq!(
        before,
        vec!["maintd".to_string()],
        "the kubelet takes no lock"
    );

    let t = Instant::now();
    let (record, start) = reboot(&node, budget).await;
    let waited = t.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let story = report(&node, start, &locks, &watch);
    eprintln!(
        "logind: {record:?} after {waited:?}; web's least Ready {}\n{story}",
        web_floor.least()
    );

    assert_eq!(record.waited_for, vec!["maintd".to_string()]);
    assert!(
        !record.timed_out && record.delayed < budget,
        "{record:?}\n{story}"
    );
    let report = scenario::assert_left_in_plan_order(&node, &pods, &APPS);
    eprintln!("  {}", report.join("\n  "));
    assert!(web_floor.least() >= 1, "web's budget held\n{story}");
    assert_eq!(
        scenario::files(&node.stash()),
        manifests,
        "the static pods' manifests are stashed"
    );
    // logind went ahead once the last pod was gone, not at its budget.
    let lives = timeline::pod_lives(&node.audit_log(), &node.name);
    let last_gone = lives
        .values()
        .filter_map(|l| l.gone)
        .max()
        .expect("pods went");
    let released = locks.released("maintd", start).expect("maintd's lock went");
    assert!(
        released >= last_gone && secs(last_gone, released) < 10.0,
        "maintd let go {:.2}s after the last pod went\n{story}",
        secs(last_gone, released)
    );
    assert!(
        watch.seen().values().all(|s| s.killed_by_kubelet.is_none()),
        "the kubelet killed nothing\n{story}"
    );
}
