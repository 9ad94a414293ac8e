//! The simulator's own checks of disruption safety, made on every request
//! that takes a pod away, for soaks and tests to read.
//!
//! The Eviction API decides from a budget's *status*, which the disruption
//! controller recomputes with a lag; what it promises is about the live
//! pods: an eviction it grants never leaves fewer healthy pods than the
//! budget's minimum. This recorder checks that promise against the live
//! pods at the moment an eviction is granted, independently of the status
//! the decision was made from:
//!
//! - only a pod the budget counts as healthy (Ready, not terminating, not
//!   already recorded in `status.disruptedPods`) can take the budget down:
//!   letting an unready pod go (`unhealthyPodEvictionPolicy`) costs nothing;
//! - after the eviction, the budget's healthy pods (without this one and
//!   without those already granted) must still be at least its
//!   `desiredHealthy`, as the disruption controller computes it from the
//!   controllers' scale;
//! - a healthy pod deleted directly (DELETE, not an eviction) bypasses the
//!   budget; the API server cannot know of it until the disruption
//!   controller has recounted, so a shortfall that such a recent deletion
//!   explains is not the eviction's fault. Every such deletion is kept as a
//!   [`Bypass`], with who made it, for the caller to judge.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::eviction::budget_status;
use super::meta;
use super::resources::Gr;
use super::select::selector_object_matches;
use super::store::Store;

/// How long after the disruption controller's lag a direct deletion still
/// explains a shortfall (the controller's own scheduling).
const RECOUNT_SLACK: Duration = Duration::from_secs(1);

/// A healthy pod under a budget deleted without the Eviction API.
#[derive(Debug, Clone)]
pub struct Bypass {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The budget it bypassed.
    pub budget: String,
    /// The deleting client's User-Agent.
    pub by: String,
    pub at: Instant,
}

/// What the recorder has seen; one per simulated cluster.
#[derive(Debug)]
pub struct Invariants {
    /// How long the disruption controller takes to recount a budget.
    lag: Duration,
    violations: Mutex<Vec<String>>,
    bypasses: Mutex<Vec<Bypass>>,
}

impl Invariants {
    pub fn new(disruption_lag: Duration) -> Self {
        Invariants {
            lag: disruption_lag,
            violations: Mutex::default(),
            bypasses: Mutex::default(),
        }
    }

    /// Every violation seen so far, in words.
    pub fn violations(&self) -> Vec<String> {
        lock(&self.violations).clone()
    }

    /// Every direct deletion of a healthy, budgeted pod so far.
    pub fn bypasses(&self) -> Vec<Bypass> {
        lock(&self.bypasses).clone()
    }

    /// Records a violation found by someone else (a soak's own checks), so
    /// one list holds them all.
    pub fn record(&self, what: String) {
        lock(&self.violations).push(what);
    }

    /// Called with the store as it is once an eviction of `ns/name` has
    /// passed its budget (its disruption taken, if it took one) and before
    /// the pod is deleted: what the eviction would break, if anything.
    pub fn judge_eviction(&self, store: &Store, ns: &str, name: &str) -> Option<String> {
        let pod = store.get(&Gr::pods(), ns, name)?;
        if !healthy(&pod) {
            return None;
        }
        let pdb = budgets_of(store, &pod).into_iter().next()?;
        // A budget the controller cannot count allows nothing (it fails
        // safe); the eviction decided from its last status is judged by
        // that status alone, so it is left to the eviction's own checks.
        let (status, _) = budget_status(store, &pdb).ok()?;
        let disrupted = pdb["status"]["disruptedPods"].as_object();
        let left = store
            .list(&Gr::pods(), Some(ns))
            .iter()
            .filter(|p| selector_object_matches(&pdb["spec"]["selector"], p))
            .filter(|p| healthy(p) && meta::name(p) != name)
            .filter(|p| disrupted.is_none_or(|d| !d.contains_key(meta::name(p))))
            .count() as i64;
        let budget = format!("{ns}/{}", meta::name(&pdb));
        let bypassed = self.recent_bypasses(&budget);
        (left + bypassed < status.desired_healthy).then(|| {
            format!(
                "eviction of {ns}/{name} granted although budget {budget} needs {} healthy pods and only {left} are left",
                status.desired_healthy
            )
        })
    }

    /// Keeps a violation found by [`Invariants::judge_eviction`] once the
    /// eviction has really been granted.
    pub fn eviction_granted(&self, verdict: Option<String>) {
        if let Some(v) = verdict {
            tracing::error!(violation = %v, "simulated API server: disruption budget broken");
            lock(&self.violations).push(v);
        }
    }

    /// Called before a client deletes `ns/name` directly: records a bypass
    /// if the pod is healthy and a budget guards it.
    pub fn deleting_pod(&self, store: &Store, ns: &str, name: &str, user_agent: &str) {
        let Some(pod) = store.get(&Gr::pods(), ns, name) else {
            return;
        };
        if !healthy(&pod) {
            return;
        }
        for pdb in budgets_of(store, &pod) {
            lock(&self.bypasses).push(Bypass {
                pod: format!("{ns}/{name}"),
                budget: format!("{ns}/{}", meta::name(&pdb)),
                by: user_agent.to_string(),
                at: Instant::now(),
            });
        }
    }

    /// Direct deletions under `budget` the disruption controller may not
    /// have counted yet.
    fn recent_bypasses(&self, budget: &str) -> i64 {
        let window = self.lag + RECOUNT_SLACK;
        lock(&self.bypasses)
            .iter()
            .filter(|b| b.budget == budget && b.at.elapsed() < window)
            .count() as i64
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a budget counts the pod as healthy: running, Ready, not going.
fn healthy(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && meta::pod_ready(pod) && !meta::is_terminating(pod)
}

/// The budgets whose selector matches the pod.
fn budgets_of(store: &Store, pod: &Value) -> Vec<Value> {
    store
        .list(&Gr::pdbs(), Some(meta::namespace(pod)))
        .into_iter()
        .filter(|p| selector_object_matches(&p["spec"]["selector"], pod))
        .map(|p| (*p).clone())
        .collect()
}
