//! The fault soak on the real control plane (Kubernetes 1.37, etcd, KWOK),
//! shared by the test `real_fault_soak` (a few rounds, in CI) and
//! `MAINTD_SOAK_TARGET=real cargo bench --bench soak` (hundreds).
//!
//! The soak has a control plane of its own, since it kills its parts:
//! kube-apiserver and etcd SIGKILLed and started again, the agents (each
//! a `maintd run` process with deploy/'s rights and a token bound to its
//! node) SIGKILLed, their connections black-holed, reset or left
//! half-open by a proxy between them and the API server, and maintd's
//! ServiceAccount answered 429 by the API server's own priority and
//! fairness. Each round (plan.rs: drawn from its seed, printed,
//! replayable) drains one node behind budgets or rolls a maintenance
//! through slots while its faults strike, then checks that no budget was
//! ever violated (from the audit log), every static pod manifest was in
//! its directory or its stash at every moment and is back at the end, no
//! node is left cordoned or tainted, no slot is held by a node out of its
//! turn, and every drain finished or names what holds it.
//!
//! Settings, from the environment: `MAINTD_REAL_SOAK_SEED` (the first
//! round's seed; round i has seed + i) and `MAINTD_REAL_SOAK_ROUNDS`.

pub mod agents;
pub mod audit;
pub mod checks;
pub mod faults;
pub mod plan;
pub mod round;
pub mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use crate::common::real::Real;
use checks::Checks;
use plan::{FAULT_KINDS, Plan};
use round::RoundReport;

/// How a soak runs.
#[derive(Debug, Clone, Copy)]
pub struct Soak {
    pub seed: u64,
    pub rounds: u64,
}

impl Soak {
    /// The defaults given, overridden by the environment.
    pub fn from_env(seed: u64, rounds: u64) -> Soak {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Soak {
            seed: env("MAINTD_REAL_SOAK_SEED").unwrap_or(seed),
            rounds: env("MAINTD_REAL_SOAK_ROUNDS").unwrap_or(rounds),
        }
    }
}

/// What a soak did and found.
#[derive(Debug, Default)]
pub struct Report {
    pub rounds: Vec<RoundReport>,
    pub took: Duration,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.rounds.iter().map(|r| r.violations.len()).sum()
    }

    /// The report as printed: each round, then the totals.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let mut faults: BTreeMap<&str, usize> = FAULT_KINDS.iter().map(|k| (*k, 0)).collect();
        let mut checks = Checks::default();
        for r in &self.rounds {
            out.push_str(&format!(
                "round {} ({:.0} s): {}\n  outcome: {}\n",
                r.plan.seed,
                r.took.as_secs_f64(),
                r.plan,
                r.outcome
            ));
            for f in &r.faults {
                out.push_str(&format!("  fault: {f}\n"));
            }
            for v in &r.violations {
                out.push_str(&format!("  VIOLATION: {v}\n"));
            }
            for t in &r.plan.faults {
                *faults.entry(t.fault.kind()).or_default() += 1;
            }
            checks.merge(&r.checks);
        }
        out.push_str(&format!(
            "{} rounds in {:.0} s (first seed {}; replay one with MAINTD_REAL_SOAK_SEED=<seed> MAINTD_REAL_SOAK_ROUNDS=1)\n",
            self.rounds.len(),
            self.took.as_secs_f64(),
            self.rounds.first().map_or(0, |r| r.plan.seed)
        ));
        out.push_str("faults injected:\n");
        for (k, n) in &faults {
            out.push_str(&format!("  {n:6}  {k}\n"));
        }
        out.push_str("invariants checked:\n");
        for (k, n) in &checks.0 {
            out.push_str(&format!("  {n:6}  {k}\n"));
        }
        out.push_str(&format!("violations: {}\n", self.violations()));
        out
    }
}

/// Runs the soak: its own control plane, then the rounds one after the
/// other, each printed as it ends.
pub async fn run(soak: Soak) -> Report {
    let began = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("maintd-soak-plane.")
        .tempdir()
        .expect("a directory for the soak's control plane");
    let policy = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/audit-policy-soak.yaml");
    let plane = dir.path().to_path_buf();
    let real = tokio::task::spawn_blocking(move || Real::own(&plane, Some(&policy)))
        .await
        .expect("the control plane's start")
        .unwrap_or_else(|why| panic!("the soak's control plane: {why}"));
    let admin = real.admin().await;
    let proxy = real.fault_proxy().await;
    let mut report = Report::default();
    for i in 0..soak.rounds {
        let plan = Plan::draw(soak.seed.wrapping_add(i));
        println!("round {}: {plan}", plan.seed);
        let r = round::run(&real, &admin, &proxy, plan).await;
        println!(
            "  {:.0} s, {}{}",
            r.took.as_secs_f64(),
            r.outcome,
            if r.violations.is_empty() {
                String::new()
            } else {
                format!(", {} VIOLATIONS", r.violations.len())
            }
        );
        report.rounds.push(r);
    }
    let down = real.dir().to_path_buf();
    let _ = tokio::task::spawn_blocking(move || {
        std::process::Command::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/control-plane"),
        )
        .arg("down")
        .arg(down)
        .status()
    })
    .await;
    report.took = began.elapsed();
    report
}

/// kubectl as cluster-admin, on the blocking pool: the proxy's tasks and
/// the samplers go on while it runs.
pub async fn kubectl(real: &Real, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let kc = real.admin_kubeconfig();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::common::real::kubectl(&kc, &args, stdin.as_deref())
    })
    .await
    .unwrap_or_else(|e| (false, String::new(), format!("kubectl did not run: {e}")))
}

/// `node`'s NodeDrain, if it can be read now.
pub async fn nodedrain(admin: &kube::Client, node: &str) -> Option<Value> {
    let api: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &kube::discovery::ApiResource {
            group: "maintd.io".into(),
            version: "v1alpha1".into(),
            api_version: "maintd.io/v1alpha1".into(),
            kind: "NodeDrain".into(),
            plural: "nodedrains".into(),
        },
    );
    let d = api.get_opt(node).await.ok()??;
    serde_json::to_value(d).ok()
}
