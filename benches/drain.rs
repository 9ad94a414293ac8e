//! Drain efficiency on the realistic scenario (110 pods on node-a).
//!
//! Prints a lower bound of the drain time, the time maintd takes, their
//! ratio, maintd's extra time per stage, how soon maintd evicted after a
//! budget's status let it, and, on a fresh cluster with the same pods, the
//! time `kubectl drain --ignore-daemonsets --delete-emptydir-data` takes
//! for the pods it drains, against maintd's time for the same pods.
//!
//! The bound follows the simulator's rules, stage by stage: a pod goes its
//! shutdown time after its eviction; a static pod goes on the kubelet's
//! first look at its directory at least its shutdown time after it noticed
//! the manifest gone; pods a PodDisruptionBudget paces go in rounds of
//! what the budget allows, and a round can start only on a recompute of
//! the budget's status (by the disruption controller, which lags the
//! changes it reacts to) that sees the last round's replacements Ready.
//! Two recomputes of a namespace are at least the lag and one controller
//! step apart, because the controller's own status write is a change it
//! notices only at its next step; so after the recompute that let a round
//! go, the next that can see its replacements Ready is the first of those
//! steps that comes after their start-up.
//! The disruption controller runs with the simulator's default lag (300 ms),
//! and then with a busy cluster's 2 s. The bench fails if maintd ever beats
//! the bound (the model would be wrong) or if the drain does not complete.
//! Run with `cargo bench --bench drain`. With `MAINTD_DRAIN_TARGET=real`,
//! the comparison with `kubectl drain` on the real control plane instead
//! (benches/drain/real.rs).

// The real control plane's parts, shared with the scale bench.
#[allow(dead_code)]
#[path = "real/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "real/counting.rs"]
mod counting;
#[path = "drain/real.rs"]
mod real;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::plan::{self, PlanOptions, PodInfo, PodType};
use maintd::drain::progress::EventKind;
use maintd_sim::controllers::CONTROLLER_STEP;
use maintd_sim::eviction::budget_status;
use maintd_sim::resources::Gr;
use maintd_sim::{SimCluster, SimConfig, meta, scenario};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

async fn cluster(lag: Duration) -> SimCluster {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/realistic.yaml");
    let sc = scenario::load(&path).expect("scenario");
    let config = SimConfig {
        disruption_lag: lag,
        ..SimConfig::default()
    };
    let sim = SimCluster::start_with_scenario(config, &sc)
        .await
        .expect("sim");
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("settled");
    sim
}

fn secs(obj: &Value, key: &str) -> f64 {
    meta::seconds_annotation(obj, key).unwrap_or(0.0)
}

/// How much later than the rules say a recompute may come (a busy
/// runtime). A recompute the rules put before the replacements are Ready
/// may see them if it comes this late, so the bound never counts on one
/// missing them by less.
const LATE: f64 = 0.1;

/// The least time from the recompute of a budget's status that let one
/// round of its pods go to the recompute that lets the next round go: the
/// first recompute after it that can see the round's replacements Ready.
/// Recomputes after it come at least `lag + step` apart, the first exactly
/// then (its status write is a change the controller notices at its next
/// step).
fn between_rounds(startup: f64, lag: f64, step: f64) -> f64 {
    let spacing = lag + step;
    let mut k = 1.0;
    while k * spacing + LATE < startup {
        k += 1.0;
    }
    (k * spacing).max(startup)
}

/// The least time a budget-paced group of `members` pods takes when the
/// budget allows `allowed` at a time. The first round goes at once; the
/// recompute that lets the second go comes at the earliest when the first
/// round's replacements are Ready (a recompute already due for an earlier
/// change may come right then); each later round waits
/// [`between_rounds`]; the last round's pods then shut down.
fn budget_paced(
    members: f64,
    allowed: f64,
    startup: f64,
    shutdown: f64,
    lag: f64,
    step: f64,
) -> f64 {
    let rounds = (members / allowed.max(1.0)).ceil();
    if rounds <= 1.0 {
        return shutdown;
    }
    startup + (rounds - 2.0) * between_rounds(startup, lag, step) + shutdown
}

/// The least time a static pod takes to go once its manifest is moved out:
/// the kubelet notices on a look at its directory and removes the mirror
/// pod on the first look at least the shutdown time after that (its looks
/// are a poll apart).
fn static_stop(shutdown: f64, poll: f64) -> f64 {
    (shutdown / poll - 1e-9).ceil().max(0.0) * poll
}

/// A lower bound of the default plan's time on node-a, by the simulator's
/// rules (see the top of this file): the whole plan, the ordinary pods
/// alone, and each stage.
fn ideal(sim: &SimCluster) -> (f64, f64, Vec<(String, f64)>) {
    let lag = sim.state.config.disruption_lag.as_secs_f64();
    let poll = sim.state.config.static_pod_poll.as_secs_f64();
    let step = CONTROLLER_STEP.as_secs_f64();
    let store = sim.state.store();
    let pods: Vec<Value> = store
        .list(&Gr::pods(), None)
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "node-a")
        .map(|p| (**p).clone())
        .collect();
    let infos: Vec<PodInfo> = pods.iter().map(PodInfo::from_json).collect();
    let plan = plan::build_plan(&infos, None, &PlanOptions::default());
    let by_uid: BTreeMap<&str, &Value> = pods.iter().map(|p| (meta::uid(p), p)).collect();
    let (mut total, mut default_only) = (0.0, 0.0);
    let mut per_stage = Vec::new();
    let mut after_static = false;
    for stage in &plan.stages {
        // Group the stage's pods by budget; pods without one go at once.
        let mut groups: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
        for p in &stage.pods {
            let pod = by_uid[p.uid.as_str()];
            let pdb = store
                .list(&Gr::pdbs(), Some(meta::namespace(pod)))
                .into_iter()
                .find(|b| maintd_sim::select::selector_object_matches(&b["spec"]["selector"], pod));
            let key = pdb
                .map(|b| format!("{}/{}", meta::namespace(&b), meta::name(&b)))
                .unwrap_or_else(|| format!("solo/{}", p.uid));
            groups.entry(key).or_default().push(pod);
        }
        let mut stage_time: f64 = 0.0;
        for (key, members) in groups {
            let slowest = |key: &str| members.iter().map(|p| secs(p, key)).fold(0.0, f64::max);
            let shutdown = slowest("sim.maintd.io/shutdown-seconds");
            let time = if stage.pod_type == PodType::Static {
                // After a static stage, this one starts just after the
                // kubelet's look that removed the last mirror pod: the next
                // look is a whole poll away.
                static_stop(shutdown, poll) + if after_static { poll } else { 0.0 }
            } else if let Some((ns, pdb_name)) = key.split_once('/').filter(|(ns, _)| *ns != "solo")
            {
                // What the budget allows now, by the simulator's own rule
                // (its status may lag the pods that became Ready).
                let allowed = store
                    .get(&Gr::pdbs(), ns, pdb_name)
                    .and_then(|b| budget_status(&store, &b).ok())
                    .map_or(1, |(st, _)| st.disruptions_allowed)
                    as f64;
                let startup = slowest("sim.maintd.io/startup-seconds");
                budget_paced(members.len() as f64, allowed, startup, shutdown, lag, step)
            } else {
                shutdown
            };
            stage_time = stage_time.max(time);
        }
        after_static = stage.pod_type == PodType::Static;
        total += stage_time;
        per_stage.push((stage.label.clone(), stage_time));
        if stage.pod_type == PodType::Default {
            default_only += stage_time;
        }
    }
    (total, default_only, per_stage)
}

async fn taint(sim: &SimCluster) {
    let req = http::Request::patch("/api/v1/nodes/node-a")
        .header("content-type", "application/strategic-merge-patch+json")
        .body(serde_json::to_vec(&json!({"spec": {"taints": [{"key": "maintd.io/drain", "value": "bench", "effect": "NoSchedule"}]}})).unwrap())
        .unwrap();
    let _: Value = sim.client().request(req).await.expect("taint");
}

/// What one drain by maintd took.
struct Run {
    whole: Duration,
    /// Until the first stage of DaemonSet or static pods started.
    default_done: Duration,
    stage_times: Vec<f64>,
    reactions: Reactions,
}

/// How soon maintd evicted after a budget's status let it: each time a
/// budget's status went from no disruption allowed to some, the time until
/// the next of its pods on node-a was evicted.
#[derive(Default)]
struct Reactions {
    count: u32,
    total: Duration,
    longest: Duration,
}

/// Follows the store's changes from now until `stop`: budgets opening, and
/// node-a's pods being evicted.
fn follow_reactions(sim: &SimCluster, stop: CancellationToken) -> JoinHandle<Reactions> {
    let mut rx = sim.state.store().subscribe();
    let budgets: Vec<Value> = sim
        .state
        .store()
        .list(&Gr::pdbs(), None)
        .iter()
        .map(|b| (**b).clone())
        .collect();
    tokio::spawn(async move {
        let mut opened: BTreeMap<String, Instant> = BTreeMap::new();
        let mut gone: BTreeSet<String> = BTreeSet::new();
        // Budgets of which a pod went already: before that, maintd is
        // not at their stage yet, and a budget opening is no cue.
        let mut begun: BTreeSet<String> = BTreeSet::new();
        let mut seen = Reactions::default();
        let key = |o: &Value| format!("{}/{}", meta::namespace(o), meta::name(o));
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = stop.cancelled() => return seen,
            };
            let Ok(ev) = ev else {
                // A lagging follower would measure wrong: say so.
                panic!("the bench fell behind the store's changes");
            };
            let now = Instant::now();
            let obj = &ev.object;
            let allowed = |o: &Value| o["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
            if ev.gr == Gr::pdbs() {
                let before = ev.prev.as_deref().map_or(0, allowed);
                if allowed(obj) > 0 && before == 0 && begun.contains(&key(obj)) {
                    opened.insert(key(obj), now);
                } else if allowed(obj) == 0 {
                    opened.remove(&key(obj));
                }
            } else if ev.gr == Gr::pods()
                && obj["spec"]["nodeName"] == "node-a"
                && meta::is_terminating(obj)
                && gone.insert(meta::uid(obj).to_string())
            {
                let Some(budget) = budgets.iter().find(|b| {
                    meta::namespace(b) == meta::namespace(obj)
                        && maintd_sim::select::selector_object_matches(&b["spec"]["selector"], obj)
                }) else {
                    continue;
                };
                begun.insert(key(budget));
                if let Some(at) = opened.remove(&key(budget)) {
                    let took = now - at;
                    seen.count += 1;
                    seen.total += took;
                    seen.longest = seen.longest.max(took);
                }
            }
        }
    })
}

/// maintd drains node-a, whole plan, on a fresh cluster.
async fn maintd_drain(sim: &SimCluster) -> Run {
    let mut stage_times: Vec<f64> = Vec::new();
    let mut stage_start = Instant::now();
    let agent = Agent::new(
        Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap()),
        sim.client_with(false),
    );
    let mut events = agent.progress().subscribe();
    let stop = CancellationToken::new();
    let following = follow_reactions(sim, stop.clone());
    let running = tokio::spawn(agent.run(stop.clone()));
    let start = Instant::now();
    taint(sim).await;
    let mut default_done = Duration::ZERO;
    loop {
        // A drain that does not finish is a failed measurement, not a
        // slow one.
        let ev = tokio::time::timeout(DRAIN_LIMIT, events.recv()).await;
        let Ok(Ok(ev)) = ev else {
            panic!(
                "maintd's drain did not complete within {} s (the agent {}): nothing to measure",
                DRAIN_LIMIT.as_secs(),
                if running.is_finished() {
                    "stopped"
                } else {
                    "still runs"
                }
            );
        };
        if ev.event == EventKind::StageStarted
            && ev.pod_type != Some(PodType::Default)
            && default_done.is_zero()
        {
            default_done = start.elapsed();
        }
        if ev.event == EventKind::StageStarted {
            stage_start = Instant::now();
        }
        if ev.event == EventKind::StageCompleted {
            stage_times.push(stage_start.elapsed().as_secs_f64());
        }
        if ev.event == EventKind::DrainCompleted {
            break;
        }
    }
    let whole = start.elapsed();
    stop.cancel();
    let reactions = following.await.expect("the reaction follower");
    Run {
        whole,
        default_done,
        stage_times,
        reactions,
    }
}

/// Far past any drain of this scenario, even with a busy controller.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

fn print_reactions(r: &Reactions) {
    assert!(
        r.count > 0,
        "no budget let a waiting pod go during the drain: the budget-paced stages were not measured"
    );
    println!(
        "  a budget let a waiting pod go {} times; maintd evicted it {:.1} ms later on average, {:.1} ms at most ({:.2} s in all)",
        r.count,
        r.total.as_secs_f64() * 1000.0 / f64::from(r.count),
        r.longest.as_secs_f64() * 1000.0,
        r.total.as_secs_f64()
    );
}

/// How many times kubectl drains; the median counts.
const KUBECTL_RUNS: usize = 3;

/// How long `kubectl drain` takes for node-a on a fresh cluster. Panics if
/// it fails: a failed drain is no yardstick.
async fn kubectl_drain(lag: Duration) -> Duration {
    let sim = cluster(lag).await;
    let kc = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kc.path(), sim.kubeconfig()).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .args([
                "drain",
                "node-a",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=600s",
            ])
            .env("KUBECONFIG", kc.path())
            .env("KUBECACHEDIR", cache.path())
            .output()
    })
    .await
    .unwrap();
    let took = start.elapsed();
    match &out {
        Ok(o) if o.status.success() => took,
        Ok(o) => panic!(
            "kubectl drain failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("kubectl could not be run: {e}"),
    }
}

const BUSY_LAG: Duration = Duration::from_secs(2);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::var("MAINTD_DRAIN_TARGET").is_ok_and(|t| t == "real") {
        real::main().await;
        return;
    }
    let lag = SimConfig::default().disruption_lag;
    let sim = cluster(lag).await;
    let (ideal_all, ideal_default, ideal_stages) = ideal(&sim);
    let Run {
        whole: measured,
        default_done,
        stage_times,
        reactions,
    } = maintd_drain(&sim).await;
    drop(sim);

    // The same with a busy cluster's disruption controller.
    let sim = cluster(BUSY_LAG).await;
    let (busy_ideal, _, _) = ideal(&sim);
    let busy = maintd_drain(&sim).await;
    drop(sim);

    // kubectl drain on a fresh cluster with the same pods, a few times:
    // its pace is set by 5 s retries, so one run is luck as much as speed.
    let mut kubectl_runs = Vec::new();
    for _ in 0..KUBECTL_RUNS {
        kubectl_runs.push(kubectl_drain(lag).await);
    }
    kubectl_runs.sort();
    let kubectl = kubectl_runs[kubectl_runs.len() / 2];

    println!(
        "drain of node-a, realistic scenario (110 pods), disruption controller lag {:.1} s",
        lag.as_secs_f64()
    );
    println!("  ideal, whole plan              {ideal_all:8.2} s");
    println!(
        "  maintd, whole plan             {:8.2} s   ratio to ideal {:.3}",
        measured.as_secs_f64(),
        measured.as_secs_f64() / ideal_all
    );
    println!("  ideal, ordinary pods only      {ideal_default:8.2} s");
    println!(
        "  maintd, ordinary pods only     {:8.2} s   ratio to ideal {:.3}",
        default_done.as_secs_f64(),
        default_done.as_secs_f64() / ideal_default
    );
    println!(
        "  kubectl drain, same pods       {:8.2} s   median of {} runs: {}",
        kubectl.as_secs_f64(),
        kubectl_runs.len(),
        kubectl_runs
            .iter()
            .map(|d| format!("{:.2} s", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  maintd / kubectl, same pods    {:8.3}",
        default_done.as_secs_f64() / kubectl.as_secs_f64()
    );
    println!("  per stage (ideal / maintd / maintd's extra time):");
    for (i, (label, ideal)) in ideal_stages.iter().enumerate() {
        let took = stage_times.get(i).copied().unwrap_or(f64::NAN);
        println!(
            "    {:<55} {ideal:6.2} s  {took:6.2} s  {:+6.2} s",
            label,
            took - ideal
        );
    }
    print_reactions(&reactions);
    println!(
        "with a disruption controller {:.0} s behind (a busy cluster):",
        BUSY_LAG.as_secs_f64()
    );
    println!("  ideal, whole plan              {busy_ideal:8.2} s");
    println!(
        "  maintd, whole plan             {:8.2} s   ratio to ideal {:.3}",
        busy.whole.as_secs_f64(),
        busy.whole.as_secs_f64() / busy_ideal
    );
    print_reactions(&busy.reactions);
    // A lower bound that maintd beats is a wrong model, not a fast drain.
    // Stage times are measured between events, so a few milliseconds of
    // slack.
    const SLACK: f64 = 0.05;
    for (what, ideal, took) in [
        ("the whole plan", ideal_all, measured.as_secs_f64()),
        (
            "the ordinary pods",
            ideal_default,
            default_done.as_secs_f64(),
        ),
        (
            "the whole plan, 2 s lag",
            busy_ideal,
            busy.whole.as_secs_f64(),
        ),
    ]
    .into_iter()
    .chain(
        ideal_stages
            .iter()
            .zip(&stage_times)
            .map(|((label, ideal), took)| (label.as_str(), *ideal, *took)),
    ) {
        assert!(
            took + SLACK >= ideal,
            "maintd took {took:.2} s for {what}, less than its lower bound {ideal:.2} s: the ideal's model is wrong"
        );
    }
}
