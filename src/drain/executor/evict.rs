//! One pod of a stage: evicted (429s retried and reported by name), then
//! waited for until it is gone; a pod that stays past its grace period, or
//! a static pod whose manifest could not be moved, is named as a blocker.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Drainer;
use super::request::Requested;
use crate::cluster::EvictionOutcome;
use crate::drain::budget_watches::{BudgetHold, Claim, Claimant, Ticket};
use crate::drain::plan::{PlannedPod, PodAction, PodInfo, PodType};
use crate::drain::progress::{DrainEvent, EventKind, PodState};
use crate::index::{Backoff, sleep_until};

/// What one eviction of a pod came to.
enum Asked {
    /// Evicted, gone, or no longer to be evicted (`stop_evicting`).
    Going,
    /// The drain was cancelled: nothing more is sent.
    Cancelled,
    /// Refused: why, as what kind of event, and whether by a budget the
    /// watch follows.
    Refused(String, EventKind, bool),
}

/// A kubelet reports a stopped pod a moment after its grace period ends;
/// this long after, the pod is stuck rather than slow.
const OVERDUE_AFTER_GRACE: Duration = Duration::from_secs(5);

/// How long a pod its budget refused waits before it is asked again when
/// the budget's watch says nothing: the watch wakes it as soon as the
/// budget allows a disruption, so this is only a backstop for a missed
/// event (at 500 draining nodes with 30 blocked pods each, a 3 s retry was
/// 5,000 refused evictions a second). Jittered, from this to half again.
const BUDGET_BACKSTOP: Duration = Duration::from_secs(30);

/// How long a budget's status stays unchanged after an eviction's write
/// before the next eviction under it is sent, and how long after the
/// answer that is waited for at most. Kubernetes 1.37's disruption
/// controller wrote a budget's status again 4 ms after an eviction's write
/// and often once more within 40 ms (it drops the pod from
/// `disruptedPods` once it sees it deleted); an eviction whose own write
/// lands among those is refused a conflict and read again 500 ms later.
const BUDGET_STILL: Duration = Duration::from_millis(25);
/// (See `BUDGET_STILL`.)
const BUDGET_STILL_AT_MOST: Duration = Duration::from_millis(150);

/// How long an eviction under a budget keeps the next one under the same
/// budget waiting when the budget's watch has not shown its write yet (see
/// `Ticket::turn`). An eviction whose write of the budget's status loses
/// to another write (the disruption controller's, which comes in bursts as
/// replacements turn Ready) is read again by the API server 500 ms later;
/// the next pod the budget allows need not wait that out. Kubernetes 1.37
/// on two busy cores granted evictions in 120 ms (median of 106); 8 of
/// them took 400 ms or more, and each held up every pod behind it under
/// its budget. Three times what the budget's evictions usually take, and
/// at least 250 ms, so that a slow API server does not make the agent's
/// own evictions race one another; 1 s before the first is known.
fn turn_held_at_most(usual: Option<Duration>) -> Duration {
    usual.map_or(Duration::from_secs(1), |u| {
        (u * 3).clamp(Duration::from_millis(250), Duration::from_secs(5))
    })
}

impl Drainer {
    /// Evicts one pod and waits for it to be gone, retrying refusals.
    /// `stop_evicting` ends the evictions (the pod was deleted instead) but
    /// not the wait; `cancel` ends both, and once it is seen nothing more is
    /// sent. `unstashed` says why a static pod's manifest could not be moved.
    pub(super) async fn drain_pod(
        &self,
        number: usize,
        pod: PlannedPod,
        sem: Arc<Semaphore>,
        cancel: CancellationToken,
        stop_evicting: CancellationToken,
        unstashed: Option<String>,
    ) {
        let p = &self.progress;
        let event = |kind: EventKind, message: String| pod_event(p, number, &pod, kind, message);
        let started = Instant::now();
        if let Some(obj) = self.pods.get(&pod.uid) {
            let claims = crate::drain::volumes::claims_of(&obj);
            if !claims.is_empty() {
                let mut b = self.book();
                b.claims.extend(claims);
                b.volumes_settled = false;
            }
        }
        if pod.pod_type == PodType::Static {
            match unstashed {
                Some(why) => {
                    self.set_pod(&pod.uid, PodState::Blocked, Some(why));
                    self.refresh_blockers();
                }
                None => self.set_pod(&pod.uid, PodState::Terminating, None),
            }
        } else if pod.action == PodAction::WaitTerminating {
            self.set_pod(&pod.uid, PodState::Terminating, None);
        } else if pod.action == PodAction::WaitCompleted {
            // Completed, or cancelled: nothing more to do here. Deleted
            // instead: waited for below, as any pod on its way out.
            if self
                .wait_completed(number, &pod, &cancel, &stop_evicting)
                .await
                != Some(false)
            {
                return;
            }
        } else {
            let own = self
                .pods
                .get(&pod.uid)
                .and_then(|o| self.requests.responders_for(&o));
            let requested = match own {
                Some(responders) => {
                    self.request_eviction(number, &pod, &responders, &cancel, &stop_evicting)
                        .await
                }
                None => Requested::Evict,
            };
            match requested {
                Requested::Cancelled => return,
                Requested::Going => {}
                Requested::Evict => {
                    self.evict_pod(number, &pod, &sem, &cancel, &stop_evicting)
                        .await;
                    if cancel.is_cancelled() {
                        return;
                    }
                }
            }
        }
        if !self.wait_gone(&pod, started, &cancel).await {
            return;
        }
        self.set_pod(&pod.uid, PodState::Gone, None);
        self.refresh_blockers();
        p.emit(event(EventKind::PodGone, String::new()));
    }

    /// Evicts the pod through the Eviction API until it is on its way out,
    /// retrying refusals: a budget's when its watch says it allows a
    /// disruption (or a backstop), anything else with a capped backoff.
    /// Returns when the pod is going, when `stop_evicting` ends the
    /// evictions, or when `cancel` ends the drain (the caller checks).
    async fn evict_pod(
        &self,
        number: usize,
        pod: &PlannedPod,
        sem: &Semaphore,
        cancel: &CancellationToken,
        stop_evicting: &CancellationToken,
    ) {
        let p = &self.progress;
        let event = |kind: EventKind, message: String| pod_event(p, number, pod, kind, message);
        let mut backoff = Backoff::with(250, 3_000);
        let mut last_blocker: Option<String> = None;
        // The budget watch this pod holds while a budget blocks it; it goes
        // with the block (or with this function).
        let mut hold: Option<BudgetHold> = None;
        // The disruption the hold's wake-up took for this pod's next ask.
        let mut woken: Option<Ticket> = None;
        let labels = self
            .pods
            .get(&pod.uid)
            .map(|o| PodInfo::from_json(&o).labels)
            .unwrap_or_default();
        let claimant = Claimant {
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        loop {
            if !self.pods.contains(&pod.uid) || stop_evicting.is_cancelled() {
                break;
            }
            // A budget this agent watches with no disruption left for this
            // pod: asking would only be refused. Not once the pod holds a
            // watch: a wake-up is its turn to ask.
            let claim = match hold {
                None => self.budgets.claim(&pod.namespace, &claimant, &labels),
                Some(_) => Claim::Ask(woken.take()),
            };
            let (blocker, kind, by_budget) = match claim {
                Claim::Wait(budget, blocker, paced) => {
                    hold = Some(*budget);
                    let kind = if paced {
                        EventKind::PodQueued
                    } else {
                        EventKind::PodBlocked
                    };
                    (blocker, kind, true)
                }
                Claim::Ask(ticket) => match self
                    .ask(number, pod, sem, cancel, stop_evicting, &mut hold, ticket)
                    .await
                {
                    Asked::Going => break,
                    Asked::Cancelled => return,
                    Asked::Refused(blocker, kind, by_budget) => (blocker, kind, by_budget),
                },
            };
            self.set_pod(&pod.uid, PodState::Blocked, Some(blocker.clone()));
            self.refresh_blockers();
            if last_blocker.as_deref() != Some(blocker.as_str()) {
                p.emit(event(kind, blocker.clone()));
                last_blocker = Some(blocker);
            }
            let wait = if by_budget {
                BUDGET_BACKSTOP.mul_f64(rand::random_range(1.0..1.5))
            } else {
                backoff.next_delay()
            };
            let pods = self.pods.clone();
            let uid = pod.uid.clone();
            let budget_allows = hold.as_ref().map(BudgetHold::allows);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = stop_evicting.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
                ticket = async {
                    match budget_allows {
                        Some(allows) => allows.await,
                        None => std::future::pending().await,
                    }
                } => woken = ticket,
                _ = pods.wait_until(move |i| !i.contains(&uid)) => {}
            }
        }
    }

    /// One eviction of the pod, once a permit allows it: whether it is on
    /// its way out, or why not (and whether a budget the watch follows
    /// said so). `hold` follows the budget a refusal names; `ticket`, the
    /// budget's disruption the pod took, is given back if it does not ask.
    // What one eviction needs and changes, each named: a struct made for
    // one call would only rename them.
    #[allow(clippy::too_many_arguments)]
    async fn ask(
        &self,
        number: usize,
        pod: &PlannedPod,
        sem: &Semaphore,
        cancel: &CancellationToken,
        stop_evicting: &CancellationToken,
        hold: &mut Option<BudgetHold>,
        ticket: Option<Ticket>,
    ) -> Asked {
        let p = &self.progress;
        let event = |kind: EventKind, message: String| pod_event(p, number, pod, kind, message);
        // One eviction under a budget at a time (see `Ticket::turn`), taken
        // before a permit so that a pod waiting its turn holds none; pods
        // of other budgets, and pods with none, go on meanwhile.
        let mut turn = match &ticket {
            Some(t) => tokio::select! {
                biased;
                _ = cancel.cancelled() => return Asked::Cancelled,
                _ = stop_evicting.cancelled() => return Asked::Going,
                turn = t.turn() => Some(turn),
            },
            None => None,
        };
        let permit = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Asked::Cancelled,
            _ = stop_evicting.cancelled() => return Asked::Going,
            permit = sem.acquire() => permit,
        };
        // The permit can come long after the drain was cancelled or the pod
        // deleted: check again, right before sending.
        if cancel.is_cancelled() {
            return Asked::Cancelled;
        }
        if stop_evicting.is_cancelled() || !self.pods.contains(&pod.uid) {
            return Asked::Going;
        }
        p.emit(event(EventKind::PodEvicting, String::new()));
        // The budgets' changes as of the ask: a status that comes with the
        // refusal still wakes the pod.
        let seen = self.budgets.changes_of(&pod.namespace);
        let outcome = {
            let evicting = self.ops.evict(&pod.namespace, &pod.name, &pod.uid, None);
            tokio::pin!(evicting);
            match (&turn, &ticket) {
                (Some(_), Some(ticket)) => {
                    let sent = Instant::now();
                    let counted = ticket.counted(&pod.name);
                    // Polled only once its write is counted: the stillness
                    // is measured from then.
                    let still = ticket.still_for(BUDGET_STILL);
                    let held = tokio::time::sleep(turn_held_at_most(ticket.usual()));
                    tokio::pin!(counted, still, held);
                    let mut measured = false;
                    loop {
                        tokio::select! {
                            biased;
                            outcome = &mut evicting => {
                                if !measured {
                                    ticket.took(sent.elapsed());
                                }
                                break outcome;
                            }
                            () = &mut counted, if !measured => {
                                ticket.took(sent.elapsed());
                                measured = true;
                            }
                            () = &mut still, if measured && turn.is_some() => {
                                // Its write landed and the disruption
                                // controller's answers to it with it: the
                                // next pod of the budget reads them all.
                                turn = None;
                            }
                            () = &mut held, if turn.is_some() => {
                                // Held inside the API server: the next pod
                                // of the budget asks meanwhile.
                                turn = None;
                            }
                        }
                    }
                }
                _ => evicting.await,
            }
        };
        drop(permit);
        // Refused by a budget the 429 names, which the watch follows: the
        // watch wakes the pod, the timer is a backstop. Any other 429 (the
        // API server's own throttling) keeps the capped backoff.
        let by_budget = matches!(
            &outcome,
            EvictionOutcome::Blocked { blocker } if blocking_budget(blocker).is_some()
        );
        // Granted before its write and the answers to it were seen to
        // settle: the turn passes on once they have, or soon regardless.
        if let (Some(held), Some(ticket), EvictionOutcome::Evicted) =
            (turn.take(), &ticket, &outcome)
        {
            let still = ticket.still_for(BUDGET_STILL);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(BUDGET_STILL_AT_MOST, still).await;
                drop(held);
            });
        }
        // The budget's disruption stays taken while its status does not
        // count a granted eviction yet; refused by the budget, the pod
        // waits for the next status. Any other outcome gives it back, to
        // this pod's next ask or to another's.
        if let Some(ticket) = ticket {
            match &outcome {
                EvictionOutcome::Evicted => ticket.granted(),
                _ if by_budget => ticket.refused(),
                _ => drop(ticket),
            }
        }
        drop(turn);
        let (blocker, kind) = match outcome {
            EvictionOutcome::Evicted => {
                self.set_pod(&pod.uid, PodState::Terminating, None);
                p.emit(event(EventKind::PodEvicted, String::new()));
                return Asked::Going;
            }
            EvictionOutcome::Gone => return Asked::Going,
            EvictionOutcome::Blocked { blocker } => {
                let named = blocking_budget(&blocker);
                if !hold
                    .as_ref()
                    .is_some_and(|h| h.covers(&pod.namespace, named))
                {
                    *hold = Some(self.budgets.hold(
                        &pod.namespace,
                        named,
                        &Claimant {
                            name: pod.name.clone(),
                            uid: pod.uid.clone(),
                        },
                    ));
                }
                if let Some(h) = hold.as_ref() {
                    h.seen_from(seen);
                }
                (blocker, EventKind::PodBlocked)
            }
            // No budget change lifts these: the backoff retries.
            EvictionOutcome::MultipleBudgets { message } => {
                *hold = None;
                (message, EventKind::PodBlocked)
            }
            EvictionOutcome::Forbidden { message } => {
                *hold = None;
                (format!("forbidden: {message}"), EventKind::PodError)
            }
            // Says nothing about the budget: a pod blocked before is still
            // blocked, and keeps its watch.
            EvictionOutcome::Failed { message } => (message, EventKind::PodError),
        };
        Asked::Refused(blocker, kind, by_budget)
    }

    /// A `wait-completed` pod: named as what the stage waits for until it
    /// finishes. Some(true): it completed (the next plan deletes it as any
    /// completed pod); Some(false): it was deleted instead (a shutdown's
    /// deadline) and is to be waited for as any pod on its way out; None:
    /// cancelled.
    async fn wait_completed(
        &self,
        number: usize,
        pod: &PlannedPod,
        cancel: &CancellationToken,
        stop_evicting: &CancellationToken,
    ) -> Option<bool> {
        let why = self
            .pods
            .get(&pod.uid)
            .and_then(|o| crate::drain::plan::wait_completed(&PodInfo::from_json(&o)))
            .unwrap_or_else(|| format!("drain={}", crate::drain::plan::WAIT_COMPLETED));
        let reason = format!("not evicted ({why}): the drain waits for it to complete");
        self.set_pod(&pod.uid, PodState::Blocked, Some(reason.clone()));
        self.refresh_blockers();
        let p = &self.progress;
        p.emit(pod_event(p, number, pod, EventKind::PodBlocked, reason));
        let uid = pod.uid.clone();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            _ = stop_evicting.cancelled() => Some(false),
            _ = self.pods.wait_until(move |i| i.get(&uid).is_none_or(|o| finished(&o))) => {
                if self.pods.contains(&pod.uid) {
                    self.set_pod(&pod.uid, PodState::Gone, None);
                    self.refresh_blockers();
                    p.emit(pod_event(p, number, pod, EventKind::PodGone, "completed".into()));
                    Some(true)
                } else {
                    Some(false)
                }
            }
        }
    }

    /// Waits until the pod is gone; false if cancelled first. A pod still
    /// there well past its grace period is named as a blocker, with what
    /// holds it, while the wait goes on.
    async fn wait_gone(
        &self,
        pod: &PlannedPod,
        since: Instant,
        cancel: &CancellationToken,
    ) -> bool {
        let mut changes = self.pods.changes();
        let mut flagged = false;
        loop {
            let Some(obj) = self.pods.get(&pod.uid) else {
                return true;
            };
            let overdue_at = if flagged {
                None
            } else {
                self.overdue_at(pod, &obj, since)
            };
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return false,
                r = changes.changed() => {
                    if r.is_err() {
                        // The index is gone with the agent: nothing to wait for.
                        cancel.cancelled().await;
                        return false;
                    }
                }
                _ = sleep_until(overdue_at) => {
                    flagged = true;
                    let why = self.overdue_reason(pod, &obj);
                    self.set_pod(&pod.uid, PodState::Blocked, Some(why));
                    self.refresh_blockers();
                }
            }
        }
    }

    /// When a pod that is on its way out counts as stuck: its deletion's
    /// grace period (deletionTimestamp) plus a margin; for a static pod
    /// whose manifest was moved, its own grace period after the move.
    fn overdue_at(&self, pod: &PlannedPod, obj: &Value, since: Instant) -> Option<Instant> {
        if pod.pod_type == PodType::Static {
            if self.book().state.get(&pod.uid).map(|s| s.0) == Some(PodState::Blocked) {
                return None;
            }
            let grace = crate::bounds::seconds(pod.grace_seconds);
            return Some(crate::bounds::later(since, grace + OVERDUE_AFTER_GRACE));
        }
        let deletion: jiff::Timestamp = obj["metadata"]["deletionTimestamp"]
            .as_str()?
            .parse()
            .ok()?;
        let left = deletion.duration_since(jiff::Timestamp::now());
        let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
        Some(crate::bounds::later(
            Instant::now(),
            left.min(crate::bounds::FAR) + OVERDUE_AFTER_GRACE,
        ))
    }

    fn overdue_reason(&self, pod: &PlannedPod, obj: &Value) -> String {
        if pod.pod_type == PodType::Static {
            let dir = self
                .stash
                .as_ref()
                .map(|s| s.manifest_dir.display().to_string())
                .unwrap_or_default();
            return format!(
                "its manifest was moved out of {dir} but the kubelet has not stopped it within its {}s grace period; is the kubelet running?",
                pod.grace_seconds
            );
        }
        let finalizers = finalizers_note(obj);
        if finalizers.is_empty() {
            "still terminating past its grace period; the kubelet has not confirmed it stopped (is the node's kubelet running?)".into()
        } else {
            format!("still terminating past its grace period{finalizers}")
        }
    }
}

/// Whether a pod has run to its end (Succeeded or Failed).
fn finished(obj: &Value) -> bool {
    matches!(
        obj["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// "; held by finalizers a, b" when the pod has finalizers, else "".
pub(super) fn finalizers_note(obj: &Value) -> String {
    let names: Vec<&str> = obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if names.is_empty() {
        String::new()
    } else {
        format!("; held by finalizers {}", names.join(", "))
    }
}

pub(super) fn pod_event(
    p: &crate::drain::progress::Progress,
    number: usize,
    pod: &PlannedPod,
    kind: EventKind,
    message: String,
) -> DrainEvent {
    let mut ev = p.event(kind);
    ev.stage = Some(number);
    ev.namespace = Some(pod.namespace.clone());
    ev.pod = Some(pod.name.clone());
    ev.pod_type = Some(pod.pod_type);
    ev.priority = Some(pod.priority);
    ev.message = message;
    ev.owner = pod.owner.clone();
    ev
}

/// The budget a 429 names ("The disruption budget web needs 2 healthy pods
/// and has 2 currently", or "The disruption budget web is still being
/// processed by the server."), so a blocked pod watches only that one.
/// Budget names hold no spaces.
pub(crate) fn blocking_budget(message: &str) -> Option<&str> {
    message
        .strip_prefix("The disruption budget ")?
        .split(' ')
        .next()
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{blocking_budget, finalizers_note, turn_held_at_most};
    use serde_json::json;
    use std::time::Duration;

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
        assert_eq!(
            blocking_budget("The disruption budget web is still being processed by the server."),
            Some("web")
        );
        assert_eq!(blocking_budget("The disruption budget "), None);
        assert_eq!(blocking_budget(""), None);
    }

    #[test]
    fn finalizers_are_named_and_malformed_ones_ignored() {
        let pod = json!({"metadata": {"finalizers": ["example.com/a", 7, "b"]}});
        assert_eq!(
            finalizers_note(&pod),
            "; held by finalizers example.com/a, b"
        );
        assert_eq!(finalizers_note(&json!({"metadata": {}})), "");
        assert_eq!(
            finalizers_note(&json!({"metadata": {"finalizers": "x"}})),
            ""
        );
    }

    /// An eviction gives its budget's turn up unanswered only well past
    /// what the budget's evictions usually take: never sooner than 250 ms,
    /// nor later than 5 s, and after 1 s before the first is known.
    #[test]
    fn the_turn_is_held_three_times_the_usual_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(turn_held_at_most(None), ms(1_000));
        assert_eq!(turn_held_at_most(Some(ms(10))), ms(250));
        assert_eq!(turn_held_at_most(Some(ms(200))), ms(600));
        assert_eq!(turn_held_at_most(Some(ms(3_000))), ms(5_000));
    }
}
