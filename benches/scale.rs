//! What each agent costs as the cluster grows: N agents in one process
//! (one runtime; each agent with its own client and watches) against the
//! simulator, for N = 10, 100 and 1,000 (`MAINTD_SCALE_NODES=10,100`).
//!
//! (a) idle for `MAINTD_SCALE_IDLE_SECONDS` (default 30);
//! (b) a rolling drain: ten NodeMaintenance objects, each selecting a tenth
//!     of the nodes (label `batch`), moved to Drain one after the other,
//!     each once the previous one counts its nodes drained; two pods a node
//!     (`MAINTD_SCALE_PODS`).
//!
//! Per N it prints requests per agent per minute (idle), requests per agent
//! and per pod drained (rolling drain), watch events and bytes received per
//! agent, the largest NodeMaintenance and NodeDrain objects, the process's
//! CPU time and memory growth per agent (agents and simulator share the
//! process), and the rolling drain's wall time; then the ratios the design
//! holds to. Run with `cargo bench --bench scale`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd::sim::audit::Sent;
use maintd::sim::resources::Gr;
use maintd::sim::verbs::{self, Writer};
use maintd::sim::{SimCluster, SimConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn cpu_and_rss() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    ((ticks(11) + ticks(12)) / 100.0, rss)
}

fn writer() -> Writer {
    Writer {
        manager: "bench".into(),
        force: true,
    }
}

fn create(sim: &SimCluster, gr: &Gr, ns: Option<&str>, obj: Value) {
    let def = sim.state.store().resource(gr).expect("resource served");
    verbs::create(&sim.state, &def, ns, obj, &writer(), false).expect("created");
}

/// Agent requests and what they received, per agent, from the audit log.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    requests: f64,
    events: f64,
    bytes: f64,
}

fn usage(sim: &SimCluster, n: usize) -> Usage {
    let reqs = sim
        .state
        .audit
        .requests()
        .iter()
        .filter(|r| r.user_agent.starts_with("maintd/"))
        .count();
    let sent: BTreeMap<String, Sent> = sim.state.audit.sent();
    let (mut events, mut bytes) = (0u64, 0u64);
    for (ua, s) in &sent {
        if ua.starts_with("maintd/") {
            events += s.watch_events;
            bytes += s.bytes;
        }
    }
    Usage {
        requests: reqs as f64 / n as f64,
        events: events as f64 / n as f64,
        bytes: bytes as f64 / n as f64,
    }
}

fn minus(a: Usage, b: Usage) -> Usage {
    Usage {
        requests: a.requests - b.requests,
        events: a.events - b.events,
        bytes: a.bytes - b.bytes,
    }
}

struct Row {
    n: usize,
    idle: Usage,
    idle_secs: f64,
    drain: Usage,
    pods: usize,
    drain_secs: f64,
    largest_nm: usize,
    largest_nd: usize,
    cpu: f64,
    rss_per_agent_kib: f64,
}

async fn run(n: usize, idle_secs: u64) -> Row {
    let (cpu0, rss0) = cpu_and_rss();
    let sim = SimCluster::start(SimConfig {
        bookmark_interval: Duration::from_secs(60),
        ..SimConfig::default()
    })
    .await
    .expect("sim");
    let crds = Gr::crds();
    for crd in [
        maintd::api::crd().unwrap(),
        maintd::api::nodedrain_crd().unwrap(),
    ] {
        create(&sim, &crds, None, serde_json::to_value(crd).unwrap());
    }
    create(
        &sim,
        &Gr::namespaces(),
        None,
        json!({"metadata": {"name": "maintd"}}),
    );
    let pods_per_node: usize = std::env::var("MAINTD_SCALE_PODS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    for i in 0..n {
        let node = format!("node-{i:05}");
        create(
            &sim,
            &Gr::new("", "nodes"),
            None,
            json!({"metadata": {"name": node, "labels": {"batch": (i % 10).to_string(), "kubernetes.io/hostname": node}},
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
    let stop = CancellationToken::new();
    for i in 0..n {
        let node = format!("node-{i:05}");
        let agent = Agent::new(
            Config::for_node(&node, std::env::temp_dir().join("maintd-scale-none")),
            sim.agent_client(&node),
        );
        tokio::spawn(agent.run(stop.clone()));
    }
    // Settle: every agent has listed and written its NodeDrain.
    let t = Instant::now();
    while sim
        .state
        .store()
        .list(&Gr::new("maintd.io", "nodedrains"), None)
        .len()
        < n
        && t.elapsed() < Duration::from_secs(300)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_idle = usage(&sim, n);
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle = minus(usage(&sim, n), before_idle);
    let idle_elapsed = t.elapsed().as_secs_f64();

    // The rolling drain, a tenth at a time.
    let before_drain = usage(&sim, n);
    let t = Instant::now();
    let nms = Gr::new("maintd.io", "nodemaintenances");
    let mut largest_nm = 0usize;
    for batch in 0..10 {
        let size = (0..n).filter(|i| i % 10 == batch).count();
        if size == 0 {
            continue;
        }
        create(
            &sim,
            &nms,
            None,
            json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
                   "metadata": {"name": format!("batch-{batch}")},
                   "spec": {"nodeSelector": {"matchLabels": {"batch": batch.to_string()}}, "stage": "Drain"}}),
        );
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let obj = sim.state.store().get(&nms, "", &format!("batch-{batch}"));
            let drained = obj
                .as_ref()
                .and_then(|o| o["status"]["drainedNodes"].as_u64())
                .unwrap_or(0) as usize;
            if let Some(o) = &obj {
                largest_nm = largest_nm.max(serde_json::to_vec(&**o).map(|v| v.len()).unwrap_or(0));
            }
            if drained >= size || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let drain_secs = t.elapsed().as_secs_f64();
    let drain = minus(usage(&sim, n), before_drain);
    let largest_nd = sim
        .state
        .store()
        .list(&Gr::new("maintd.io", "nodedrains"), None)
        .iter()
        .map(|o| serde_json::to_vec(&**o).map(|v| v.len()).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let (cpu1, rss1) = cpu_and_rss();
    stop.cancel();
    Row {
        n,
        idle,
        idle_secs: idle_elapsed,
        drain,
        pods: n * pods_per_node,
        drain_secs,
        largest_nm,
        largest_nd,
        cpu: cpu1 - cpu0,
        rss_per_agent_kib: rss1.saturating_sub(rss0) as f64 / n as f64,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ns: Vec<usize> = std::env::var("MAINTD_SCALE_NODES")
        .unwrap_or_else(|_| "10,100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let idle: u64 = std::env::var("MAINTD_SCALE_IDLE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let mut rows = Vec::new();
    for n in ns {
        let row = run(n, idle).await;
        println!(
            "N={:5}  idle: {:.2} req/agent/min, {:.1} events and {:.0} B/agent in {:.0}s  |  rolling drain: {:.1} req/agent ({:.2}/pod), {:.1} events and {:.0} B/agent, {:.1}s  |  largest NodeMaintenance {} B, NodeDrain {} B  |  CPU {:.1}s, +{:.0} KiB RSS/agent",
            row.n,
            row.idle.requests * 60.0 / row.idle_secs,
            row.idle.events,
            row.idle.bytes,
            row.idle_secs,
            row.drain.requests,
            row.drain.requests * row.n as f64 / row.pods as f64,
            row.drain.events,
            row.drain.bytes,
            row.drain_secs,
            row.largest_nm,
            row.largest_nd,
            row.cpu,
            row.rss_per_agent_kib,
        );
        rows.push(row);
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        println!(
            "ratios N={} / N={}: idle bytes per agent {:.2}, rolling-drain bytes per agent {:.2}, requests per agent in the drain {:.2}",
            last.n,
            first.n,
            last.idle.bytes / first.idle.bytes.max(1.0),
            last.drain.bytes / first.drain.bytes.max(1.0),
            last.drain.requests / first.drain.requests.max(1.0),
        );
    }
}
