//! The chaos soak shared by `cargo test --test soak` (short) and `cargo
//! bench --bench soak` (long): seeded rounds, each a fresh simulated
//! cluster with an agent per node, randomized workloads and a randomized
//! list of triggers, cancels, agent kills and API faults; the invariants
//! (see checks.rs and `maintd_sim::invariants`) checked all along. A round
//! that fails is replayed with actions left out while it still fails, and
//! reported with its seed and the shortest list found.
//!
//! Settings, from the environment: `MAINTD_SOAK_SEED` (the first round's
//! seed; round i has seed + i), `MAINTD_SOAK_ROUNDS`,
//! `MAINTD_SOAK_PARALLEL` (rounds at once).

mod actions;
mod checks;
mod round;
mod world;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use maintd::drain::executor::TimeoutPolicy;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use actions::{Action, Step};
use round::{AgentSpec, Round};
use world::WorldSpec;

/// How many replays a failure's shrinking may take.
const SHRINK_REPLAYS: usize = 8;
/// How often the continuous checks look.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// How a soak runs.
#[derive(Debug, Clone, Copy)]
pub struct Soak {
    pub seed: u64,
    pub rounds: u64,
    pub parallel: usize,
}

impl Soak {
    /// The defaults given, overridden by the environment.
    pub fn from_env(seed: u64, rounds: u64, parallel: usize) -> Soak {
        // `MAINTD_SOAK_LOG=maintd=debug` shows the agents' logs (best with
        // one round).
        if let Ok(filter) = std::env::var("MAINTD_SOAK_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Soak {
            seed: env("MAINTD_SOAK_SEED").unwrap_or(seed),
            rounds: env("MAINTD_SOAK_ROUNDS").unwrap_or(rounds),
            parallel: env("MAINTD_SOAK_PARALLEL").map_or(parallel, |p| p.max(1) as usize),
        }
    }
}

/// Everything one round is, drawn from its seed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    world: WorldSpec,
    agents: AgentSpec,
    pub steps: Vec<Step>,
}

impl Plan {
    pub fn draw(seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);
        let world = world::generate(&mut rng);
        let agents = AgentSpec {
            stage_timeout: rng
                .random_bool(0.5)
                .then(|| Duration::from_secs(rng.random_range(1..=3))),
            on_timeout: if rng.random_bool(0.5) {
                TimeoutPolicy::Skip
            } else {
                TimeoutPolicy::Wait
            },
            shutdown_budget: Duration::from_secs(rng.random_range(3..=5)),
        };
        let steps = actions::generate(&mut rng);
        Plan {
            seed,
            world,
            agents,
            steps,
        }
    }

    /// The nodes the steps shut down (they need a logind).
    fn shut_down(&self) -> Vec<usize> {
        self.steps
            .iter()
            .filter_map(|s| match s.action {
                Action::Shutdown(n) => Some(n),
                _ => None,
            })
            .collect()
    }
}

/// A round that broke an invariant.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub findings: Vec<String>,
    /// The shortest list of steps found that still fails.
    pub shortest: Vec<Step>,
    /// Whether that list failed again when replayed (None: not shrunk,
    /// as another failure was being shrunk).
    pub reproduced: Option<bool>,
}

/// What a soak did.
#[derive(Debug)]
pub struct Report {
    pub first_seed: u64,
    pub rounds: u64,
    pub maintenances: usize,
    pub wall: Duration,
    pub failures: Vec<Failure>,
}

impl Report {
    /// Rounds, maintenances, wall time, seeds and every failure with how
    /// to replay it.
    pub fn describe(&self) -> String {
        let mut out = format!(
            "soak: {} rounds, {} maintenances, seeds {}..={}, {:.1} s, {} failing round(s)\n",
            self.rounds,
            self.maintenances,
            self.first_seed,
            self.first_seed + self.rounds.saturating_sub(1),
            self.wall.as_secs_f64(),
            self.failures.len()
        );
        for f in &self.failures {
            out.push_str(&format!(
                "\nround seed {} broke:\n  {}\nshortest sequence found ({}):\n",
                f.seed,
                f.findings.join("\n  "),
                match f.reproduced {
                    Some(true) => "fails again when replayed",
                    Some(false) => "did not fail again when replayed: timing-dependent",
                    None => "not shrunk: another failure was",
                }
            ));
            for s in &f.shortest {
                out.push_str(&format!("  after {} ms: {:?}\n", s.pause_ms, s.action));
            }
            out.push_str(&format!(
                "replay: MAINTD_SOAK_SEED={} MAINTD_SOAK_ROUNDS=1 cargo test --test soak\n",
                f.seed
            ));
        }
        out
    }
}

/// Runs the soak.
pub async fn run(soak: Soak) -> Report {
    let started = Instant::now();
    let shrinking = AtomicBool::new(false);
    let shrinking = &shrinking;
    let outcomes: Vec<(usize, Option<Failure>)> =
        futures::stream::iter((0..soak.rounds).map(|i| soak.seed.wrapping_add(i)))
            .map(|seed| async move {
                let plan = Plan::draw(seed);
                let count = actions::maintenances(&plan.steps);
                (count, judge(plan, shrinking).await)
            })
            .buffer_unordered(soak.parallel)
            .collect()
            .await;
    Report {
        first_seed: soak.seed,
        rounds: soak.rounds,
        maintenances: outcomes.iter().map(|(c, _)| c).sum(),
        wall: started.elapsed(),
        failures: outcomes.into_iter().filter_map(|(_, f)| f).collect(),
    }
}

/// Runs a round; if it fails, shrinks it, unless another failure is
/// being shrunk already (each replay is a whole round: one shrink is
/// enough to act on, and the others keep their full list).
async fn judge(plan: Plan, shrinking: &AtomicBool) -> Option<Failure> {
    let findings = play(&plan, &plan.steps).await;
    if findings.is_empty() {
        return None;
    }
    eprintln!("soak round {} failed: {findings:?}", plan.seed);
    let (shortest, reproduced) = if shrinking.swap(true, Ordering::SeqCst) {
        (plan.steps.clone(), None)
    } else {
        let (shortest, reproduced) = shrink(&plan).await;
        (shortest, Some(reproduced))
    };
    Some(Failure {
        seed: plan.seed,
        findings,
        shortest,
        reproduced,
    })
}

/// Leaves out one step at a time, last first, keeping each removal after
/// which the round still fails; at most [`SHRINK_REPLAYS`] replays.
async fn shrink(plan: &Plan) -> (Vec<Step>, bool) {
    let mut steps = plan.steps.clone();
    let mut replays = 0;
    let mut i = steps.len();
    while i > 0 && replays < SHRINK_REPLAYS {
        i -= 1;
        let mut fewer = steps.clone();
        fewer.remove(i);
        replays += 1;
        if !play(plan, &fewer).await.is_empty() {
            steps = fewer;
        }
    }
    let reproduced = !play(plan, &steps).await.is_empty();
    (steps, reproduced)
}

/// Plays `steps` on the plan's world; returns every invariant broken.
async fn play(plan: &Plan, steps: &[Step]) -> Vec<String> {
    trace(plan, "starting the cluster");
    let sim = world::start(&plan.world).await;
    trace(plan, "starting the agents");
    let mut round = Round::start(sim, plan.agents.clone(), &plan.shut_down()).await;
    let mut watcher = checks::Watcher::new(&round);
    for step in steps {
        let until = tokio::time::Instant::now() + Duration::from_millis(step.pause_ms);
        while tokio::time::Instant::now() < until {
            watcher.look(&round);
            tokio::time::sleep(LOOK_EVERY.min(until - tokio::time::Instant::now())).await;
        }
        trace(plan, &format!("{:?}", step.action));
        round.apply(&step.action).await;
    }
    // Let the last action take effect before everything is ended.
    tokio::time::sleep(Duration::from_millis(500)).await;
    trace(plan, "ending every maintenance");
    round.finish().await;
    trace(plan, "waiting for the agents to converge");
    watcher.converge(&round).await;
    watcher.judge_bypasses(&round);
    round.stop();
    let mut findings = round.sim.state.invariants.violations();
    findings.extend(watcher.findings);
    findings
}

/// With `MAINTD_SOAK_TRACE` set, says what a round is doing.
fn trace(plan: &Plan, what: &str) {
    if std::env::var_os("MAINTD_SOAK_TRACE").is_some() {
        eprintln!("round {}: {what}", plan.seed);
    }
}
