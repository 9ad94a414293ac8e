//! The scenario on the simulator: N nodes, their pods and a DaemonSet, N
//! agents (each with its own client and watches), idle, then a rolling
//! reboot. The simulator runs on a runtime and thread of its own, so its
//! CPU time is measured apart from the agents'.

use std::sync::Arc;
use std::time::{Duration, Instant};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Writer};
use maintd_sim::{SimCluster, SimConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::report::Row;
use super::usage::Usage;
use super::watch::Watch;
use super::{Settings, scenario};

/// The simulator's threads are named so, and measured apart.
pub const SIM_THREAD: &str = "sim-apiserver";

/// CPU seconds of this process's threads, split into those whose name
/// starts with `prefix` and everyone else's, from /proc/self/task/*/stat.
pub fn cpu_split(prefix: &str) -> (f64, f64) {
    let (mut sim, mut rest) = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0.0, 0.0);
    };
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map(|(_, c)| c).unwrap_or("");
        let f: Vec<&str> = tail.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let secs = (ticks(11) + ticks(12)) / 100.0;
        if comm.starts_with(prefix) {
            sim += secs;
        } else {
            rest += secs;
        }
    }
    (sim, rest)
}

/// The process's resident memory, KiB.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn create(sim: &SimCluster, gr: &Gr, ns: Option<&str>, obj: Value) {
    let def = sim.state.store().resource(gr).expect("resource served");
    let writer = Writer {
        manager: "bench".into(),
        force: true,
        user: None,
    };
    verbs::create(&sim.state, &def, ns, obj, &writer, false).expect("created");
}

fn nodedrains(sim: &SimCluster) -> Vec<Arc<Value>> {
    sim.state
        .store()
        .list(&Gr::new("maintd.io", "nodedrains"), None)
}

/// Runs one N on `agents` (a runtime of its own for the agents); the
/// simulator runs on `sim_rt`.
pub fn run(
    sim_rt: &tokio::runtime::Runtime,
    agents: &tokio::runtime::Runtime,
    n: usize,
    settings: &Settings,
) -> Row {
    let (pods_per_node, idle_secs) = (settings.pods, settings.idle_secs);
    let sim = sim_rt.block_on(async {
        SimCluster::start(SimConfig {
            bookmark_interval: Duration::from_secs(60),
            ..SimConfig::default()
        })
        .await
        .expect("sim")
    });
    for crd in [
        maintd::api::crd().unwrap(),
        maintd::api::nodedrain_crd().unwrap(),
    ] {
        create(&sim, &Gr::crds(), None, serde_json::to_value(crd).unwrap());
    }
    create(
        &sim,
        &Gr::namespaces(),
        None,
        json!({"metadata": {"name": "maintd"}}),
    );
    let orders = settings.orders;
    for i in 0..n {
        create(
            &sim,
            &Gr::nodes(),
            None,
            json!({"metadata": {"name": scenario::node_name(i), "labels": scenario::node_labels(i, n, orders)},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        for p in 0..pods_per_node {
            create(
                &sim,
                &Gr::pods(),
                Some(scenario::NAMESPACE),
                scenario::bare_pod(i, p),
            );
        }
    }
    create(
        &sim,
        &Gr::daemonsets(),
        Some(scenario::NAMESPACE),
        scenario::daemonset(),
    );
    std::thread::sleep(Duration::from_secs(2));
    let rss_sim = rss_kib();
    let (sim_cpu0, rest_cpu0) = cpu_split(SIM_THREAD);

    let stop = CancellationToken::new();
    // Clients are made in the agents' runtime, where their requests run.
    let _in_agents = agents.enter();
    let mut handles = Vec::new();
    for i in 0..n {
        let node = format!("node-{i:05}");
        let agent = Agent::new(
            Config::for_node(&node, std::env::temp_dir().join("maintd-scale-none")),
            maintd::testbed::agent_client(&sim, &node),
        );
        handles.push((node, agent.clone()));
        agents.spawn(agent.run(stop.clone()));
    }
    // Settle: every agent has listed and written its NodeDrain.
    let t = Instant::now();
    let mut said = Instant::now();
    while nodedrains(&sim).len() < n && t.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(200));
        if said.elapsed() > Duration::from_secs(10) {
            let have = nodedrains(&sim);
            eprintln!("  N={n}: {} of {n} agents reported", have.len());
            for (node, agent) in &handles {
                if !have.iter().any(|d| d["metadata"]["name"] == node.as_str()) {
                    let views: Vec<String> = agent
                        .views()
                        .iter()
                        .map(|(name, v)| {
                            format!("{name}: synced {} error {:?}", v.synced(), v.last_error())
                        })
                        .collect();
                    eprintln!(
                        "    {node}: {:?}; {}",
                        agent.progress().status().phase,
                        views.join("; ")
                    );
                }
            }
            said = Instant::now();
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let rss_with_agents = rss_kib();

    let before = Usage::of_agents(&sim, n);
    let rv = sim.state.store().current_rv();
    let cpu_idle0 = cpu_split(SIM_THREAD).0;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle = Usage::of_agents(&sim, n).since(before);
    let idle_writes = sim.state.store().current_rv() - rv;
    let cpu_idle1 = cpu_split(SIM_THREAD).0;
    let idle_elapsed = t.elapsed().as_secs_f64();

    // The rolling reboot: one object over every node, a tenth at a time,
    // each turn ending with the node's reboot.
    let before = Usage::of_agents(&sim, n);
    let rv = sim.state.store().current_rv();
    let t = Instant::now();
    let nms = Gr::new("maintd.io", "nodemaintenances");
    let slots = (n / 10).max(1);
    let (ahead, reboot_ms) = (settings.ahead, settings.reboot_ms);
    create(&sim, &nms, None, scenario::rolling(slots, ahead));
    let uid = sim
        .state
        .store()
        .get(&nms, "", "rolling")
        .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_string))
        .expect("the NodeMaintenance has a uid");
    let mut watch = Watch::new(t);
    let mut largest_nm = 0usize;
    let mut largest_nd = 0usize;
    let mut polls = 0u64;
    let deadline = Instant::now() + Duration::from_secs(1200);
    let timed_out = loop {
        let all = nodedrains(&sim);
        if polls.is_multiple_of(4) {
            if let Some(o) = sim.state.store().get(&nms, "", "rolling") {
                largest_nm = largest_nm.max(serde_json::to_vec(&*o).map(|v| v.len()).unwrap_or(0));
            }
            largest_nd = all
                .iter()
                .map(|o| serde_json::to_vec(&**o).map(|v| v.len()).unwrap_or(0))
                .max()
                .unwrap_or(0)
                .max(largest_nd);
        }
        polls += 1;
        let nodes = sim.state.store().list(&Gr::nodes(), None);
        let leases = sim
            .state
            .store()
            .list(&Gr::new("coordination.k8s.io", "leases"), Some("maintd"));
        let over = watch.look(&nodes, &all, &leases, &uid, |node| {
            // The updater's part: the node is drained and holds its turn
            // at the boot it has now, so it reboots.
            let _in_sim = sim_rt.enter();
            sim.reboot_node(node, Duration::from_millis(reboot_ms))
                .is_some()
        });
        if over {
            break false;
        }
        if Instant::now() > deadline {
            break true;
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  N={n}: {} of {n} turns done, {} unschedulable now, {} rebooted, after {:.0}s",
                watch.done_count(),
                watch.unschedulable_now,
                watch.rebooted_count(),
                t.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if timed_out {
        panic!(
            "N={n}: THE ROLLING REBOOT DID NOT FINISH within 1200 s: {} of {n} turns done, {} rebooted, {} unschedulable now, {} never seen cordoned; slot holders now: {:?}. No figures for a dead rollout.",
            watch.done_count(),
            watch.rebooted_count(),
            watch.unschedulable_now,
            n - watch
                .nodes
                .values()
                .filter(|s| !s.cordons.is_empty())
                .count(),
            watch.holders_now()
        );
    }
    let done = watch.done_count();
    for u in &watch.unslotted {
        eprintln!("  N={n}: CORDONED WITH NO SLOT: {u}");
    }
    let rollout = watch.summary(slots, ahead, reboot_ms, orders);
    rollout.check(n);
    let drain_secs = t.elapsed().as_secs_f64();
    // The last aggregates and NodeDrain writes land within a few seconds.
    std::thread::sleep(Duration::from_secs(6));
    if let Some(o) = sim.state.store().get(&nms, "", "rolling") {
        largest_nm = largest_nm.max(serde_json::to_vec(&*o).map(|v| v.len()).unwrap_or(0));
    }
    let drain = Usage::of_agents(&sim, n).since(before);
    let drain_writes = sim.state.store().current_rv() - rv;
    let (sim_cpu1, rest_cpu1) = cpu_split(SIM_THREAD);
    stop.cancel();
    std::thread::sleep(Duration::from_secs(1));
    Row {
        n,
        pods_per_node,
        idle,
        idle_secs: idle_elapsed,
        drain,
        drain_secs,
        done,
        rollout,
        largest_nm,
        largest_nd,
        sim_cpu: sim_cpu1 - sim_cpu0,
        agents_cpu: rest_cpu1 - rest_cpu0,
        rss_sim_kib: rss_sim,
        rss_with_agents_kib: rss_with_agents,
        idle_writes,
        drain_writes,
        sim_cpu_idle: cpu_idle1 - cpu_idle0,
        sim_cpu_drain: sim_cpu1 - cpu_idle1,
    }
}
