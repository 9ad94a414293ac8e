//! What the agent tells the cluster about its node: its own `NodeDrain`
//! object (the node's full status, written only by this agent, at most once
//! a second while it changes), maintd's condition on the Node (changed only
//! on phase transitions: every write to a Node goes to every component that
//! watches Nodes), and medik8s' status. The NodeMaintenance aggregates are
//! written by one agent at a time ([`writer`]). Every call is bounded by a
//! timeout; failures are retried ever more slowly.

mod apply;
pub mod conditions;
pub mod events;
mod medik8s;
pub mod notify;
pub mod writer;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api;
use crate::api::nodedrain::{self, NODEDRAINS_PATH, NodeDrainStatus};
use crate::drain::progress::Progress;
use crate::index::Index;
use crate::inhibitor::InhibitorStatus;
use crate::trigger::maintenance::MaintenanceTrigger;
use apply::Applied;

/// (type, status, reason) of a condition written.
type ConditionKey = (&'static str, &'static str, &'static str);

/// Writes this node's status objects.
pub struct StatusReporter {
    pub client: kube::Client,
    pub node: String,
    pub progress: Progress,
    pub maintenance: MaintenanceTrigger,
    /// medik8s' NodeMaintenance objects, with `--medik8s`.
    pub medik8s: Option<MaintenanceTrigger>,
    pub node_index: Index,
    /// The turn of the agent's writes of its Node (see
    /// [`crate::cluster::NodeWrites`]).
    pub node_writes: crate::cluster::NodeWrites,
    /// The shutdown lock, when the agent holds one.
    pub inhibitor: Option<tokio::sync::watch::Receiver<InhibitorStatus>>,
    /// Counts the writes (`maintd_status_writes_total`).
    pub writes: prometheus_client::metrics::counter::Counter,
}

const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// When the reporter may write again: at once after a success, after a
/// growing delay (1 s doubling up to 60 s, with jitter) after failures.
struct RetryPace {
    backoff: crate::index::Backoff,
    not_before: Option<tokio::time::Instant>,
}

impl Default for RetryPace {
    fn default() -> Self {
        RetryPace {
            backoff: crate::index::Backoff::with(1_000, 60_000),
            not_before: None,
        }
    }
}

impl RetryPace {
    fn ready(&self, now: tokio::time::Instant) -> bool {
        self.not_before.is_none_or(|t| now >= t)
    }

    fn record(&mut self, ok: bool, now: tokio::time::Instant) {
        if ok {
            self.backoff.reset();
            self.not_before = None;
        } else {
            self.not_before = Some(now + self.backoff.next_delay());
        }
    }
}

/// One thing the reporter writes (the NodeDrain, medik8s' status, the
/// Node's condition), with its own retry pace: a surface the API refuses
/// (a CRD not installed, a role without the verb) backs off alone, and
/// the others still go out at once when the drain changes phase.
struct Surface {
    /// Something may have changed since its last write.
    dirty: bool,
    pace: RetryPace,
}

impl Default for Surface {
    /// Nothing written yet: the first tick writes it, whatever changes come.
    fn default() -> Self {
        Surface {
            dirty: true,
            pace: RetryPace::default(),
        }
    }
}

impl Surface {
    fn due(&self, now: tokio::time::Instant) -> bool {
        self.dirty && self.pace.ready(now)
    }

    /// Records a write: a failure is retried later, and so is progress
    /// held back for its turn (`open`), which is not a failure.
    fn record(&mut self, ok: bool, open: bool, now: tokio::time::Instant) {
        self.pace.record(ok, now);
        self.dirty = !ok || open;
    }
}

/// What was last written of the NodeDrain.
#[derive(Default)]
struct WrittenDrain {
    /// The uid of the Node the object was created for (its owner).
    uid: Option<String>,
    /// The status last written (without its time).
    status: Option<NodeDrainStatus>,
    /// The object's resourceVersion after the last write, which the next
    /// write is based on.
    rv: Option<String>,
    /// When the status was last written.
    at: Option<tokio::time::Instant>,
    /// How long progress alone waits after that write (see
    /// [`progress_pace`]); zero: [`PROGRESS_EVERY`].
    progress_every: Duration,
}

/// What a look at the NodeDrain came to.
enum Written {
    /// Written, or nothing to write.
    Done,
    /// Only progress changed, and the last write is recent: later.
    Later,
    Failed,
}

/// How often a NodeDrain's progress alone (pods left, blockers, the stage,
/// what a wait waits for) is written at first: a change of phase goes out
/// at once, progress no sooner than this after the last write. The status
/// writer watches every NodeDrain of the fleet, and a drain's progress
/// changes with every pod.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The longest progress alone waits: each progress write within one phase
/// doubles the wait for the next (5 s, 10 s, 20 s, then 30 s), so a drain
/// or a wait that lasts writes its NodeDrain about once a [`PROGRESS_MAX`]
/// and not once every 5 s (a drain of a minute on a busy API server: 4
/// writes, not 12), as a repeated Event is. A pod named as blocking the
/// drain, or no longer, is news for whoever watches: it goes out
/// [`PROGRESS_EVERY`] after the last write, and the pace starts again.
const PROGRESS_MAX: Duration = Duration::from_secs(30);

/// How long progress alone waits after a write: [`PROGRESS_EVERY`] after
/// one that went out at once (`progress_only` false: a phase, a trigger, a
/// turn changed) or that named other pods as blocking, twice the last wait
/// after a write of progress alone, up to [`PROGRESS_MAX`].
fn progress_pace(last: Duration, progress_only: bool) -> Duration {
    if progress_only {
        (last.max(PROGRESS_EVERY) * 2).min(PROGRESS_MAX)
    } else {
        PROGRESS_EVERY
    }
}

/// How long the Node's conditions wait at most for an edit of its spec on
/// its way (see [`crate::cluster::NodeWrites`]).
const EDIT_FIRST: Duration = Duration::from_secs(10);

/// The pods a NodeDrain names as blocking its drain (their reasons aside,
/// which change as a budget's counts do).
fn blocking(st: &NodeDrainStatus) -> std::collections::BTreeSet<(&str, &str)> {
    st.blockers
        .iter()
        .map(|b| (b.namespace.as_str(), b.pod.as_str()))
        .collect()
}

/// Whether the NodeDrain's phase changed in a way written at once: to or
/// from Idle, Cordoned, Drained or Failed. Draining and Blocked take turns
/// while budgets pace a drain: that is progress.
fn phase_changed(before: &NodeDrainStatus, now: &NodeDrainStatus) -> bool {
    let class = |p: &str| match p {
        "Draining" | "Blocked" => "draining".to_string(),
        other => other.to_string(),
    };
    class(&before.phase) != class(&now.phase)
}

impl StatusReporter {
    /// Runs until `stop`: wakes on drain progress, the lock and the
    /// objects changing, writes at most once a second; after a failed
    /// write, waits longer each time (up to a minute) so a refused write
    /// (RBAC, a missing CRD) from thousands of agents does not flood the API.
    pub async fn run(self, stop: CancellationToken) {
        let mut events = self.progress.subscribe();
        // The NodeDrain waits for the Node's uid (its owner), and the
        // condition for the Node's own copy: a change of the Node may be
        // what lets a write go out.
        let mut node = self.node_index.changes();
        let mut objects = self.maintenance.index.changes();
        let mut medik8s_objects = self.medik8s.as_ref().map(|m| m.index.changes());
        let mut lock = self.inhibitor.clone();
        let mut written = WrittenDrain::default();
        let mut written_medik8s = BTreeMap::new();
        // Until medik8s' CRD is found not to have `pendingPodsRefs`.
        let mut medik8s_refs = true;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut surfaces: [Surface; 3] = Default::default();
        let mut condition: Option<Vec<ConditionKey>> = None;
        // Since when the conditions wait behind an edit of the Node's spec.
        let mut behind_edit: Option<tokio::time::Instant> = None;
        loop {
            let changed = tokio::select! {
                _ = events.recv() => true,
                r = node.changed() => { if r.is_err() { return } true }
                r = objects.changed() => { if r.is_err() { return } true }
                _ = crate::index::changed_if_any(&mut medik8s_objects) => true,
                r = crate::index::changed_if_any(&mut lock) => { if r.is_err() { lock = None } true }
                _ = tick.tick() => false,
                _ = stop.cancelled() => return,
            };
            if changed {
                surfaces.iter_mut().for_each(|s| s.dirty = true);
                continue;
            }
            let now = tokio::time::Instant::now();
            let [drain, medik8s, node_condition] = &mut surfaces;
            if drain.due(now) {
                match self.write_node_drain(&mut written).await {
                    Written::Done => drain.record(true, false, now),
                    Written::Later => drain.record(true, true, now),
                    Written::Failed => drain.record(false, false, now),
                }
            }
            if medik8s.due(now) {
                let round = self
                    .write_medik8s(&mut written_medik8s, &mut medik8s_refs, now)
                    .await;
                medik8s.record(round.ok, round.deferred, now);
            }
            if node_condition.due(now) {
                // After the edit of the Node's spec on its way, but not
                // for long: a cordon that keeps failing does not keep the
                // conditions from being told.
                let waited = *behind_edit.get_or_insert(now);
                if self.node_writes.edits_pending() && now - waited < EDIT_FIRST {
                    node_condition.record(true, true, now);
                } else {
                    behind_edit = None;
                    let ok = self.write_condition(&mut condition).await;
                    node_condition.record(ok, false, now);
                }
            }
        }
    }

    /// Writes this node's `NodeDrain` when what it says changed: the
    /// object itself (owned by the Node, so it goes with it) the first
    /// time, then its status. Returns false if a write failed.
    async fn write_node_drain(&self, written: &mut WrittenDrain) -> Written {
        // Until the Node is known there is no uid to own the object.
        let Some(node) = self.node_index.by_name(&self.node) else {
            return Written::Done;
        };
        let Some(uid) = node["metadata"]["uid"].as_str().map(str::to_string) else {
            return Written::Done;
        };
        // Nor until the NodeMaintenance objects are: a report without the
        // turns this node still has would let the status writer publish
        // a higher drain order early.
        if !self.maintenance.ready() {
            return Written::Done;
        }
        let eval = self.maintenance.evaluate(&node);
        let mut maintenances: Vec<String> = eval
            .valid
            .iter()
            .filter(|nm| api::selects(nm, &node))
            .filter_map(|nm| nm.metadata.name.clone())
            .collect();
        maintenances.sort();
        let lock_held = self.inhibitor.as_ref().map(|i| i.borrow().held);
        let drain = self.progress.status().as_told();
        let drained = drain.phase == crate::drain::progress::Phase::Drained;
        let order = nodedrain::Order {
            // A bad label is warned of by the agent's loop; it counts as 0.
            order: api::order::of_node(&node).unwrap_or(0),
            pending_turn: api::order::pending_turn(eval.effective.as_ref(), drained).or_else(
                || {
                    let selecting = eval.valid.iter().filter(|nm| api::selects(nm, &node));
                    api::order::ending_turn(selecting, &node)
                },
            ),
        };
        let st = nodedrain::from_drain(&self.node, &drain, maintenances, &order, lock_held);
        if written.uid.as_deref() == Some(uid.as_str()) && written.status.as_ref() == Some(&st) {
            return Written::Done;
        }
        // What the status writer and the rollouts decide from goes out at
        // once; progress within a phase waits its turn, longer the longer
        // the phase lasts.
        let progress_only = written.status.as_ref().is_some_and(|before| {
            !phase_changed(before, &st)
                && before.maintenances == st.maintenances
                && before.triggers == st.triggers
                && before.drain_order == st.drain_order
                && before.pending_turn == st.pending_turn
                && before.waiting.is_some() == st.waiting.is_some()
                && before.lock_held == st.lock_held
        });
        let named_again = written
            .status
            .as_ref()
            .is_some_and(|before| blocking(before) != blocking(&st));
        let pace = if named_again {
            PROGRESS_EVERY
        } else {
            written.progress_every.max(PROGRESS_EVERY)
        };
        if progress_only
            && let Some(at) = written.at
            && at.elapsed() < pace
        {
            return Written::Later;
        }
        if written.uid.as_deref() != Some(uid.as_str()) {
            let object = json!({
                "apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain",
                "metadata": {
                    "name": self.node,
                    "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid,
                    }],
                },
                "spec": {},
            });
            let path = format!(
                "{NODEDRAINS_PATH}/{}?fieldManager={}&force=true",
                self.node,
                self.manager()
            );
            let Applied::Written(made) = self.applier().apply(&path, &object).await else {
                return Written::Failed;
            };
            *written = WrittenDrain {
                uid: Some(uid),
                status: None,
                rv: apply::rv_of(&made).map(str::to_string),
                at: None,
                progress_every: PROGRESS_EVERY,
            };
        }
        let mut stamped = st.clone();
        stamped.updated_at = Some(crate::drain::progress::now_time());
        let body = json!({
            "apiVersion": "maintd.io/v1alpha1", "kind": "NodeDrain",
            "metadata": {"name": self.node},
            "status": stamped,
        });
        let object_path = format!("{NODEDRAINS_PATH}/{}", self.node);
        let outcome = self
            .write(
                NODEDRAINS_PATH,
                &self.node,
                Some(&object_path),
                &body,
                written.rv.as_deref(),
            )
            .await;
        match outcome {
            Applied::Written(obj) => {
                written.status = Some(st);
                written.rv = apply::rv_of(&obj).map(str::to_string);
                written.at = Some(tokio::time::Instant::now());
                written.progress_every =
                    progress_pace(written.progress_every, progress_only && !named_again);
                Written::Done
            }
            // Deleted (by a person; its Node going takes this agent too):
            // created again on the next round.
            Applied::Gone => {
                *written = WrittenDrain::default();
                Written::Failed
            }
            Applied::Stale | Applied::Failed | Applied::Undeclared(_) => {
                // Not known what is there now: the next write goes out
                // whatever the status, based on the version then read.
                written.status = None;
                Written::Failed
            }
        }
    }

    /// Writes the Node's conditions (see [`conditions`]) when one of them
    /// changes, a state starting or ending, never for progress or for a
    /// change of triggers alone: every write to a Node goes to everything
    /// that watches Nodes (KEP-589), so the details are in the node's
    /// NodeDrain. All of them go in one write.
    async fn write_condition(&self, last: &mut Option<Vec<ConditionKey>>) -> bool {
        let st = self.progress.status().as_told();
        let shutdown = self.inhibitor.as_ref().is_some_and(|i| {
            let i = i.borrow();
            i.preparing && i.held
        });
        // In the Node's turn of writes, from the view as the last of them
        // left it (see `NodeWrites`).
        let _turn = self.node_writes.turn().await;
        let node = self.node_index.by_name(&self.node);
        let others = node
            .as_deref()
            .map(conditions::held_by_others)
            .unwrap_or_default();
        let want: Vec<conditions::Wanted> = conditions::wanted(&self.node, &st, shutdown)
            .into_iter()
            .filter(|w| !others.contains(w.type_))
            .collect();
        let keys: Vec<ConditionKey> = want.iter().map(conditions::Wanted::key).collect();
        if last.as_ref() == Some(&keys) {
            return true;
        }
        // What the Node says already (an agent that restarted): the same
        // conditions are not written again.
        if node.as_deref().is_some_and(|n| conditions::shown(n, &want)) {
            *last = Some(keys);
            return true;
        }
        let time = crate::drain::progress::now_time();
        let written: Vec<Value> = want
            .iter()
            .map(|w| {
                // A reason or message change within the same status keeps
                // the time of the last transition.
                let since = node
                    .as_deref()
                    .and_then(|n| conditions::find(n, w.type_))
                    .filter(|c| c["status"] == w.status)
                    .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
                    .unwrap_or_else(|| time.clone());
                let mut c = json!({
                    "type": w.type_, "status": w.status, "reason": w.reason,
                    "message": w.message, "lastTransitionTime": since,
                });
                if w.type_ == conditions::MAINTD_DRAIN {
                    c["lastHeartbeatTime"] = time.clone().into();
                }
                c
            })
            .collect();
        // Lifecycle conditions of maintd's left out of this write are
        // removed by it (server-side apply drops what its manager no
        // longer applies).
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node},
            "status": {"conditions": written},
        });
        // Based on the Node as last seen: a write of ours that timed out
        // and lands late is refused rather than undoing a newer condition.
        let rv = node
            .as_deref()
            .and_then(|n| apply::rv_of(n).map(str::to_string));
        // The agent's own writes of its Node are in the view by now (see
        // `NodeWrites`); on a conflict, someone else's (the node
        // controller's taint of a cordon, a kubelet's status) is not yet,
        // and the next round is based on what the watch brings by then:
        // cheaper than reading the whole Node again.
        let ok = match self
            .write("/api/v1/nodes", &self.node, None, &body, rv.as_deref())
            .await
        {
            Applied::Written(written) => {
                // The next write of the Node starts from this one.
                if let Some(rv) = &rv {
                    self.node_index.upsert_own_write(written, rv);
                }
                true
            }
            _ => false,
        };
        // After a failure, what the Node says decides the next round.
        *last = ok.then_some(keys);
        ok
    }

    /// This agent's own field manager, `maintd/<node>`.
    fn manager(&self) -> String {
        format!("maintd/{}", self.node)
    }

    /// How this agent's status writes go out.
    fn applier(&self) -> apply::Applier<'_> {
        apply::Applier {
            client: &self.client,
            timeout: WRITE_TIMEOUT,
            writes: &self.writes,
            what: "status",
        }
    }

    /// Applies `body` to the status of `name` in `collection` as this
    /// agent's field manager, based on `rv` (see [`apply`]); `reread` is
    /// where to read the object's version if it changed meanwhile and
    /// write again at once.
    async fn write(
        &self,
        collection: &str,
        name: &str,
        reread: Option<&str>,
        body: &Value,
        rv: Option<&str>,
    ) -> Applied {
        let path = format!(
            "{collection}/{name}/status?fieldManager={}&force=true",
            self.manager()
        );
        self.applier().apply_based(&path, reread, body, rv).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn failed_writes_are_retried_ever_more_slowly_and_a_success_resets() {
        let mut pace = RetryPace::default();
        let t0 = Instant::now();
        assert!(pace.ready(t0));
        // Consecutive failures: each wait is about twice the last (±25 %
        // jitter), up to a minute.
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..10 {
            pace.record(false, now);
            let until = pace.not_before.unwrap();
            assert!(!pace.ready(now));
            assert!(pace.ready(until));
            waits.push(until - now);
            now = until;
        }
        let secs: Vec<f64> = waits.iter().map(|w| w.as_secs_f64()).collect();
        assert!((0.75..=1.25).contains(&secs[0]), "{secs:?}");
        assert!((1.5..=2.5).contains(&secs[1]), "{secs:?}");
        assert!(secs.iter().all(|s| *s <= 75.0), "{secs:?}");
        assert!(secs[9] >= 45.0, "capped near a minute: {secs:?}");
        pace.record(true, now);
        assert!(pace.ready(now));
        pace.record(false, now);
        assert!((pace.not_before.unwrap() - now).as_secs_f64() <= 1.25);
    }

    /// A drain whose pods leave one by one for a minute and more (a busy
    /// API server, a budget pacing it) writes its progress after 5 s, then
    /// after ever longer waits up to 30 s: 4 writes in its first 66 s,
    /// not 13; a change of phase starts again from 5 s.
    #[test]
    fn progress_is_written_ever_less_often_as_a_phase_lasts() {
        let secs = Duration::from_secs;
        // Progress every second; a write goes out once the pace allows.
        let (mut every, mut last, mut writes) = (progress_pace(Duration::ZERO, false), 0, vec![]);
        for t in 1..=125u64 {
            if secs(t - last) >= every {
                writes.push(t);
                every = progress_pace(every, true);
                last = t;
            }
        }
        assert_eq!(writes, [5, 15, 35, 65, 95, 125]);
        assert_eq!(writes.iter().filter(|t| **t <= 66).count(), 4);
        assert_eq!(progress_pace(PROGRESS_MAX, true), PROGRESS_MAX, "capped");
        assert_eq!(
            progress_pace(PROGRESS_MAX, false),
            PROGRESS_EVERY,
            "a phase's write resets it"
        );
    }

    /// A pod newly blocking the drain, or no longer, is news; a budget's
    /// counts changing in the reason of the same blocker is progress.
    #[test]
    fn a_pod_named_as_blocking_or_no_longer_is_told_sooner() {
        let blocked = |pods: &[(&str, &str)]| NodeDrainStatus {
            phase: "Blocked".into(),
            blockers: pods
                .iter()
                .map(|(pod, reason)| nodedrain::NodeDrainBlocker {
                    namespace: "shop".into(),
                    pod: (*pod).into(),
                    reason: (*reason).into(),
                })
                .collect(),
            ..Default::default()
        };
        let web = blocked(&[("web-1", "the budget web needs 2 healthy pods and has 1")]);
        let counts = blocked(&[("web-1", "the budget web needs 2 healthy pods and has 0")]);
        let more = blocked(&[("web-1", "x"), ("db-0", "y")]);
        assert_eq!(blocking(&web), blocking(&counts));
        assert_ne!(blocking(&web), blocking(&more));
        assert_ne!(blocking(&web), blocking(&blocked(&[])));
    }

    /// A surface the API keeps refusing (the NodeDrain CRD not installed)
    /// waits ever longer; the others are written at the next tick after a
    /// change all the same, and progress held back for its turn is come
    /// back to without a failure's backoff.
    #[test]
    fn a_refused_surface_backs_off_alone() {
        let mut now = Instant::now();
        let mut drain = Surface::default();
        let mut condition = Surface::default();
        for _ in 0..5 {
            drain.dirty = true;
            condition.dirty = true;
            assert!(condition.due(now), "a change goes out at the next tick");
            condition.record(true, false, now);
            assert!(!condition.dirty, "written: nothing left to write");
            if drain.due(now) {
                drain.record(false, false, now);
                assert!(!drain.due(now), "refused: it waits");
                assert!(drain.dirty, "and is tried again later");
            }
            now += Duration::from_secs(1);
        }
        condition.dirty = true;
        condition.record(true, true, now);
        assert!(condition.due(now), "held back for its turn: still due");
        assert!(condition.pace.ready(now), "with no backoff");
    }
}
