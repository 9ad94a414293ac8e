//! The agent's footprint: `maintd run` as a process watching node-a of the
//! realistic scenario (110 pods). Idle for a while (MAINTD_FOOTPRINT_SECONDS,
//! default 60): resident memory, CPU time, and the API requests it sent
//! beyond its watches (the goal is none). Then a drain: requests per pod
//! drained. Run with `cargo bench --bench footprint`. The bench fails if
//! the agent exits, never lists its node, or does not finish the drain:
//! numbers of a dead agent are not a footprint.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Part, PatchType, Writer};
use maintd_sim::{SimCluster, SimConfig, scenario};
use serde_json::json;

fn proc_stat(pid: u32) -> (f64, u64) {
    let ticks = 100.0; // USER_HZ on Linux
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let cpu = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (cpu / ticks, rss_kib)
}

fn counts(sim: &SimCluster) -> (usize, usize) {
    let reqs = sim.state.audit.requests();
    (
        reqs.iter().filter(|r| !r.watch).count(),
        reqs.iter().filter(|r| r.watch).count(),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let idle: u64 = std::env::var("MAINTD_FOOTPRINT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/realistic.yaml");
    let sc = scenario::load(&path).expect("scenario");
    let sim = SimCluster::start_with_scenario(SimConfig::default(), &sc)
        .await
        .expect("sim");
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("settled");
    // The CRD is installed, as deploy/ does.
    let crds = sim.state.store().resource(&Gr::crds()).expect("crds");
    let crd = serde_json::to_value(maintd::api::crd().expect("crd")).expect("crd json");
    verbs::create(
        &sim.state,
        &crds,
        None,
        crd,
        &Writer {
            manager: "bench".into(),
            force: false,
            user: None,
        },
        false,
    )
    .expect("crd created");
    let kc = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kc.path(), maintd::testbed::agent_kubeconfig(&sim, "node-a")).unwrap();
    let log = tempfile::NamedTempFile::new().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args(["run", "--node", "node-a", "--listen", &listen])
        .args(["--listen-local", "", "--inhibit-shutdown", "false"])
        .arg("--kubeconfig")
        .arg(kc.path())
        .arg("--static-pod-dir")
        .arg(sim.static_pod_dir("node-a").unwrap())
        .env("MAINTD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log.reopen().expect("the log file"))
        .spawn()
        .expect("maintd starts");
    let pid = child.id();
    let agent = maintd::cli::LocalClient::new(&listen);
    // What is measured must be alive: an agent that exited, or never got
    // ready, fails the bench with its log.
    let mut alive = |what: &str| {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(log.path()).unwrap_or_default();
            panic!("the agent exited ({status}) {what}; its log:\n{log}");
        }
    };
    let t = Instant::now();
    loop {
        alive("while starting");
        let ready = agent.status().await.is_ok_and(|st| {
            st["watches"]["pods_synced"] == true && st["watches"]["node_synced"] == true
        });
        if ready {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the agent did not list its node and pods within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (n0, w0) = counts(&sim);
    let (cpu0, _) = proc_stat(pid);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let (n1, w1) = counts(&sim);
    alive("while idle");
    let (cpu1, rss) = proc_stat(pid);
    let window = start.elapsed().as_secs_f64();
    println!("idle agent, node with 110 pods, {window:.0} s");
    println!(
        "  resident memory                {:8.1} MiB",
        rss as f64 / 1024.0
    );
    println!(
        "  CPU time                       {:8.3} s  ({:.3} % of one core)",
        cpu1 - cpu0,
        100.0 * (cpu1 - cpu0) / window
    );
    println!("  start-up requests (lists)      {:8}", n0);
    println!("  watches opened at start        {:8}", w0);
    println!("  requests while idle, non-watch {:8}", n1 - n0);
    println!("  watch (re)connects while idle  {:8}", w1 - w0);

    // A drain, started the way an admin would: the drain taint on the node.
    let def = sim.state.store().resource(&Gr::nodes()).expect("nodes");
    let taint = json!({"spec": {"taints": [{"key": "maintd.io/drain", "value": "bench", "effect": "NoSchedule"}]}});
    verbs::patch(
        &sim.state,
        &def,
        "",
        "node-a",
        Part::Main,
        PatchType::Merge,
        &taint,
        &Writer {
            manager: "bench".into(),
            force: false,
            user: None,
        },
    )
    .expect("taint");
    let before = sim
        .state
        .store()
        .list(&Gr::pods(), None)
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "node-a")
        .count();
    let t = Instant::now();
    loop {
        alive("during the drain");
        let phase = agent.status().await.map(|st| st["drain"]["phase"].clone());
        if phase.is_ok_and(|p| p == "Drained") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the drain did not complete within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = sim
        .state
        .store()
        .list(&Gr::pods(), None)
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "node-a")
        .count();
    let drained = before - left;
    assert!(drained > 0, "the drain moved no pod");
    let (n2, _) = counts(&sim);
    let (cpu2, rss2) = proc_stat(pid);
    println!(
        "drain of {drained} pods in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    println!(
        "  requests (non-watch)           {:8}  ({:.2} per pod)",
        n2 - n1,
        (n2 - n1) as f64 / drained as f64
    );
    println!("  CPU time                       {:8.3} s", cpu2 - cpu1);
    println!(
        "  resident memory after          {:8.1} MiB",
        rss2 as f64 / 1024.0
    );
    let _ = child.kill();
    let _ = child.wait();
}
