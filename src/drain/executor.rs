//! Runs the drain plan on the node: stage by stage, every pod of a stage
//! evicted in parallel through the Eviction API, the next stage only once
//! every pod of this one is gone (seen through the pod watch, never by
//! polling) or, under a deadline, its share of the time is over, 429s
//! retried with jittered backoff and reported by name.
//!
//! The plan is rebuilt from the pod index before each stage, so pods that
//! arrive during the drain are drained in their right place, and a restarted
//! agent resumes where the cluster stands.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::budget_watches::BudgetWatches;
use super::eviction_requests::EvictionRequests;
use super::plan::{self, DrainPlan, PlanEntry, PlanOptions, PodInfo};
use super::progress::{Blocker, EventKind, Phase, PodState, Progress, StageState, StageStatus};
use super::static_pods::StaticPodStash;
use super::volumes;
use crate::cluster::{ClusterOps, TaintSpec};
use crate::index::{Backoff, Index};

mod evict;
mod request;
mod stage;
mod statics;
pub(crate) use evict::blocking_budget;
pub(crate) use statics::is_manifest_of;
mod undo;
mod volume_wait;

/// How long a drain waits, by default, for its pods' volumes to detach.
pub const DEFAULT_VOLUME_DETACH_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a drain waits to learn whether EvictionRequests are served.
const DISCOVERY: Duration = Duration::from_secs(10);
const DISCOVERY_UNDER_DEADLINE: Duration = Duration::from_secs(1);

/// What to do when a stage's time is up and pods remain.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TimeoutPolicy {
    /// Report, and keep waiting: a maintenance drain never skips a budget.
    #[default]
    Wait,
    /// Report, leave the remaining pods, and go on to the next stage.
    Skip,
}

/// How one drain runs.
#[derive(Debug, Clone)]
pub struct DrainOptions {
    /// The plan entries (KEP-4212 drainPlan); None for the default plan.
    pub entries: Option<Vec<PlanEntry>>,
    pub plan: PlanOptions,
    /// At most this many evictions in flight.
    pub concurrency: usize,
    pub stage_timeout: Option<Duration>,
    pub on_timeout: TimeoutPolicy,
    /// Cordon the node (Cordon and Drain do; the taint is always set).
    pub cordon: bool,
    /// Run the plan (false for a Cordon-only maintenance).
    pub evict: bool,
    /// Shutdown: everything must be done by then. Stages get a share of the
    /// time left; a pod that would not leave within its stage's share is
    /// deleted early enough to still get a grace period (see budget.rs).
    pub deadline: Option<Instant>,
    /// How long, once every pod is gone, to wait for the drained pods'
    /// volumes to be detached from the node (zero: not at all).
    pub volume_detach_timeout: Duration,
    /// The start of a rolling turn this drain is for, recorded on the Node
    /// in the same write as its cordon (see [`ClusterOps::mark_for_turn`]).
    pub turn: Option<crate::api::turns::TurnRecord>,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            entries: None,
            plan: PlanOptions::default(),
            concurrency: 256,
            stage_timeout: None,
            on_timeout: TimeoutPolicy::Wait,
            cordon: true,
            evict: true,
            deadline: None,
            volume_detach_timeout: DEFAULT_VOLUME_DETACH_TIMEOUT,
            turn: None,
        }
    }
}

/// The parts a drain works with.
#[derive(Clone)]
pub struct Drainer {
    pub ops: ClusterOps,
    pub pods: Index,
    /// Budget watches, held only while a pod is blocked by a budget: a
    /// blocked eviction is retried as soon as its budget allows a
    /// disruption again.
    pub budgets: BudgetWatches,
    pub stash: Option<StaticPodStash>,
    pub progress: Progress,
    pub taint: TaintSpec,
    /// What the drain has learned so far; outlives one run of the plan.
    pub memory: DrainMemory,
    /// KEP-4563's EvictionRequests, for pods with responders of their own.
    pub requests: EvictionRequests,
}

/// What a drain has learned (each pod's state and blocker, the stages done,
/// the pods left behind), kept by the [`Drainer`] rather than by one run of
/// the plan: a drain re-planned for a new deadline or plan carries on where
/// it stood. Cleared when the drain is undone.
#[derive(Clone, Default)]
pub struct DrainMemory(Arc<Mutex<PodBook>>);

#[derive(Default)]
struct PodBook {
    /// A drain is under way (a run started and no undo since).
    started: bool,
    state: HashMap<String, (PodState, Option<String>)>,
    /// Pods given up on, with why: left by a timed-out stage under the Skip
    /// policy, or still there when a shutdown stage's time ran out.
    abandoned: HashMap<String, String>,
    /// Of those, the ones given up on only because a deadline's time ran
    /// out: a drain re-planned without a deadline (a shutdown cancelled
    /// while a taint still asks for the drain) tries them again.
    out_of_time: HashSet<String>,
    /// Completed pods already deleted.
    deleted: HashSet<String>,
    /// The stages done, as the status showed them when they ended.
    finished: Vec<StageStatus>,
    /// The claims the drained pods mounted: their volumes are waited for
    /// once every pod is gone.
    claims: BTreeSet<volumes::Claim>,
    /// The wait for those volumes has ended (detached, or its time ran
    /// out); a pod drained after that starts a new wait.
    volumes_settled: bool,
}

impl DrainMemory {
    fn lock(&self) -> std::sync::MutexGuard<'_, PodBook> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How the drain last ended up with no stage left to run.
#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Drained,
    /// Pods were given up on under a deadline: what is left goes down
    /// with the node.
    Failed(usize),
}

impl Drainer {
    fn book(&self) -> std::sync::MutexGuard<'_, PodBook> {
        self.memory.lock()
    }

    /// Whether the drain still waits, or is about to wait, for the
    /// volumes of its drained pods to detach: a shutdown holds its lock
    /// until then (within its deadline).
    pub fn volumes_pending(&self, opts: &DrainOptions) -> bool {
        if opts.volume_detach_timeout.is_zero() {
            return false;
        }
        let b = self.book();
        !b.volumes_settled && !volumes::to_wait_for(&b.claims, &self.pods.all()).is_empty()
    }

    /// The plan for the pods on the node now.
    pub fn plan(&self, opts: &DrainOptions) -> DrainPlan {
        let pods: Vec<PodInfo> = self
            .pods
            .all()
            .iter()
            .map(|p| PodInfo::from_json(p))
            .collect();
        plan::build_plan(&pods, opts.entries.as_deref(), &opts.plan)
    }

    /// Drains the node until it is empty, then keeps it empty (pods that
    /// arrive are drained too) until `cancel`. A run that follows another
    /// without an undo in between (the plan or deadline changed) continues
    /// from what the drain learned.
    pub async fn run(&self, opts: DrainOptions, cancel: CancellationToken) {
        let p = &self.progress;
        let resumed = std::mem::replace(&mut self.book().started, true);
        let mut ev = p.event(EventKind::DrainStarted);
        let plan_name = match &opts.entries {
            Some(e) => format!("drain plan with {} entries", e.len()),
            None => "default drain plan".into(),
        };
        if resumed {
            let (done, left) = {
                let mut b = self.book();
                if opts.deadline.is_none() {
                    let retry = std::mem::take(&mut b.out_of_time);
                    b.abandoned.retain(|uid, _| !retry.contains(uid));
                }
                (b.finished.len(), b.abandoned.len())
            };
            ev.message = format!(
                "re-planned ({plan_name}{}); {done} stages done and {left} pods given up on carry over",
                if opts.deadline.is_some() {
                    ", with a deadline"
                } else {
                    ""
                }
            );
        } else {
            p.update(|st| {
                // A new drain starts afresh; what triggered it stays.
                *st = super::progress::DrainStatus {
                    triggers: std::mem::take(&mut st.triggers),
                    deadline: st.deadline.take(),
                    waiting: st.waiting.take(),
                    waiting_for: st.waiting_for.take(),
                    waiting_untold: st.waiting_untold,
                    waiting_epoch: st.waiting_epoch,
                    ..Default::default()
                };
                st.phase = Phase::Cordoned;
                st.started_at = Some(super::progress::now_time());
            });
            ev.message = plan_name;
        }
        p.emit(ev);
        if !self.mark_node(&opts, &cancel).await || !opts.evict {
            return;
        }
        // Whether the API server serves EvictionRequests, asked as each
        // drain starts, so a feature gate turned on or off is seen by the
        // next drain. Bounded tighter under a deadline: an unanswered
        // question keeps what was known and the Eviction API is used.
        let bound = if opts.deadline.is_some() {
            DISCOVERY_UNDER_DEADLINE
        } else {
            DISCOVERY
        };
        tokio::select! {
            _ = tokio::time::timeout(bound, self.requests.discover()) => {}
            _ = cancel.cancelled() => return,
        }
        // Until the node's pods have been listed, an empty plan would only
        // mean "not known yet", not "drained".
        tokio::select! {
            _ = self.pods.wait_until(Index::synced) => {}
            _ = cancel.cancelled() => return,
        }
        let mut reported: Option<Outcome> = None;
        let mut detaching = volume_wait::Waiting::default();
        // The budgets of the namespaces the drain's stages evict in, by
        // namespace: watched from the first stage there until the node is
        // drained, so each namespace is listed once per drain, not once
        // per stage.
        let mut budget_watches = BTreeMap::new();
        loop {
            if cancel.is_cancelled() {
                return;
            }
            let plan = self.plan(&opts);
            self.delete_completed(&plan, &cancel).await;
            let finished = self.book().finished.clone();
            let memory = self.memory.clone();
            p.set_plan(&plan, &finished, move |uid| {
                memory
                    .lock()
                    .state
                    .get(uid)
                    .cloned()
                    .unwrap_or((PodState::Pending, None))
            });
            let abandoned = self.book().abandoned.clone();
            let next = plan
                .stages
                .iter()
                .enumerate()
                .find(|(_, s)| s.pods.iter().any(|pod| !abandoned.contains_key(&pod.uid)));
            let Some((i, stage)) = next else {
                if reported.is_none() {
                    match self.wait_for_volumes(&opts, &cancel, &mut detaching).await {
                        volume_wait::Ended::Cancelled => return,
                        volume_wait::Ended::PodsChanged => continue,
                        volume_wait::Ended::Done => {}
                    }
                }
                budget_watches.clear();
                let outcome = self.finish(&opts, &abandoned, reported);
                reported = Some(outcome);
                // Stay drained: wake on any change of the node's pods.
                let mut changes = self.pods.changes();
                tokio::select! {
                    _ = changes.changed() => continue,
                    _ = cancel.cancelled() => return,
                }
            };
            reported = None;
            detaching = volume_wait::Waiting::default();
            let share = opts.deadline.map(|d| self.stage_share(&plan, i, d));
            let number = finished.len() + i + 1;
            self.run_stage(number, stage, &opts, share, &cancel, &mut budget_watches)
                .await;
            if cancel.is_cancelled() {
                return;
            }
            if let Some(mut done) = p.status().stages.into_iter().find(|s| s.stage == number) {
                if done.state != StageState::TimedOut {
                    done.state = StageState::Done;
                }
                for pod in &mut done.pods {
                    if !self.pods.contains(&pod.uid) {
                        pod.state = PodState::Gone;
                        pod.blocker = None;
                    }
                }
                self.book().finished.push(done);
            }
        }
    }

    /// No stage is left to run: the node is drained, or — under a deadline,
    /// with pods given up on still there — the drain failed, and those pods
    /// are its blockers. Reported once per outcome.
    fn finish(
        &self,
        opts: &DrainOptions,
        abandoned: &HashMap<String, String>,
        reported: Option<Outcome>,
    ) -> Outcome {
        let p = &self.progress;
        let mut left: Vec<Blocker> = abandoned
            .iter()
            .filter_map(|(uid, why)| {
                let pod = self.pods.get(uid)?;
                Some(Blocker {
                    namespace: pod["metadata"]["namespace"].as_str()?.to_string(),
                    pod: pod["metadata"]["name"].as_str()?.to_string(),
                    reason: why.clone(),
                })
            })
            .collect();
        left.sort_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
        // Without a deadline, pods left under the Skip policy were left on
        // purpose: the drain is as done as it was asked to be.
        let outcome = if opts.deadline.is_some() && !left.is_empty() {
            Outcome::Failed(left.len())
        } else {
            Outcome::Drained
        };
        if reported == Some(outcome) {
            return outcome;
        }
        let mut ev;
        if let Outcome::Failed(n) = outcome {
            let names: Vec<String> = left
                .iter()
                .map(|b| format!("{}/{} ({})", b.namespace, b.pod, b.reason))
                .collect();
            ev = p.event(EventKind::DrainFailed);
            ev.message = format!(
                "{n} pods left after every stage's time ran out: {}",
                names.join("; ")
            );
            let message = ev.message.clone();
            p.update(|st| {
                st.phase = Phase::Failed;
                st.current_stage = None;
                st.pods_remaining = n;
                st.blockers = left;
                st.last_error = Some(message);
                st.finished_at = Some(super::progress::now_time());
            });
        } else {
            p.update(|st| {
                st.phase = Phase::Drained;
                st.current_stage = None;
                st.pods_remaining = 0;
                st.blockers.clear();
                st.finished_at = Some(super::progress::now_time());
            });
            ev = p.event(EventKind::DrainCompleted);
            ev.message = format!("{} pods drained", p.status().pods_total);
        }
        p.emit(ev);
        outcome
    }

    /// Cordons and taints the node; retried until it works or the drain is
    /// cancelled.
    async fn mark_node(&self, opts: &DrainOptions, cancel: &CancellationToken) -> bool {
        // Capped low: marking the node is what stops new pods landing on
        // it, one request each try (from the watched Node).
        let mut backoff = Backoff::with(200, 2_000);
        // Its retries too go before the Node's conditions.
        let _pending = self.ops.node_writes().edit_pending();
        loop {
            match self
                .ops
                .mark_for_turn(&self.taint, opts.cordon, opts.turn.as_ref())
                .await
            {
                Ok(change) => {
                    let mut ev = self.progress.event(EventKind::NodeMarked);
                    ev.message = format!(
                        "{}{}{}",
                        if change.cordoned { "cordoned; " } else { "" },
                        if change.tainted {
                            format!("tainted {}:{}", self.taint.key, self.taint.effect)
                        } else {
                            "taint already present".into()
                        },
                        match opts.turn.as_ref().filter(|_| change.turn_started) {
                            Some(t) => format!(
                                "; recorded the start of its turn of NodeMaintenance {}",
                                t.object
                            ),
                            None => String::new(),
                        }
                    );
                    self.progress.emit(ev);
                    return true;
                }
                Err(e) => {
                    self.progress
                        .update(|st| st.last_error = Some(e.to_string()));
                    let mut ev = self.progress.event(EventKind::Warning);
                    ev.message = e.to_string();
                    self.progress.emit(ev);
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = cancel.cancelled() => return false,
                    }
                }
            }
        }
    }

    /// Completed pods hold nothing: delete them, without waiting.
    async fn delete_completed(&self, plan: &DrainPlan, cancel: &CancellationToken) {
        for pod in &plan.completed {
            // A cancelled drain sends nothing more.
            if cancel.is_cancelled() {
                return;
            }
            if !self.book().deleted.insert(pod.uid.clone()) {
                continue;
            }
            let mut ev = self.progress.event(EventKind::PodDeleted);
            ev.namespace = Some(pod.namespace.clone());
            ev.pod = Some(pod.name.clone());
            ev.pod_type = Some(pod.pod_type);
            ev.priority = Some(pod.priority);
            match self
                .ops
                .delete_pod(&pod.namespace, &pod.name, &pod.uid, None)
                .await
            {
                Ok(()) => ev.message = "completed pod deleted".into(),
                Err(e) => {
                    ev.event = EventKind::PodError;
                    ev.message = e.to_string();
                }
            }
            self.progress.emit(ev);
        }
    }

    /// The time the stage at `index` may take, out of what is left before
    /// `deadline`, split over this and the remaining stages.
    fn stage_share(&self, plan: &DrainPlan, index: usize, deadline: Instant) -> Duration {
        let left = deadline.saturating_duration_since(Instant::now());
        let needs: Vec<super::budget::StageNeed> = plan.stages[index..]
            .iter()
            .map(|s| super::budget::StageNeed {
                seconds: s.pods.iter().map(|p| p.grace_seconds).max().unwrap_or(0) as f64,
            })
            .collect();
        super::budget::split_budget(left, &needs)
            .first()
            .copied()
            .unwrap_or(Duration::ZERO)
    }
}
