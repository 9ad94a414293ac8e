//! The agent's footprint: `maintd run` as a process watching node-a of the
//! realistic scenario (110 pods). Idle for a while (MAINTD_FOOTPRINT_SECONDS,
//! default 60): resident memory, CPU time, and the API requests it sent
//! beyond its watches (the goal is none). Then a drain: requests per pod
//! drained. Run with `cargo bench --bench footprint`. The bench fails if
//! the agent exits, never lists its node, or does not finish the drain:
//! numbers of a dead agent are not a footprint.

use std::collections::BTreeMap;
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

/// Of the resident memory, what is the process' own (heap, stacks) and
/// what is its binary's pages mapped from disk, in KiB.
fn rss_split(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("RssFile:"))
}

/// "POST pods/eviction", "PATCH nodedrains/status": a request's method and
/// what it acts on, without names.
fn request_kind(method: &str, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // /api/v1/... or /apis/group/version/...
    let rest = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        _ => parts.get(3..).unwrap_or_default(),
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let what = match rest {
        [kind] | [kind, _] => kind.to_string(),
        [kind, _, sub, ..] => format!("{kind}/{sub}"),
        [] => path.to_string(),
    };
    format!("{method} {what}")
}

fn counts(sim: &SimCluster) -> (usize, usize) {
    let reqs = sim.state.audit.requests();
    (
        reqs.iter().filter(|r| !r.watch).count(),
        reqs.iter().filter(|r| r.watch).count(),
    )
}

/// The goals (issue "A lighter agent"): an idle agent of the image's
/// binary on the 110-pod node, and at its highest while it drains; the
/// drain's requests per pod.
const IDLE_GOAL_MIB: f64 = 10.0;
const DRAIN_GOAL_MIB: f64 = 14.0;
const REQUESTS_GOAL: f64 = 1.3;

/// The binary the image ships (`cargo build --profile dist
/// --no-default-features`): MAINTD_FOOTPRINT_BINARY, or built here.
fn image_binary() -> String {
    if let Ok(b) = std::env::var("MAINTD_FOOTPRINT_BINARY") {
        return b;
    }
    let target = Path::new(env!("CARGO_BIN_EXE_maintd"))
        .parent()
        .and_then(Path::parent)
        .expect("the target directory")
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    println!(
        "building the image's binary as scripts/build-image does: cargo build --profile dist --no-default-features --bin maintd, with MAINTD_IDLE_FUNCTIONS=scripts/idle-functions.txt"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new(cargo)
        .args([
            "build",
            "--profile",
            "dist",
            "--locked",
            "--no-default-features",
            "--bin",
            "maintd",
        ])
        .current_dir(root)
        .env("CARGO_TARGET_DIR", &target)
        .env(
            "MAINTD_IDLE_FUNCTIONS",
            root.join("scripts/idle-functions.txt"),
        )
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "the image's binary did not build");
    target.join("dist/maintd").to_string_lossy().into_owned()
}

/// One agent process on node-a of a fresh realistic scenario.
struct Run {
    sim: SimCluster,
    child: std::process::Child,
    pid: u32,
    agent: maintd::cli::LocalClient,
    listen: String,
    log: tempfile::NamedTempFile,
    _kubeconfig: tempfile::NamedTempFile,
}

/// What an idle agent holds, in KiB, and what it did.
struct Idle {
    rss: u64,
    anon: u64,
    file: u64,
    cpu: f64,
    window: f64,
    startup_requests: usize,
    startup_watches: usize,
    idle_requests: usize,
    idle_watches: usize,
}

impl Run {
    async fn start(binary: &str) -> Run {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/realistic.yaml");
        let sc = scenario::load(&path).expect("scenario");
        let sim = SimCluster::start_with_scenario(SimConfig::default(), &sc)
            .await
            .expect("sim");
        sim.wait_settled(Duration::from_secs(60))
            .await
            .expect("settled");
        // The CRDs are installed, as deploy/ does: NodeMaintenance and the
        // NodeDrain each agent writes its status to.
        let crds = sim.state.store().resource(&Gr::crds()).expect("crds");
        for crd in [maintd::api::crd(), maintd::api::nodedrain_crd()] {
            let crd = serde_json::to_value(crd.expect("crd")).expect("crd json");
            verbs::create(&sim.state, &crds, None, crd, &admin(), false).expect("crd created");
        }
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            kubeconfig.path(),
            maintd::testbed::agent_kubeconfig(&sim, "node-a"),
        )
        .unwrap();
        let log = tempfile::NamedTempFile::new().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new(binary)
            .args(["run", "--node", "node-a", "--listen", &listen])
            .args(["--listen-local", "", "--inhibit-shutdown", "false"])
            .arg("--kubeconfig")
            .arg(kubeconfig.path())
            .arg("--static-pod-dir")
            .arg(sim.static_pod_dir("node-a").unwrap())
            .env("MAINTD_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log.reopen().expect("the log file"))
            .spawn()
            .expect("maintd starts");
        let pid = child.id();
        let agent = maintd::cli::LocalClient::new(&listen);
        let mut run = Run {
            sim,
            child,
            pid,
            agent,
            listen,
            log,
            _kubeconfig: kubeconfig,
        };
        let t = Instant::now();
        loop {
            run.alive("while starting");
            let ready = run.agent.status().await.is_ok_and(|st| {
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
        run
    }

    /// What is measured must be alive: an agent that exited fails the
    /// bench with its log.
    fn alive(&mut self, what: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            panic!("the agent exited ({status}) {what}; its log:\n{log}");
        }
    }

    /// `seconds` idle, probed as the DaemonSet's kubelet probes it
    /// (readiness every 10 s, liveness every 30 s: each probe runs code an
    /// idle agent would otherwise not).
    async fn idle(&mut self, seconds: u64) -> Idle {
        let (n0, w0) = counts(&self.sim);
        let (cpu0, _) = proc_stat(self.pid);
        let start = Instant::now();
        let mut tick = 0u64;
        while start.elapsed() < Duration::from_secs(seconds) {
            if tick.is_multiple_of(10) {
                probe(&self.listen, "/readyz").await;
            }
            if tick.is_multiple_of(30) {
                probe(&self.listen, "/healthz").await;
            }
            tick += 1;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let (n1, w1) = counts(&self.sim);
        self.alive("while idle");
        let (cpu1, rss) = proc_stat(self.pid);
        let (anon, file) = rss_split(self.pid);
        Idle {
            rss,
            anon,
            file,
            cpu: cpu1 - cpu0,
            window: start.elapsed().as_secs_f64(),
            startup_requests: n0,
            startup_watches: w0,
            idle_requests: n1 - n0,
            idle_watches: w1 - w0,
        }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubelet's HTTP probe: GET on a new connection, the answer read to
/// its end (at most 5 s).
async fn probe(addr: &str, path: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let once = async {
        let mut c = tokio::net::TcpStream::connect(addr).await?;
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.37\r\nConnection: close\r\n\r\n").as_bytes())
            .await?;
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), once).await;
}

fn admin() -> Writer {
    Writer {
        manager: "bench".into(),
        force: false,
        user: None,
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_idle(label: &str, i: &Idle) {
    println!(
        "  {label:<30} {:8.1} MiB  ({:.1} MiB heap and stacks, {:.1} MiB of the binary's and libraries' pages)",
        mib(i.rss),
        mib(i.anon),
        mib(i.file)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let idle: u64 = std::env::var("MAINTD_FOOTPRINT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let image = image_binary();
    let release = env!("CARGO_BIN_EXE_maintd");
    println!("image's binary: {image}\nrelease binary (with the simulator): {release}");

    // The release binary idle, beside the image's.
    let mut run = Run::start(release).await;
    let rel = run.idle(idle).await;
    run.stop();
    let mut run = Run::start(&image).await;
    let img = run.idle(idle).await;
    println!(
        "idle agent, node with 110 pods, {:.0} s, probed as the DaemonSet's kubelet does",
        img.window
    );
    print_idle("resident memory, image", &img);
    print_idle("resident memory, release", &rel);
    println!(
        "  CPU time                       {:8.3} s  ({:.3} % of one core)",
        img.cpu,
        100.0 * img.cpu / img.window
    );
    println!(
        "  start-up requests (lists)      {:8}",
        img.startup_requests
    );
    println!("  watches opened at start        {:8}", img.startup_watches);
    println!("  requests while idle, non-watch {:8}", img.idle_requests);
    println!("  watch (re)connects while idle  {:8}", img.idle_watches);

    let (per_pod, drain_peak) = drain(&mut run).await;
    status_writer(&mut run).await;
    run.stop();

    let verdicts = [
        (
            format!(
                "idle, image's binary: {:.1} MiB (goal ≤ {IDLE_GOAL_MIB})",
                mib(img.rss)
            ),
            mib(img.rss) <= IDLE_GOAL_MIB,
        ),
        (
            format!(
                "while draining, highest: {:.1} MiB (goal ≤ {DRAIN_GOAL_MIB})",
                mib(drain_peak)
            ),
            mib(drain_peak) <= DRAIN_GOAL_MIB,
        ),
        (
            format!("requests per pod drained: {per_pod:.2} (goal ≤ {REQUESTS_GOAL})"),
            per_pod <= REQUESTS_GOAL,
        ),
    ];
    println!("goals");
    for (what, held) in &verdicts {
        println!("  {} {what}", if *held { "holds:" } else { "MISSED:" });
    }
    if verdicts.iter().any(|(_, held)| !held) {
        std::process::exit(1);
    }
}

/// A drain, started the way an admin would: the drain taint on the node.
/// Returns the requests per pod drained and the highest resident memory
/// seen while it ran (KiB).
async fn drain(run: &mut Run) -> (f64, u64) {
    let sim = &run.sim;
    let (n1, w1) = counts(sim);
    let (cpu1, _) = proc_stat(run.pid);
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
        &admin(),
    )
    .expect("taint");
    let on_node = |sim: &SimCluster| {
        sim.state
            .store()
            .list(&Gr::pods(), None)
            .iter()
            .filter(|p| p["spec"]["nodeName"] == "node-a")
            .count()
    };
    let before = on_node(sim);
    let t = Instant::now();
    let mut peak = 0;
    loop {
        run.alive("during the drain");
        peak = peak.max(proc_stat(run.pid).1);
        let phase = run
            .agent
            .status()
            .await
            .map(|st| st["drain"]["phase"].clone());
        if phase.is_ok_and(|p| p == "Drained") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the drain did not complete within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sim = &run.sim;
    let drained = before - on_node(sim);
    assert!(drained > 0, "the drain moved no pod");
    let (n2, _) = counts(sim);
    let (cpu2, rss2) = proc_stat(run.pid);
    let per_pod = (n2 - n1) as f64 / drained as f64;
    println!(
        "drain of {drained} pods in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    println!(
        "  requests (non-watch)           {:8}  ({per_pod:.2} per pod)",
        n2 - n1
    );
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    // Each kind of request by the answers it got: a refused eviction is
    // a request the agent could have saved.
    let mut answers: BTreeMap<String, BTreeMap<u16, usize>> = BTreeMap::new();
    for r in sim
        .state
        .audit
        .requests()
        .iter()
        .skip(n1 + w1)
        .filter(|r| !r.watch)
    {
        let kind = request_kind(&r.method, &r.path);
        *answers
            .entry(kind.clone())
            .or_default()
            .entry(r.code)
            .or_default() += 1;
        *by_kind.entry(kind).or_default() += 1;
    }
    let mut by_kind: Vec<(String, usize)> = by_kind.into_iter().collect();
    by_kind.sort_by_key(|k| std::cmp::Reverse(k.1));
    for (kind, n) in by_kind {
        let codes: Vec<String> = answers[&kind]
            .iter()
            .map(|(code, n)| format!("{n}×{code}"))
            .collect();
        println!(
            "    {kind:<44} {n:6}  ({:.2} per pod; {})",
            n as f64 / drained as f64,
            codes.join(", ")
        );
    }
    // The Events the drain wrote, by what they are about and why.
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    for e in sim.state.store().list(&Gr::new("", "events"), None) {
        let about = e["involvedObject"]["kind"].as_str().unwrap_or("?");
        let reason = e["reason"].as_str().unwrap_or("?");
        *written.entry(format!("{about} {reason}")).or_default() += 1;
    }
    let written: Vec<String> = written.iter().map(|(k, n)| format!("{n}× {k}")).collect();
    println!("  Events written: {}", written.join(", "));
    println!("  CPU time                       {:8.3} s", cpu2 - cpu1);
    println!(
        "  resident memory, highest       {:8.1} MiB",
        mib(peak.max(rss2))
    );
    println!("  resident memory after          {:8.1} MiB", mib(rss2));
    (per_pod, peak.max(rss2))
}

/// How many NodeDrain objects the status writer holds in the bench: one per
/// node of a 5,000-node cluster.
const FLEET: usize = 5_000;

/// The agent as the holder of the status-writer Lease in a 5,000-node
/// cluster: it watches every NodeDrain. Its resident memory once it holds
/// them, at its highest while it lists them all again after an API server
/// restart, and after. The goal is 64 MiB (half the pod's limit).
async fn status_writer(run: &mut Run) {
    let admin = Writer {
        manager: "maintd".into(),
        force: false,
        user: None,
    };
    let pid = run.pid;
    // A NodeMaintenance makes an agent take the Lease; this one selects no
    // node, so nothing else changes.
    let nms = run
        .sim
        .state
        .store()
        .resource(&Gr::new("maintd.io", "nodemaintenances"))
        .expect("the CRD is installed");
    let nm = json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": "fleet"},
        "spec": {"nodeSelector": {"matchLabels": {"pool": "none"}}, "stage": "Drain", "maxConcurrentDrains": 10}});
    verbs::create(&run.sim.state, &nms, None, nm, &admin, false).expect("NodeMaintenance");
    let (_, rss_before) = proc_stat(pid);
    let drains = run
        .sim
        .state
        .store()
        .resource(&Gr::new("maintd.io", "nodedrains"))
        .expect("the CRD is installed");
    for i in 0..FLEET {
        let node = format!("fleet-{i:05}");
        let nd = json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain",
            "metadata": {"name": node, "labels": {"maintd.io/node": node}},
            "spec": {},
            "status": {
                "nodeName": node, "phase": "Blocked", "stage": "3", "podsTotal": 110,
                "podsRemaining": 4, "progress": "106/110", "blockersTotal": 1,
                "blockers": [{"namespace": "shop", "pod": format!("db-{i}"),
                    "reason": "The disruption budget db needs 2 healthy pods and has 2 currently"}],
                "triggers": ["NodeMaintenance fleet (stage Drain)"], "maintenances": ["fleet"],
                "lockHeld": true, "startedAt": "2026-11-25T10:00:00Z",
                "updatedAt": "2026-11-25T10:05:00Z"}});
        verbs::create(&run.sim.state, &drains, None, nd, &admin, true).expect("NodeDrain");
    }
    // The writer did the work: the aggregate counts every node.
    let t = Instant::now();
    loop {
        run.alive("while the status writer takes in the NodeDrain objects");
        let blocked = run
            .sim
            .state
            .store()
            .get(&Gr::new("maintd.io", "nodemaintenances"), "", "fleet")
            .map(|nm| nm["status"]["blockedNodes"].as_u64() == Some(FLEET as u64));
        if blocked == Some(true) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "the status writer did not aggregate {FLEET} NodeDrain objects within 180 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holding = settle(run).await;
    // An API server restart: every watch ends and must list again.
    run.sim.state.restart();
    let mut peak = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        run.alive("while the status writer lists again");
        peak = peak.max(proc_stat(pid).1);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = settle(run).await;
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("status writer with {FLEET} NodeDrain objects");
    println!(
        "  resident memory before         {:8.1} MiB",
        mib(rss_before)
    );
    println!("  holding them                   {:8.1} MiB", mib(holding));
    println!(
        "  highest during a relist        {:8.1} MiB  (goal 64)",
        mib(peak.max(holding))
    );
    println!("  after the relist               {:8.1} MiB", mib(after));
}

/// The agent's resident memory once it has stopped growing (3 s without
/// growth, at most 60 s).
async fn settle(run: &mut Run) -> u64 {
    let pid = run.pid;
    let t = Instant::now();
    let mut last = proc_stat(pid).1;
    let mut steady_since = Instant::now();
    while t.elapsed() < Duration::from_secs(60) && steady_since.elapsed() < Duration::from_secs(3) {
        run.alive("while taking in the NodeDrain objects");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = proc_stat(pid).1;
        if now > last {
            last = now;
            steady_since = Instant::now();
        }
    }
    last
}
