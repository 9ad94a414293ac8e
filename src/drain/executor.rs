//! Runs the drain plan on the node: stage by stage, every pod of a stage
//! evicted in parallel through the Eviction API, the next stage only once
//! every pod of this one is gone (seen through the pod watch, never by
//! polling), 429s retried with jittered backoff and reported by name.
//!
//! The plan is rebuilt from the pod index before each stage, so pods that
//! arrive during the drain are drained in their right place, and a restarted
//! agent resumes where the cluster stands.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::plan::{self, DrainPlan, PlanEntry, PlanOptions, PodAction, PodInfo, PodType, Stage};
use super::progress::{Blocker, EventKind, Phase, PodState, Progress, StageState, StageStatus};
use super::static_pods::StaticPodStash;
use crate::cluster::{ClusterOps, EvictionOutcome, TaintSpec};
use crate::index::{Backoff, Index};

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
    /// time left; one that overruns its share has its remaining pods deleted
    /// with what is left of the share as grace, as the kubelet does.
    pub deadline: Option<Instant>,
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
        }
    }
}

/// The parts a drain works with.
#[derive(Clone)]
pub struct Drainer {
    pub ops: ClusterOps,
    pub pods: Index,
    /// PodDisruptionBudgets of the cluster: a blocked eviction is retried
    /// as soon as its namespace's budget allows a disruption again.
    pub budgets: Index,
    pub stash: Option<StaticPodStash>,
    pub progress: Progress,
    pub taint: TaintSpec,
}

/// Per-pod state shared between the stage runner and the status snapshot.
#[derive(Default)]
struct PodBook {
    state: HashMap<String, (PodState, Option<String>)>,
    /// Pods left behind by a timed-out stage under the Skip policy.
    abandoned: HashSet<String>,
    /// Completed pods already deleted.
    deleted: HashSet<String>,
}

type Book = Arc<Mutex<PodBook>>;

fn lock_book(b: &Book) -> std::sync::MutexGuard<'_, PodBook> {
    b.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drainer {
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
    /// arrive are drained too) until `cancel`.
    pub async fn run(&self, opts: DrainOptions, cancel: CancellationToken) {
        let p = &self.progress;
        p.update(|st| {
            // A new drain starts afresh; what triggered it stays.
            *st = super::progress::DrainStatus {
                triggers: std::mem::take(&mut st.triggers),
                deadline: st.deadline.take(),
                ..Default::default()
            };
            st.phase = Phase::Cordoned;
            st.started_at = Some(super::progress::now_time());
        });
        let mut ev = p.event(EventKind::DrainStarted);
        ev.message = match &opts.entries {
            Some(e) => format!("drain plan with {} entries", e.len()),
            None => "default drain plan".into(),
        };
        p.emit(ev);
        if !self.mark_node(&opts, &cancel).await || !opts.evict {
            return;
        }
        // Until the node's pods have been listed, an empty plan would only
        // mean "not known yet", not "drained".
        tokio::select! {
            _ = self.pods.wait_until(Index::synced) => {}
            _ = cancel.cancelled() => return,
        }
        let book: Book = Arc::default();
        let mut finished: Vec<StageStatus> = Vec::new();
        let mut last_reported_drained = false;
        loop {
            if cancel.is_cancelled() {
                return;
            }
            let plan = self.plan(&opts);
            self.delete_completed(&plan, &book).await;
            let b = book.clone();
            p.set_plan(&plan, &finished, move |uid| {
                lock_book(&b)
                    .state
                    .get(uid)
                    .cloned()
                    .unwrap_or((PodState::Pending, None))
            });
            let abandoned = lock_book(&book).abandoned.clone();
            let next = plan
                .stages
                .iter()
                .enumerate()
                .find(|(_, s)| s.pods.iter().any(|pod| !abandoned.contains(&pod.uid)));
            let Some((i, stage)) = next else {
                if !last_reported_drained {
                    p.update(|st| {
                        st.phase = Phase::Drained;
                        st.current_stage = None;
                        st.pods_remaining = 0;
                        st.blockers.clear();
                        st.finished_at = Some(super::progress::now_time());
                    });
                    let mut ev = p.event(EventKind::DrainCompleted);
                    ev.message = format!("{} pods drained", p.status().pods_total);
                    p.emit(ev);
                    last_reported_drained = true;
                }
                // Stay drained: wake on any change of the node's pods.
                let mut changes = self.pods.changes();
                tokio::select! {
                    _ = changes.changed() => continue,
                    _ = cancel.cancelled() => return,
                }
            };
            last_reported_drained = false;
            let share = opts.deadline.map(|d| self.stage_share(&plan, i, d));
            let number = finished.len() + i + 1;
            self.run_stage(number, stage, &opts, share, &book, &cancel)
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
                finished.push(done);
            }
        }
    }

    /// Cordons and taints the node; retried until it works or the drain is
    /// cancelled.
    async fn mark_node(&self, opts: &DrainOptions, cancel: &CancellationToken) -> bool {
        let mut backoff = Backoff::with(200, 5_000);
        loop {
            match self.ops.mark(&self.taint, opts.cordon).await {
                Ok(change) => {
                    let mut ev = self.progress.event(EventKind::NodeMarked);
                    ev.message = format!(
                        "{}{}",
                        if change.cordoned { "cordoned; " } else { "" },
                        if change.tainted {
                            format!("tainted {}:{}", self.taint.key, self.taint.effect)
                        } else {
                            "taint already present".into()
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
    async fn delete_completed(&self, plan: &DrainPlan, book_: &Book) {
        for pod in &plan.completed {
            if !lock_book(book_).deleted.insert(pod.uid.clone()) {
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

    async fn run_stage(
        &self,
        number: usize,
        stage: &Stage,
        opts: &DrainOptions,
        share: Option<Duration>,
        book_: &Book,
        cancel: &CancellationToken,
    ) {
        let p = &self.progress;
        let pods: Vec<plan::PlannedPod> = {
            let b = lock_book(book_);
            stage
                .pods
                .iter()
                .filter(|x| !b.abandoned.contains(&x.uid))
                .cloned()
                .collect()
        };
        p.update(|st| {
            st.phase = Phase::Draining;
            st.current_stage = Some(number);
            if let Some(s) = st.stages.get_mut(number - 1) {
                s.state = StageState::Running;
            }
        });
        let mut ev = p.event(EventKind::StageStarted);
        ev.stage = Some(number);
        ev.pod_type = Some(stage.pod_type);
        ev.priority = Some(stage.priority);
        ev.message = format!("{} ({} pods)", stage.label, pods.len());
        p.emit(ev);

        if stage.pod_type == PodType::Static {
            self.stash_static(number, &pods);
        }
        let stage_cancel = cancel.child_token();
        let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for pod in pods.iter().cloned() {
            let this = self.clone();
            let sem = sem.clone();
            let c = stage_cancel.clone();
            let b = book_.clone();
            tasks.spawn(async move { this.drain_pod(number, pod, sem, b, c).await });
        }
        let started = Instant::now();
        let timeout = match (opts.stage_timeout, share) {
            (Some(t), Some(s)) => Some(t.min(s)),
            (t, s) => t.or(s),
        };
        let mut reported_timeout = false;
        loop {
            let timer = async {
                match timeout {
                    Some(t) if !reported_timeout => tokio::time::sleep_until(started + t).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                done = tasks.join_next() => {
                    if done.is_none() {
                        break;
                    }
                    self.refresh_blockers(book_);
                }
                _ = timer => {
                    reported_timeout = true;
                    let left: Vec<&plan::PlannedPod> = pods.iter().filter(|x| self.pods.contains(&x.uid)).collect();
                    let mut ev = p.event(EventKind::StageTimedOut);
                    ev.stage = Some(number);
                    ev.message = format!("{} pods still present after {:?}", left.len(), timeout.unwrap_or_default());
                    p.emit(ev);
                    p.update(|st| if let Some(s) = st.stages.get_mut(number - 1) { s.state = StageState::TimedOut });
                    if share.is_some() {
                        // Shutdown: escalate to deletion with what is left of the
                        // share as grace, so the stage still ends in time.
                        self.escalate(number, &left, share.unwrap_or_default().saturating_sub(started.elapsed())).await;
                    } else if opts.on_timeout == TimeoutPolicy::Skip {
                        let mut b = lock_book(book_);
                        for x in &left {
                            b.abandoned.insert(x.uid.clone());
                        }
                        drop(b);
                        stage_cancel.cancel();
                    }
                }
                _ = cancel.cancelled() => {
                    stage_cancel.cancel();
                    while tasks.join_next().await.is_some() {}
                    return;
                }
            }
        }
        let mut ev = p.event(EventKind::StageCompleted);
        ev.stage = Some(number);
        ev.message = stage.label.clone();
        p.emit(ev);
    }

    fn refresh_blockers(&self, book_: &Book) {
        let b = lock_book(book_);
        let blockers: Vec<Blocker> = b
            .state
            .iter()
            .filter(|(_, (state, _))| *state == PodState::Blocked)
            .map(|(uid, (_, why))| {
                let pod = self.pods.get(uid);
                let field = |f: &str| {
                    pod.as_ref()
                        .and_then(|p| p["metadata"][f].as_str())
                        .unwrap_or("")
                        .to_string()
                };
                Blocker {
                    namespace: field("namespace"),
                    pod: field("name"),
                    reason: why.clone().unwrap_or_default(),
                }
            })
            .filter(|b| !b.pod.is_empty())
            .collect();
        drop(b);
        self.progress.update(|st| {
            st.phase = if blockers.is_empty() {
                Phase::Draining
            } else {
                Phase::Blocked
            };
            st.blockers = blockers;
        });
    }

    fn set_pod(&self, book_: &Book, uid: &str, state: PodState, why: Option<String>) {
        lock_book(book_)
            .state
            .insert(uid.to_string(), (state, why.clone()));
        self.progress.update(|st| {
            for pod in st.stages.iter_mut().flat_map(|s| s.pods.iter_mut()) {
                if pod.uid == uid {
                    pod.state = state;
                    pod.blocker = why.clone();
                }
            }
            st.pods_remaining = st
                .stages
                .iter()
                .flat_map(|s| &s.pods)
                .filter(|p| p.state != PodState::Gone)
                .count();
        });
    }

    /// Moves the manifests of this stage's static pods out of the kubelet's
    /// directory, so the kubelet stops them.
    fn stash_static(&self, number: usize, pods: &[plan::PlannedPod]) {
        let p = &self.progress;
        let mut ev = p.event(EventKind::StaticPodsStashed);
        ev.stage = Some(number);
        ev.pod_type = Some(PodType::Static);
        let Some(stash) = &self.stash else {
            ev.event = EventKind::Warning;
            ev.message = "static pods are on the node but no static pod directory is configured; they cannot be drained".into();
            p.emit(ev);
            return;
        };
        let manifests = match stash.manifests() {
            Ok(m) => m,
            Err(e) => {
                ev.event = EventKind::Warning;
                ev.message = e.to_string();
                p.emit(ev);
                return;
            }
        };
        let node = self.ops.node();
        let files: Vec<String> = manifests
            .iter()
            .filter(|m| {
                pods.iter().any(|pod| {
                    m.pod_name
                        .as_deref()
                        .is_some_and(|n| StaticPodStash::mirror_pod_name(n, node) == pod.name)
                        && m.namespace.as_deref().unwrap_or("default") == pod.namespace
                })
            })
            .map(|m| m.file.clone())
            .collect();
        match stash.stash(Some(&files)) {
            Ok(report) => {
                ev.message = format!(
                    "moved {} manifests out of the kubelet's directory: {}",
                    files.len(),
                    files.join(", ")
                );
                let _ = report;
            }
            Err(e) => {
                ev.event = EventKind::Warning;
                ev.message = e.to_string();
            }
        }
        p.emit(ev);
    }

    /// Deletes the remaining pods of an overrun stage with a short grace.
    async fn escalate(&self, number: usize, pods: &[&plan::PlannedPod], left: Duration) {
        let grace = super::budget::escalation_grace(left);
        for pod in pods {
            if pod.pod_type == PodType::Static {
                continue;
            }
            let mut ev = self.progress.event(EventKind::StageEscalated);
            ev.stage = Some(number);
            ev.namespace = Some(pod.namespace.clone());
            ev.pod = Some(pod.name.clone());
            ev.message = format!(
                "deleting with a {grace}s grace period: the shutdown budget for this stage ran out"
            );
            self.progress.emit(ev);
            if let Err(e) = self
                .ops
                .delete_pod(&pod.namespace, &pod.name, &pod.uid, Some(grace))
                .await
            {
                let mut ev = self.progress.event(EventKind::PodError);
                ev.message = e.to_string();
                self.progress.emit(ev);
            }
        }
    }

    /// Evicts one pod and waits for it to be gone, retrying refusals.
    async fn drain_pod(
        &self,
        number: usize,
        pod: plan::PlannedPod,
        sem: Arc<Semaphore>,
        book_: Book,
        cancel: CancellationToken,
    ) {
        let p = &self.progress;
        let event = |kind: EventKind, message: String| {
            let mut ev = p.event(kind);
            ev.stage = Some(number);
            ev.namespace = Some(pod.namespace.clone());
            ev.pod = Some(pod.name.clone());
            ev.pod_type = Some(pod.pod_type);
            ev.priority = Some(pod.priority);
            ev.message = message;
            ev
        };
        let gone = |idx: &Index| !idx.contains(&pod.uid);
        if pod.action == PodAction::WaitTerminating || pod.pod_type == PodType::Static {
            self.set_pod(&book_, &pod.uid, PodState::Terminating, None);
        } else {
            let mut backoff = Backoff::with(250, 3_000);
            let mut last_blocker: Option<String> = None;
            loop {
                if gone(&self.pods) || cancel.is_cancelled() {
                    break;
                }
                let outcome = {
                    let _permit = sem.acquire().await;
                    p.emit(event(EventKind::PodEvicting, String::new()));
                    self.ops
                        .evict(&pod.namespace, &pod.name, &pod.uid, None)
                        .await
                };
                let (blocker, kind) = match outcome {
                    EvictionOutcome::Evicted => {
                        self.set_pod(&book_, &pod.uid, PodState::Terminating, None);
                        p.emit(event(EventKind::PodEvicted, String::new()));
                        break;
                    }
                    EvictionOutcome::Gone => break,
                    EvictionOutcome::Blocked { blocker } => (blocker, EventKind::PodBlocked),
                    EvictionOutcome::MultipleBudgets { message } => {
                        (message, EventKind::PodBlocked)
                    }
                    EvictionOutcome::Forbidden { message } => {
                        (format!("forbidden: {message}"), EventKind::PodError)
                    }
                    EvictionOutcome::Failed { message } => (message, EventKind::PodError),
                };
                self.set_pod(&book_, &pod.uid, PodState::Blocked, Some(blocker.clone()));
                self.refresh_blockers(&book_);
                if last_blocker.as_deref() != Some(blocker.as_str()) {
                    p.emit(event(kind, blocker.clone()));
                    last_blocker = Some(blocker);
                }
                let wait = backoff.next_delay();
                let pods = self.pods.clone();
                let uid = pod.uid.clone();
                // A budget in this namespace that allows a disruption again
                // (a replacement became ready) is worth an early retry.
                let budgets = self.budgets.clone();
                let ns = pod.namespace.clone();
                let named =
                    blocking_budget(last_blocker.as_deref().unwrap_or("")).map(str::to_string);
                // Only a change after this 429 counts: the budget's status may
                // still show the disruption that was just used up.
                let mut changes = budgets.changes();
                changes.mark_unchanged();
                let budget_allows = async move {
                    loop {
                        if changes.changed().await.is_err() {
                            return std::future::pending().await;
                        }
                        let allows = budgets.all().iter().any(|b| {
                            b["metadata"]["namespace"] == ns.as_str()
                                && named.as_deref().is_none_or(|n| b["metadata"]["name"] == n)
                                && b["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) > 0
                        });
                        if allows {
                            return;
                        }
                    }
                };
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = budget_allows => {}
                    _ = pods.wait_until(move |i| !i.contains(&uid)) => {}
                    _ = cancel.cancelled() => return,
                }
            }
        }
        let pods = self.pods.clone();
        let uid = pod.uid.clone();
        tokio::select! {
            _ = pods.wait_until(move |i| !i.contains(&uid)) => {}
            _ = cancel.cancelled() => return,
        }
        self.set_pod(&book_, &pod.uid, PodState::Gone, None);
        self.refresh_blockers(&book_);
        p.emit(event(EventKind::PodGone, String::new()));
    }

    /// Ends maintenance: removes maintd's taint, uncordons what maintd
    /// cordoned, puts static pod manifests back.
    pub async fn undo(&self) -> Result<(), String> {
        let p = &self.progress;
        p.emit(p.event(EventKind::UndoStarted));
        let mut errors = Vec::new();
        match self.ops.unmark(&self.taint).await {
            Ok(change) => {
                let mut ev = p.event(EventKind::NodeUnmarked);
                ev.message = format!(
                    "{}{}",
                    if change.untainted {
                        "taint removed; "
                    } else {
                        ""
                    },
                    if change.uncordoned {
                        "uncordoned"
                    } else {
                        "left cordon as it was"
                    }
                );
                p.emit(ev);
            }
            Err(e) => errors.push(e.to_string()),
        }
        if let Some(stash) = &self.stash {
            match stash.restore() {
                Ok(report) => {
                    if !report.restored.is_empty() || !report.conflicts.is_empty() {
                        let mut ev = p.event(EventKind::StaticPodsRestored);
                        ev.message = format!(
                            "restored {:?}; kept both copies of {:?}",
                            report.restored, report.conflicts
                        );
                        p.emit(ev);
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            p.update(|st| {
                st.phase = Phase::Idle;
                st.current_stage = None;
                st.blockers.clear();
                st.last_error = None;
            });
            p.emit(p.event(EventKind::UndoCompleted));
            Ok(())
        } else {
            let msg = errors.join("; ");
            p.update(|st| st.last_error = Some(msg.clone()));
            let mut ev = p.event(EventKind::Warning);
            ev.message = msg.clone();
            p.emit(ev);
            Err(msg)
        }
    }
}

/// The budget a 429 names ("The disruption budget web needs 2 healthy pods
/// and has 2 currently"), so a blocked pod wakes only when that one allows
/// a disruption again.
fn blocking_budget(message: &str) -> Option<&str> {
    message
        .strip_prefix("The disruption budget ")?
        .split(" needs ")
        .next()
}

#[cfg(test)]
mod tests {
    use super::blocking_budget;

    #[test]
    fn the_blocking_budget_is_read_from_the_api_message() {
        assert_eq!(
            blocking_budget("The disruption budget web needs 2 healthy pods and has 2 currently"),
            Some("web")
        );
        assert_eq!(
            blocking_budget("admission webhook \"virt\" denied: VMI is migrating"),
            None
        );
        assert_eq!(blocking_budget(""), None);
    }
}
