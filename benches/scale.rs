//! What each agent costs as the cluster grows: N agents in one process
//! against the simulator, for N = 10, 100 and 1,000
//! (`MAINTD_SCALE_NODES=10,100`). The agents share one runtime, each with
//! its own client and watches; the simulator runs on a runtime of its own,
//! on its own thread, so its CPU time is measured apart from theirs.
//!
//! (a) idle for `MAINTD_SCALE_IDLE_SECONDS` (default 60; the simulator
//!     sends a bookmark a minute, as an API server does);
//! (b) a rolling drain: one NodeMaintenance selecting all N nodes moves to
//!     Drain with `maxConcurrentDrains` a tenth of N, so a tenth of the
//!     nodes drain at once, each taking a drain slot and giving it back
//!     once drained; `MAINTD_SCALE_PODS` pods a node (default 3).
//!
//! Per N it prints requests per agent per minute (idle), requests, watch
//! events and bytes received per agent (idle and drain), the largest
//! NodeMaintenance and NodeDrain objects, the simulator's CPU time and the
//! agents', the process's memory before and with the agents, and the
//! rolling drain's wall time. Then the smallest N again with three times
//! the pods, to tell the requests per pod from the constant, and the
//! figures the design holds to, each with whether it holds. Run with
//! `cargo bench --bench scale`.

use std::time::{Duration, Instant};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Writer};
use maintd_sim::{SimCluster, SimConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The simulator's threads are named so, and measured apart.
const SIM_THREAD: &str = "sim-apiserver";

/// CPU seconds of this process's threads, split into the simulator's and
/// everyone else's, from /proc/self/task/*/stat.
fn cpu_split() -> (f64, f64) {
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
        if comm.starts_with(SIM_THREAD) {
            sim += secs;
        } else {
            rest += secs;
        }
    }
    (sim, rest)
}

/// The process's resident memory, KiB.
fn rss_kib() -> u64 {
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

/// Agent requests and what they received, per agent, from the audit log.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct Usage {
    requests: f64,
    events: f64,
    bytes: f64,
    /// Bytes per agent by resource (the plural in the path).
    by_resource: std::collections::BTreeMap<String, f64>,
    /// Requests per agent answered 409 Conflict (a write based on a
    /// version that had moved on), by path.
    conflicts: std::collections::BTreeMap<String, f64>,
}

/// The resource of a request path and its subresource, without names:
/// `nodes`, `nodes/status`, `leases`.
fn collection_of(path: &str) -> String {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match seg.first() {
        Some(&"api") => seg.get(2..).unwrap_or_default(),
        Some(&"apis") => seg.get(3..).unwrap_or_default(),
        _ => &seg[..],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        _ => rest,
    };
    match rest {
        [plural, _, sub, ..] => format!("{plural}/{sub}"),
        [plural, ..] => plural.to_string(),
        [] => path.to_string(),
    }
}

impl Usage {
    fn of_agents(sim: &SimCluster, n: usize) -> Usage {
        let all = sim.state.audit.requests();
        let requests = all
            .iter()
            .filter(|r| r.user_agent.starts_with("maintd/"))
            .count();
        let mut conflicts = std::collections::BTreeMap::new();
        for r in &all {
            if r.user_agent.starts_with("maintd/") && r.code == 409 {
                *conflicts.entry(collection_of(&r.path)).or_insert(0.0) += 1.0 / n as f64;
            }
        }
        let (mut events, mut bytes) = (0u64, 0u64);
        for (ua, s) in sim.state.audit.sent() {
            if ua.starts_with("maintd/") {
                events += s.watch_events;
                bytes += s.bytes;
            }
        }
        let mut by_resource = std::collections::BTreeMap::new();
        for ((ua, resource), s) in sim.state.audit.sent_by_resource() {
            if ua.starts_with("maintd/") {
                *by_resource.entry(resource).or_insert(0.0) += s.bytes as f64 / n as f64;
            }
        }
        Usage {
            requests: requests as f64 / n as f64,
            events: events as f64 / n as f64,
            bytes: bytes as f64 / n as f64,
            by_resource,
            conflicts,
        }
    }

    fn since(self, before: Usage) -> Usage {
        let minus = |mut now: std::collections::BTreeMap<String, f64>,
                     then: &std::collections::BTreeMap<String, f64>| {
            for (k, v) in then {
                *now.entry(k.clone()).or_insert(0.0) -= v;
            }
            now
        };
        let by_resource = minus(self.by_resource, &before.by_resource);
        let conflicts = minus(self.conflicts, &before.conflicts);
        Usage {
            requests: self.requests - before.requests,
            events: self.events - before.events,
            bytes: self.bytes - before.bytes,
            by_resource,
            conflicts,
        }
    }

    /// The resources that made up most of the bytes, largest first.
    fn breakdown(&self) -> String {
        let mut v: Vec<_> = self
            .by_resource
            .iter()
            .filter(|(_, b)| **b >= 1.0)
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        v.iter()
            .map(|(r, b)| format!("{r} {:.1} kB", *b / 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    n: usize,
    pods_per_node: usize,
    idle: Usage,
    idle_secs: f64,
    drain: Usage,
    drain_secs: f64,
    drained: usize,
    largest_nm: usize,
    largest_nd: usize,
    sim_cpu: f64,
    agents_cpu: f64,
    rss_sim_kib: u64,
    rss_with_agents_kib: u64,
}

fn nodedrains(sim: &SimCluster) -> Vec<std::sync::Arc<Value>> {
    sim.state
        .store()
        .list(&Gr::new("maintd.io", "nodedrains"), None)
}

/// Runs one N on `agents` (a runtime of its own for the agents); the
/// simulator runs on `sim_rt`.
fn run(
    sim_rt: &tokio::runtime::Runtime,
    agents: &tokio::runtime::Runtime,
    n: usize,
    pods_per_node: usize,
    idle_secs: u64,
) -> Row {
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
    for i in 0..n {
        let node = format!("node-{i:05}");
        create(
            &sim,
            &Gr::new("", "nodes"),
            None,
            json!({"metadata": {"name": node, "labels": {"pool": "all", "kubernetes.io/hostname": node}},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        for p in 0..pods_per_node {
            create(
                &sim,
                &Gr::new("", "pods"),
                Some("default"),
                json!({"metadata": {"name": format!("app-{i:05}-{p}"), "namespace": "default",
                                    "annotations": {"sim.maintd.io/shutdown-seconds": "0.2"}},
                       "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example/app:1"}]}}),
            );
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let rss_sim = rss_kib();
    let (sim_cpu0, rest_cpu0) = cpu_split();

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
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle = Usage::of_agents(&sim, n).since(before);
    let idle_elapsed = t.elapsed().as_secs_f64();

    // The rolling drain: one object over every node, a tenth at a time.
    let before = Usage::of_agents(&sim, n);
    let t = Instant::now();
    let nms = Gr::new("maintd.io", "nodemaintenances");
    create(
        &sim,
        &nms,
        None,
        json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
               "metadata": {"name": "rolling"},
               "spec": {"nodeSelector": {"matchLabels": {"pool": "all"}}, "stage": "Drain",
                        "maxConcurrentDrains": (n / 10).max(1)}}),
    );
    let mut largest_nm = 0usize;
    let mut largest_nd = 0usize;
    let deadline = Instant::now() + Duration::from_secs(1200);
    let drained = loop {
        if let Some(o) = sim.state.store().get(&nms, "", "rolling") {
            largest_nm = largest_nm.max(serde_json::to_vec(&*o).map(|v| v.len()).unwrap_or(0));
        }
        let all = nodedrains(&sim);
        largest_nd = all
            .iter()
            .map(|o| serde_json::to_vec(&**o).map(|v| v.len()).unwrap_or(0))
            .max()
            .unwrap_or(0)
            .max(largest_nd);
        let drained = all
            .iter()
            .filter(|o| o["status"]["phase"] == "Drained")
            .count();
        if drained >= n || Instant::now() > deadline {
            break drained;
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  N={n}: {drained} of {n} drained after {:.0}s",
                t.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let drain_secs = t.elapsed().as_secs_f64();
    // The last aggregates and NodeDrain writes land within a few seconds.
    std::thread::sleep(Duration::from_secs(6));
    if let Some(o) = sim.state.store().get(&nms, "", "rolling") {
        largest_nm = largest_nm.max(serde_json::to_vec(&*o).map(|v| v.len()).unwrap_or(0));
    }
    let drain = Usage::of_agents(&sim, n).since(before);
    let (sim_cpu1, rest_cpu1) = cpu_split();
    stop.cancel();
    std::thread::sleep(Duration::from_secs(1));
    Row {
        n,
        pods_per_node,
        idle,
        idle_secs: idle_elapsed,
        drain,
        drain_secs,
        drained,
        largest_nm,
        largest_nd,
        sim_cpu: sim_cpu1 - sim_cpu0,
        agents_cpu: rest_cpu1 - rest_cpu0,
        rss_sim_kib: rss_sim,
        rss_with_agents_kib: rss_with_agents,
    }
}

fn print_row(r: &Row) {
    println!(
        "N={:5} pods/node={}  idle {:.0}s: {:.2} req/agent/min, {:.1} events, {:.0} B/agent  |  rolling drain {:.1}s ({} of {} drained): {:.1} req/agent, {:.1} events, {:.0} B/agent  |  largest NodeMaintenance {} B, NodeDrain {} B  |  CPU: simulator {:.1}s, agents {:.1}s ({:.1} ms/agent)  |  RSS: simulator and objects {} MiB, with agents {} MiB ({:.0} KiB/agent)",
        r.n,
        r.pods_per_node,
        r.idle_secs,
        r.idle.requests * 60.0 / r.idle_secs,
        r.idle.events,
        r.idle.bytes,
        r.drain_secs,
        r.drained,
        r.n,
        r.drain.requests,
        r.drain.events,
        r.drain.bytes,
        r.largest_nm,
        r.largest_nd,
        r.sim_cpu,
        r.agents_cpu,
        r.agents_cpu * 1000.0 / r.n as f64,
        r.rss_sim_kib / 1024,
        r.rss_with_agents_kib / 1024,
        r.rss_with_agents_kib.saturating_sub(r.rss_sim_kib) as f64 / r.n as f64,
    );
    println!(
        "    drain bytes per agent by resource: {}",
        r.drain.breakdown()
    );
    let conflicts: Vec<String> = r
        .drain
        .conflicts
        .iter()
        .filter(|(_, c)| **c > 0.0)
        .map(|(p, c)| format!("{p} {c:.2}"))
        .collect();
    println!(
        "    drain conflicts (409) per agent: {}",
        if conflicts.is_empty() {
            "none".to_string()
        } else {
            conflicts.join(", ")
        }
    );
}

fn verdict(ok: bool) -> &'static str {
    if ok { "holds" } else { "DOES NOT HOLD" }
}

/// One N in a process of its own, so its memory and CPU figures are its
/// own: the bench runs itself with `MAINTD_SCALE_ONE=N,PODS,IDLE` and reads
/// the row it prints last.
fn run_apart(n: usize, pods: usize, idle: u64) -> Row {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::process::Command::new(exe)
        .env("MAINTD_SCALE_ONE", format!("{n},{pods},{idle}"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the bench runs itself");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().rev().find_map(|l| {
        l.strip_prefix("ROW ")
            .and_then(|j| serde_json::from_str(j).ok())
    });
    row.unwrap_or_else(|| panic!("N={n} printed no row:\n{text}"))
}

/// The child's part: one N, its row printed as JSON.
fn run_one(spec: &str) {
    let v: Vec<u64> = spec.split(',').filter_map(|s| s.parse().ok()).collect();
    let [n, pods, idle] = v[..] else {
        panic!("MAINTD_SCALE_ONE={spec}: want N,PODS,IDLE");
    };
    let sim_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(SIM_THREAD)
        .enable_all()
        .build()
        .expect("the simulator's runtime");
    let agents = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("agents")
        .enable_all()
        .build()
        .expect("the agents' runtime");
    let row = run(&sim_rt, &agents, n as usize, pods as usize, idle);
    println!("ROW {}", serde_json::to_string(&row).expect("a row"));
}

fn main() {
    if let Ok(spec) = std::env::var("MAINTD_SCALE_ONE") {
        run_one(&spec);
        return;
    }
    let ns: Vec<usize> = std::env::var("MAINTD_SCALE_NODES")
        .unwrap_or_else(|_| "10,100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let idle: u64 = std::env::var("MAINTD_SCALE_IDLE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let pods: usize = std::env::var("MAINTD_SCALE_PODS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rows = Vec::new();
    for &n in &ns {
        let row = run_apart(n, pods, idle);
        print_row(&row);
        rows.push(row);
    }
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    // The smallest N again, with three times the pods: what a pod adds.
    let more = run_apart(first.n, pods * 3, idle.min(10));
    print_row(&more);
    let per_pod = (more.drain.requests - first.drain.requests)
        / ((more.pods_per_node - first.pods_per_node) as f64);
    let constant = first.drain.requests - per_pod * first.pods_per_node as f64;

    let idle_ratio = last.idle.bytes / first.idle.bytes.max(1.0);
    let drain_ratio = last.drain.bytes / first.drain.bytes.max(1.0);
    println!();
    println!("N={} against N={}:", last.n, first.n);
    println!(
        "  idle bytes per agent: {:.2}x (at most 1.5x: {})",
        idle_ratio,
        verdict(idle_ratio <= 1.5)
    );
    println!(
        "  rolling-drain bytes per agent: {:.2}x (at most 1.5x: {})",
        drain_ratio,
        verdict(drain_ratio <= 1.5)
    );
    println!(
        "  largest NodeMaintenance at N={}: {} B (at most 64 KiB: {})",
        last.n,
        last.largest_nm,
        verdict(last.largest_nm <= 64 * 1024)
    );
    println!(
        "  requests per agent in the rolling drain: {:.2} per pod drained + {:.1} (at most 3 per pod: {})",
        per_pod,
        constant,
        verdict(per_pod <= 3.0)
    );
    println!(
        "  simulator CPU per agent: {:.1} ms at N={}, {:.1} ms at N={}",
        first.sim_cpu * 1000.0 / first.n as f64,
        first.n,
        last.sim_cpu * 1000.0 / last.n as f64,
        last.n
    );
}
