//! One stage of the plan: its pods drained in parallel, and — under a
//! deadline — the pods that would not leave within the stage's share
//! deleted early enough to still get a grace period (budget.rs decides when
//! and with which grace; this only applies it).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::bounds::later;
use tokio_util::sync::CancellationToken;

use super::{DrainOptions, Drainer, TimeoutPolicy};
use crate::drain::budget;
use crate::drain::budget_watches::BudgetHold;
use crate::drain::plan::{PlannedPod, PodAction, PodType, Stage};
use crate::drain::progress::{Blocker, EventKind, Phase, PodState, StageState};
use crate::index::sleep_until;

/// A pod's deletion planned by the shutdown budget, not sent yet.
struct Planned {
    at: Instant,
    uid: String,
    grace_seconds: i64,
}

/// How long a stage waits for the first list of its namespaces' budgets
/// before its pods start asking.
const FIRST_BUDGET_LIST: Duration = Duration::from_secs(2);
/// The same under a shutdown's deadline, where every second is the pods'.
const FIRST_BUDGET_LIST_UNDER_DEADLINE: Duration = Duration::from_millis(250);

impl Drainer {
    pub(super) async fn run_stage(
        &self,
        number: usize,
        stage: &Stage,
        opts: &DrainOptions,
        share: Option<Duration>,
        cancel: &CancellationToken,
        budget_watches: &mut BTreeMap<String, BudgetHold>,
    ) {
        let p = &self.progress;
        let pods: Vec<PlannedPod> = {
            let b = self.book();
            stage
                .pods
                .iter()
                .filter(|x| !b.abandoned.contains_key(&x.uid))
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

        let mut unstashable = if stage.pod_type == PodType::Static {
            self.stash_static(number, &pods)
        } else {
            HashMap::new()
        };
        // The budgets of every namespace the stage evicts in, watched
        // until the drain ends (`budget_watches`): each pod then asks only
        // while its budget has a disruption to give, rather than all asking
        // at once and all but a few being refused. Their first list is
        // waited for briefly, and more briefly still under a shutdown's
        // deadline: without it, pods ask as before.
        let mut namespaces: Vec<&str> = pods
            .iter()
            .filter(|x| x.pod_type != PodType::Static && x.action == PodAction::Evict)
            .map(|x| x.namespace.as_str())
            .filter(|ns| !budget_watches.contains_key(*ns))
            .collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        let first_list = if share.is_some() {
            FIRST_BUDGET_LIST_UNDER_DEADLINE
        } else {
            FIRST_BUDGET_LIST
        };
        let opened = futures::future::join_all(
            namespaces
                .iter()
                .map(|ns| self.budgets.watch_namespace(ns, first_list, cancel)),
        )
        .await;
        budget_watches.extend(namespaces.iter().map(|ns| ns.to_string()).zip(opened));
        let stage_cancel = cancel.child_token();
        let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        // Per pod: stops its eviction retries once it has been deleted.
        let mut stop_evicting: HashMap<String, CancellationToken> = HashMap::new();
        for pod in pods.iter().cloned() {
            let this = self.clone();
            let sem = sem.clone();
            let c = stage_cancel.clone();
            let stop = stage_cancel.child_token();
            stop_evicting.insert(pod.uid.clone(), stop.clone());
            let unstashed = unstashable.remove(&pod.uid);
            tasks.spawn(async move { this.drain_pod(number, pod, sem, c, stop, unstashed).await });
        }
        let started = Instant::now();
        let timeout = match (opts.stage_timeout, share) {
            (Some(t), Some(s)) => Some(t.min(s)),
            (t, s) => t.or(s),
        };
        // Under a deadline the stage's time is its share (or its timeout, if
        // shorter): each pod is deleted by Karpenter's rule; static pods
        // cannot be deleted through the API (their manifests are stashed).
        let mut schedule: Vec<Planned> = match (share, timeout) {
            (Some(_), Some(t)) => pods
                .iter()
                .filter(|x| x.pod_type != PodType::Static)
                .map(|x| {
                    let e = budget::escalation(t, x.grace_seconds);
                    Planned {
                        at: later(started, e.at),
                        uid: x.uid.clone(),
                        grace_seconds: e.grace_seconds,
                    }
                })
                .collect(),
            _ => Vec::new(),
        };
        schedule.sort_by_key(|d| d.at);
        let mut schedule = std::collections::VecDeque::from(schedule);
        let mut deletions: Vec<(Duration, i64)> = Vec::new();
        let mut reported_timeout = false;
        loop {
            let escalate_at = schedule.front().map(|d| d.at);
            // Only once every planned deletion is out: the last grace counts.
            let give_up_at = match (share, timeout) {
                (Some(_), Some(t)) if schedule.is_empty() => {
                    Some(later(started, budget::stage_gives_up_at(t, &deletions)))
                }
                _ => None,
            };
            let timed_out_at = match timeout {
                Some(t) if share.is_none() && !reported_timeout => Some(later(started, t)),
                _ => None,
            };
            tokio::select! {
                // Cancellation first: nothing more goes out once it is seen.
                biased;
                _ = cancel.cancelled() => {
                    stage_cancel.cancel();
                    while tasks.join_next().await.is_some() {}
                    return;
                }
                done = tasks.join_next() => {
                    if done.is_none() {
                        break;
                    }
                    self.refresh_blockers();
                }
                _ = sleep_until(escalate_at) => {
                    let now = Instant::now();
                    let share_end = later(started, timeout.unwrap_or_default());
                    let mut due_now = Vec::new();
                    while schedule.front().is_some_and(|d| d.at <= now) {
                        let Some(due) = schedule.pop_front() else { break };
                        let Some(pod) = pods.iter().find(|x| x.uid == due.uid) else { continue };
                        if !self.pods.contains(&pod.uid) {
                            continue;
                        }
                        if let Some(stop) = stop_evicting.get(&pod.uid) {
                            stop.cancel();
                        }
                        let grace = budget::deletion_grace(
                            due.grace_seconds,
                            share_end.saturating_duration_since(now),
                            opts.deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now)),
                        );
                        due_now.push((pod, grace));
                    }
                    // The deletions that fall due together go out together:
                    // one slow answer must not eat into the others' grace.
                    let sent = futures::future::join_all(
                        due_now.iter().map(|(pod, grace)| self.escalate(number, pod, *grace)),
                    );
                    tokio::select! {
                        biased;
                        _ = cancel.cancelled() => continue,
                        sent = sent => {
                            for ((_, grace), ok) in due_now.iter().zip(sent) {
                                if ok {
                                    deletions.push((now.saturating_duration_since(started), *grace));
                                }
                            }
                        }
                    }
                }
                _ = sleep_until(give_up_at) => {
                    self.give_up(number, &pods, timeout.unwrap_or_default());
                    stage_cancel.cancel();
                    while tasks.join_next().await.is_some() {}
                    break;
                }
                _ = sleep_until(timed_out_at) => {
                    reported_timeout = true;
                    let left: Vec<&PlannedPod> = pods.iter().filter(|x| self.pods.contains(&x.uid)).collect();
                    self.report_timeout(number, left.len(), timeout.unwrap_or_default());
                    if opts.on_timeout == TimeoutPolicy::Skip {
                        let mut b = self.book();
                        for x in &left {
                            b.abandoned.insert(x.uid.clone(), "left behind: its stage timed out (--on-stage-timeout=skip)".into());
                        }
                        drop(b);
                        stage_cancel.cancel();
                    }
                }
            }
        }
        let mut ev = p.event(EventKind::StageCompleted);
        ev.stage = Some(number);
        ev.message = stage.label.clone();
        p.emit(ev);
    }

    fn report_timeout(&self, number: usize, left: usize, after: Duration) {
        let p = &self.progress;
        let mut ev = p.event(EventKind::StageTimedOut);
        ev.stage = Some(number);
        ev.message = format!("{left} pods still present after {after:?}");
        p.emit(ev);
        p.update(|st| {
            if let Some(s) = st.stages.get_mut(number - 1) {
                s.state = StageState::TimedOut;
            }
        });
    }

    /// The stage's time under a deadline is over and every pod it deleted
    /// has had its grace: the pods still there are given up on, each with
    /// why, and the next stage starts.
    fn give_up(&self, number: usize, pods: &[PlannedPod], share: Duration) {
        let left: Vec<(&PlannedPod, String)> = pods
            .iter()
            .filter_map(|x| {
                let obj = self.pods.get(&x.uid)?;
                let why = if x.pod_type == PodType::Static {
                    self.book()
                        .state
                        .get(&x.uid)
                        .and_then(|(_, why)| why.clone())
                        .unwrap_or_else(|| {
                            "the kubelet did not stop it within its stage's share of the shutdown budget".into()
                        })
                } else {
                    format!(
                        "still on the node when its deletion's grace period ran out{}",
                        super::evict::finalizers_note(&obj)
                    )
                };
                Some((x, why))
            })
            .collect();
        if left.is_empty() {
            return;
        }
        self.report_timeout(number, left.len(), share);
        for (x, why) in left {
            let mut b = self.book();
            b.abandoned.insert(x.uid.clone(), why.clone());
            b.out_of_time.insert(x.uid.clone());
            drop(b);
            self.set_pod(&x.uid, PodState::Blocked, Some(why));
        }
    }

    /// Deletes a pod that would not leave in time, with `grace`; whether the
    /// deletion went out.
    async fn escalate(&self, number: usize, pod: &PlannedPod, grace: i64) -> bool {
        let mut ev = self.progress.event(EventKind::StageEscalated);
        ev.stage = Some(number);
        ev.namespace = Some(pod.namespace.clone());
        ev.pod = Some(pod.name.clone());
        ev.pod_type = Some(pod.pod_type);
        ev.priority = Some(pod.priority);
        ev.message = format!(
            "deleting with a {grace}s grace period so it is gone when this stage's share of the shutdown budget ends"
        );
        self.progress.emit(ev);
        match self
            .ops
            .delete_pod(&pod.namespace, &pod.name, &pod.uid, Some(grace))
            .await
        {
            Ok(()) => {
                self.set_pod(&pod.uid, PodState::Terminating, None);
                true
            }
            Err(e) => {
                let mut ev = self.progress.event(EventKind::PodError);
                ev.stage = Some(number);
                ev.namespace = Some(pod.namespace.clone());
                ev.pod = Some(pod.name.clone());
                ev.message = format!("deleting {}/{}: {e}", pod.namespace, pod.name);
                self.progress.emit(ev);
                // It still holds the stage until the share is over: say why.
                self.set_pod(
                    &pod.uid,
                    PodState::Blocked,
                    Some(format!(
                        "deleting it to fit the shutdown budget failed: {e}"
                    )),
                );
                self.refresh_blockers();
                false
            }
        }
    }

    /// Every pod that holds the stage now, with why, into the status.
    pub(super) fn refresh_blockers(&self) {
        let b = self.book();
        let mut blockers: Vec<Blocker> = b
            .state
            .iter()
            .filter(|(uid, (state, _))| {
                *state == PodState::Blocked && !b.abandoned.contains_key(*uid)
            })
            .filter_map(|(uid, (_, why))| {
                let pod = self.pods.get(uid)?;
                Some(Blocker {
                    namespace: pod["metadata"]["namespace"].as_str()?.to_string(),
                    pod: pod["metadata"]["name"].as_str()?.to_string(),
                    reason: why.clone().unwrap_or_default(),
                })
            })
            .collect();
        drop(b);
        // A stable order, so the status does not change for nothing.
        blockers.sort_by(|a, b| (&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)));
        self.progress.update(|st| {
            st.phase = if blockers.is_empty() {
                Phase::Draining
            } else {
                Phase::Blocked
            };
            st.blockers = blockers;
        });
    }

    pub(super) fn set_pod(&self, uid: &str, state: PodState, why: Option<String>) {
        self.book()
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
}
