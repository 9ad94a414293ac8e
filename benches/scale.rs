//! What each agent costs as the cluster grows, and how fast a fleet
//! reboots: N agents in one process, each with its own client and watches,
//! against the simulator (the default) or against the real control plane
//! (`MAINTD_SCALE_TARGET=real`: Kubernetes 1.37's API server, controller
//! manager and scheduler, etcd and KWOK, started by scripts/control-plane
//! for each N, with deploy/'s RBAC and node confinement policy and a token
//! bound to each agent's Node; see benches/scale/real.rs).
//!
//! The scenario, the same on both: N nodes with `MAINTD_SCALE_PODS` bare
//! pods each (default 3) and a DaemonSet (a pod a node).
//! (a) idle for `MAINTD_SCALE_IDLE_SECONDS` (default 60; the simulator
//!     sends a bookmark a minute, as an API server does);
//! (b) a rolling reboot: one NodeMaintenance selecting all N nodes moves to
//!     Drain with `maxConcurrentDrains` a tenth of N and
//!     `waitForReboot` (600 s), so a tenth of the nodes take their turn at
//!     once: a node takes a slot, is cordoned and drained, and keeps slot
//!     and cordon until it has rebooted; then it is uncordoned and the slot
//!     goes to the next node. The bench is the updater: it reboots a node
//!     (on the simulator NotReady for 30 s, then Ready with a new boot ID;
//!     on the real control plane a new boot ID after 30 s, KWOK keeping the
//!     node Ready) once its NodeDrain says Drained and its turn record
//!     holds its current boot ID. The rollout is over when every node lists
//!     the object as done and is schedulable.
//!     `MAINTD_SCALE_CORDON_AHEAD=M` (default 0, at most 1000) sets the
//!     object's `cordonAhead`: the next M nodes are cordoned before their
//!     turn. `MAINTD_SCALE_ORDERS=K` (default 1, at most 100) labels the
//!     nodes in K drain orders (`maintd.io/drain-order`, in blocks of
//!     N/K by name), taken one after the other.
//!     `MAINTD_SCALE_REBOOT_MS` (default 30000, 10 to 600000) sets
//!     how long a reboot takes: 30 s is a fast real reboot (most take
//!     minutes). A turn's fixed costs (the writes between one node's
//!     uncordon and the next node's cordon) weigh more against a shorter
//!     turn: 200 ms gives a quick run whose ratio says how much those
//!     costs are, not what a fleet would see.
//!
//!     `MAINTD_SCALE_API_PRIORITY=1` (real control plane only) installs
//!     deploy/ with its api-priority component, as an operator of a large
//!     fleet would: the agents' requests go to maintd's own FlowSchema and
//!     priority level instead of `workload-low`.
//!
//! On the simulator (N = 10, 100 and 1,000 unless `MAINTD_SCALE_NODES`
//! says otherwise), per N: requests per agent per minute (idle), requests,
//! watch events and bytes received per agent (idle and rolling reboot),
//! the largest NodeMaintenance and NodeDrain objects, the simulator's CPU
//! time and the agents', the process's memory before and with the agents;
//! of the rolling reboot, from a look at the Nodes every 50 ms: the
//! fleet's wall time (first node cordoned to last uncordoned) against its
//! ideal (every node's turn, added up, over the slots: a turn runs from
//! the node taking its slot, or its cordon if later, to its uncordon), the
//! most nodes unschedulable at once against slots + cordonAhead, each step
//! of a turn, and where the slots stood idle. Then the smallest N again
//! with three times the pods, to tell the requests per pod from the
//! constant, and the figures the design holds to, each with whether it
//! holds.
//!
//! On the real control plane (N = 100, 1,000 and 5,000 unless
//! `MAINTD_SCALE_NODES` says otherwise), per N the same per-agent figures,
//! counted at each agent's client, and what the control plane paid: the
//! API server's CPU and resident memory and etcd's writes and database
//! size, divided by N, idle (against the same cluster without agents,
//! measured first) and over the rolling reboot; the other processes' CPU;
//! the rollout's figures; and beside each, the simulator's for the same N
//! and scenario (`MAINTD_SCALE_COMPARE=none` leaves it out). Then the
//! verdicts of issue 40. An N that does not fit this machine is reported
//! with where it stopped, and the verdicts use the largest N that did.
//!
//! Both panic, with no figures, if the rollout does not finish (1200 s on
//! the simulator, 1800 s on the real control plane, 1.8 s a node past
//! 1,000 nodes), if no node reboots or finishes its turn for 600 s
//! (plus twice the reboot's time) on the real control plane, naming what
//! the agents' NodeDrains say most often, if a node was never
//! seen cordoned, if a node was cordoned before every node of a lower
//! drain order was back in scheduling, if more nodes were unschedulable at
//! once than slots + cordonAhead, or if the wall time beats its ideal.
//! Every N runs in a process of its own. Run with `cargo bench --bench
//! scale`, or `MAINTD_SCALE_TARGET=real cargo bench --bench scale`.

#[path = "real/cluster.rs"]
mod cluster;
#[path = "scale/compare.rs"]
mod compare;
#[path = "real/counting.rs"]
mod counting;
#[path = "scale/mirror.rs"]
mod mirror;
#[path = "scale/real.rs"]
mod real;
#[path = "scale/report.rs"]
mod report;
#[path = "scale/rollout.rs"]
mod rollout;
#[path = "scale/scenario.rs"]
mod scenario;
#[path = "scale/sim.rs"]
mod sim;
#[path = "scale/usage.rs"]
mod usage;
#[path = "scale/watch.rs"]
mod watch;

use std::collections::VecDeque;
use std::io::BufRead;

/// How long a reboot takes unless `MAINTD_SCALE_REBOOT_MS` says otherwise:
/// a fast real reboot.
pub const DEFAULT_REBOOT_MS: u64 = 30_000;

/// What every N runs with, from the environment.
pub struct Settings {
    pub pods: usize,
    pub idle_secs: u64,
    pub ahead: usize,
    pub orders: usize,
    pub reboot_ms: u64,
    /// deploy/api-priority/ installed with deploy/ (real control plane).
    pub api_priority: bool,
}

/// A number from the environment within `range`, or `default`; panics
/// with `what` when it is set but not such a number.
fn env_number<T>(name: &str, range: std::ops::RangeInclusive<T>, default: T, what: &str) -> T
where
    T: std::str::FromStr + PartialOrd,
{
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .ok()
            .filter(|x| range.contains(x))
            .unwrap_or_else(|| panic!("{name}: {what}")),
        Err(_) => default,
    }
}

impl Settings {
    fn from_env() -> Settings {
        Settings {
            pods: env_number("MAINTD_SCALE_PODS", 0..=100, 3, "pods a node, 0 to 100"),
            idle_secs: env_number(
                "MAINTD_SCALE_IDLE_SECONDS",
                1..=3600,
                60,
                "seconds, 1 to 3600",
            ),
            ahead: env_number(
                "MAINTD_SCALE_CORDON_AHEAD",
                0..=1000,
                0,
                "a number of nodes, 0 to 1000",
            ),
            orders: env_number(
                "MAINTD_SCALE_ORDERS",
                1..=100,
                1,
                "a number of drain orders, 1 to 100",
            ),
            reboot_ms: env_number(
                "MAINTD_SCALE_REBOOT_MS",
                10..=600_000,
                DEFAULT_REBOOT_MS,
                "milliseconds, 10 to 600000",
            ),
            api_priority: env_number("MAINTD_SCALE_API_PRIORITY", 0..=1, 0, "0 or 1") == 1,
        }
    }
}

/// One N in a process of its own, so its memory and CPU figures are its
/// own: the bench runs itself with `MAINTD_SCALE_ONE=TARGET,N,PODS,IDLE`
/// and reads the row it prints last. Err: the last words of a run that
/// printed no row (where it stopped).
fn run_apart<R: serde::de::DeserializeOwned>(
    target: &str,
    n: usize,
    pods: usize,
    idle: u64,
) -> Result<R, String> {
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut child = std::process::Command::new(exe)
        .env("MAINTD_SCALE_ONE", format!("{target},{n},{pods},{idle}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the bench runs itself");
    // Its progress goes on to our stderr as it comes; the last lines are
    // kept to say where a run stopped.
    let stderr = child.stderr.take().expect("the child's stderr");
    let tail = std::thread::spawn(move || {
        let mut last: VecDeque<String> = VecDeque::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("{line}");
            last.push_back(line);
            if last.len() > 12 {
                last.pop_front();
            }
        }
        last
    });
    let out = child.wait_with_output().expect("the bench's child ends");
    let last = tail.join().unwrap_or_default();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("ROW ")
                .and_then(|j| serde_json::from_str(j).ok())
        })
        .ok_or_else(|| {
            let words: Vec<String> = last.into_iter().filter(|l| !l.trim().is_empty()).collect();
            format!(
                "{target} N={n} printed no row ({}); its last words:\n{}",
                out.status,
                words.join("\n")
            )
        })
}

/// The child's part: one N, its row printed as JSON.
fn run_one(spec: &str) {
    let v: Vec<&str> = spec.split(',').collect();
    let [target, n, pods, idle] = v[..] else {
        panic!("MAINTD_SCALE_ONE={spec}: want TARGET,N,PODS,IDLE");
    };
    let (Ok(n), Ok(pods), Ok(idle_secs)) = (n.parse(), pods.parse(), idle.parse()) else {
        panic!("MAINTD_SCALE_ONE={spec}: want TARGET,N,PODS,IDLE");
    };
    let settings = Settings {
        pods,
        idle_secs,
        ..Settings::from_env()
    };
    let runtime = |threads, name: &str| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let agents = runtime(2, real::AGENT_THREAD);
    let row = if target == "real" {
        let bench = runtime(1, "bench");
        serde_json::to_string(&real::run(&bench, &agents, n, &settings))
    } else {
        let sim_rt = runtime(1, sim::SIM_THREAD);
        serde_json::to_string(&sim::run(&sim_rt, &agents, n, &settings))
    };
    println!("ROW {}", row.expect("a row"));
}

fn nodes(default: &str) -> Vec<usize> {
    std::env::var("MAINTD_SCALE_NODES")
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn main_sim(settings: &Settings) {
    let mut rows: Vec<report::Row> = Vec::new();
    for n in nodes("10,100,1000") {
        let row: report::Row = run_apart("sim", n, settings.pods, settings.idle_secs)
            .unwrap_or_else(|e| panic!("{e}"));
        row.rollout.check(n);
        report::print_row(&row);
        rows.push(row);
    }
    let Some(first) = rows.first() else {
        return;
    };
    // The smallest N again, with three times the pods: what a pod adds.
    let more: report::Row = run_apart(
        "sim",
        first.n,
        settings.pods * 3,
        settings.idle_secs.min(10),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    more.rollout.check(more.n);
    report::print_row(&more);
    report::sim_verdicts(&rows, &more);
}

/// The largest N, in steps of 500, whose agents' connections fit in 85 %
/// of the open files a process may hold here, from the sockets per agent
/// `row` measured (a connection per watch, and a few more).
fn fits_open_files(row: &real::RealRow) -> Option<usize> {
    let limit = cluster::open_files_limit("/proc/self/limits")? as f64;
    let per_agent = row.agent_sockets as f64 / row.n as f64;
    let fit = (0.85 * limit / per_agent.max(1.0) / 500.0).floor() as usize * 500;
    (fit > 0).then_some(fit)
}

fn main_real(settings: &Settings) {
    let compare = std::env::var("MAINTD_SCALE_COMPARE").map_or(true, |v| v != "none");
    let mut rows: Vec<real::RealRow> = Vec::new();
    let mut stopped: Vec<(usize, String)> = Vec::new();
    let mut queue: VecDeque<usize> = nodes("100,1000,5000").into();
    while let Some(n) = queue.pop_front() {
        eprintln!(
            "N={n} on the real control plane{}; load average {}",
            if settings.api_priority {
                ", deploy/ with deploy/api-priority/"
            } else {
                ""
            },
            cluster::load_average()
        );
        let row: real::RealRow = match run_apart("real", n, settings.pods, settings.idle_secs) {
            Ok(row) => row,
            Err(why) => {
                eprintln!("{why}");
                // Out of open files: the largest N that fits them, once.
                let fit = rows.last().and_then(fits_open_files);
                if why.contains("open files")
                    && let Some(fit) = fit.filter(|f| *f < n && rows.iter().all(|r| r.n < *f))
                {
                    eprintln!(
                        "N={n} does not fit; measuring N={fit}, the most whose connections fit"
                    );
                    queue.push_front(fit);
                }
                stopped.push((n, why));
                continue;
            }
        };
        row.rollout.check(n);
        let sim: Option<report::Row> = compare.then(|| {
            eprintln!("N={n} on the simulator, for comparison");
            run_apart("sim", n, settings.pods, settings.idle_secs).unwrap_or_else(|e| panic!("{e}"))
        });
        compare::print_real(&row, sim.as_ref());
        rows.push(row);
    }
    assert!(
        !rows.is_empty(),
        "no N ran to the end on the real control plane: {stopped:?}"
    );
    compare::real_verdicts(&rows, &stopped);
}

fn main() {
    if let Ok(spec) = std::env::var("MAINTD_SCALE_ONE") {
        run_one(&spec);
        return;
    }
    let settings = Settings::from_env();
    let target = std::env::var("MAINTD_SCALE_TARGET").unwrap_or_else(|_| "sim".into());
    println!("load average at start: {}", cluster::load_average());
    match target.as_str() {
        "real" => main_real(&settings),
        "sim" => main_sim(&settings),
        other => panic!("MAINTD_SCALE_TARGET={other}: want sim or real"),
    }
    println!("load average at end: {}", cluster::load_average());
}
