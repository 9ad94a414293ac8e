//! Turns of a rolling NodeMaintenance that end with a reboot
//! (`spec.waitForReboot`): the agent records the node's boot ID when it
//! takes its slot, says once drained that the turn waits for the reboot,
//! and once the node has booted again and is Ready records the turn done.
//! From the moment the reboot is seen the object asks nothing more of the
//! node: it is uncordoned (while the record is written), and only once it
//! is does the slot go to the next node, so a rollout never has more
//! nodes out of scheduling than it has slots. A node that does not
//! boot again in time is said so, and held or let go as the object says.
//!
//! Everything is read from the Node (see [`crate::api::turns`]): an agent
//! restarted by the reboot finds the turn there.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::reconcile::Reconciler;
use crate::api::OnRebootTimeout;
use crate::api::turns::{self, RebootTurn, TurnState};
use crate::drain::progress::{EventKind, Phase};

/// Pause after a failed write, before the loop tries again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// How long the loop leaves a turn record this process wrote to the
/// Node's watch to bring, before it would write it again. The watch can
/// lag the agent's own write (a write based on a read after a conflict is
/// not put in the view at once), and the loop looks at the view: on
/// Kubernetes at 1,000 nodes it lagged up to 20 s, and the loop wrote the
/// turn's start again each time its last write ended, twice a second.
/// Past this, a record still missing from the view costs a read: it is
/// written only where the Node itself lacks it.
const LEFT_TO_THE_WATCH: Duration = Duration::from_secs(10);

/// What the loop keeps about turns between wake-ups (said once, written
/// one at a time).
#[derive(Default)]
pub(super) struct Turns {
    /// A write to the Node's turn annotations, or a slot release, under way.
    task: Option<tokio::task::JoinHandle<()>>,
    /// Turns said to wait for their reboot (uids).
    awaiting_said: HashSet<String>,
    /// Turns said to be overdue (uids).
    overdue_said: HashSet<String>,
    /// Turns said to be over by a reboot (uids).
    rebooted_said: HashSet<String>,
    /// Finished turns whose slot this process gave back (or found not
    /// held): filled by the release task on success.
    pub(super) released: Arc<Mutex<HashSet<String>>>,
    /// The last turn record the write task found on the Node or wrote
    /// there (see [`RecordKey`]), and when.
    recorded: Arc<Mutex<Option<(RecordKey, Instant)>>>,
}

/// Which record of which turn a write is of.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RecordKey {
    Start(String),
    Done(String),
}

impl Turns {
    /// The task under way, for the loop to wait on.
    pub(super) fn task(&mut self) -> &mut Option<tokio::task::JoinHandle<()>> {
        &mut self.task
    }

    /// Notes that the slot of the finished turn `uid` is given back.
    pub(super) fn released(&self, uid: &str) {
        mark(&self.released, uid.to_string());
    }

    fn was_released(&self, uid: &str) -> bool {
        self.released.lock().is_ok_and(|s| s.contains(uid))
    }

    /// The record the write task last found on the Node or wrote there,
    /// and until when the view is left to show it, if that is still to
    /// come.
    fn left_to_the_watch(&self) -> Option<(RecordKey, Instant)> {
        let recorded = self.recorded.lock().ok()?;
        let (key, at) = recorded.as_ref()?;
        let until = *at + LEFT_TO_THE_WATCH;
        (Instant::now() < until).then(|| (key.clone(), until))
    }

    /// Whether the Node has the record `key` (this process wrote it or
    /// found it there lately) and the view is left to show it.
    fn recorded_lately(&self, key: &RecordKey) -> bool {
        self.left_to_the_watch().is_some_and(|(k, _)| k == *key)
    }

    /// When the loop looks again at a record left to the watch.
    pub(super) fn watch_timer(&self) -> Option<Instant> {
        self.left_to_the_watch().map(|(_, until)| until)
    }
}

fn mark(set: &Mutex<HashSet<String>>, uid: String) {
    if let Ok(mut s) = set.lock() {
        s.insert(uid);
    }
}

impl Reconciler {
    /// The record of the start of the turn whose slot this node holds, if
    /// the Node does not show it started yet.
    pub(super) fn turn_to_start(&self) -> Option<turns::TurnRecord> {
        let t = self.slot.as_ref()?.0.turn.as_ref()?;
        let node = self.agent.node.by_name(&self.agent.config.node)?;
        (turns::state(&t.uid, &node) == TurnState::NotStarted)
            .then(|| t.record(&node, jiff::Timestamp::now()))
    }

    /// One look at the turns of the rolling maintenances that select this
    /// node: starts, ends, warns, gives slots back. At most one write at a
    /// time; the loop looks again when it ends.
    pub(super) fn turn_step(&mut self) {
        if self.turns.task.is_some() {
            return;
        }
        let agent = self.agent.clone();
        let Some(node) = agent.node.by_name(&agent.config.node) else {
            return;
        };
        let node: &Value = &node;
        let selecting: Vec<RebootTurn> = agent
            .maintenance
            .evaluate(node)
            .valid
            .iter()
            .filter(|nm| nm.spec.stage == crate::api::Stage::Drain && crate::api::selects(nm, node))
            .filter_map(RebootTurn::of)
            .collect();
        let held = self.slot.as_ref().and_then(|(ask, _)| ask.turn.clone());
        if let Some(t) = &held {
            // The drain started for this turn, while it records its start
            // with its cordon.
            let drain = self
                .running
                .as_mut()
                .filter(|r| r.records_turn.as_deref() == Some(t.uid.as_str()));
            if turns::state(&t.uid, node) != TurnState::NotStarted {
                // Once the Node shows it, the drain is done with it: a
                // record someone removes later is written again here, not
                // left to a drain that has marked the node already.
                if let Some(r) = drain {
                    r.records_turn = None;
                }
            } else {
                // The slot is ours: the turn starts, at the node's boot
                // now; written here only when no drain records it (the
                // drain under way had cordoned the node before the slot
                // was taken).
                let key = RecordKey::Start(t.uid.clone());
                if drain.is_some() || self.turns.recorded_lately(&key) {
                    return;
                }
                // Written once: a turn the Node shows started keeps the
                // boot and the time it started at, whatever the view says.
                let rec = t.record(node, jiff::Timestamp::now());
                let uid = t.uid.clone();
                self.write_turn(
                    key,
                    format!(
                        "recording the start of its turn of NodeMaintenance {}",
                        t.object
                    ),
                    move |n| {
                        (turns::state(&uid, n) == TurnState::NotStarted)
                            .then(|| turns::start_patch(&rec))
                    },
                );
                return;
            }
        }
        for t in &selecting {
            match turns::state(&t.uid, node) {
                TurnState::Rebooted(rec) => {
                    if !self.turns.rebooted_said.insert(t.uid.clone()) {
                        // Said; the record is written (or being retried).
                        self.end_turn(t);
                        return;
                    }
                    let p = agent.progress();
                    let mut ev = p.event(EventKind::RebootConfirmed);
                    ev.message = format!(
                        "the node booted again (boot ID {} before, {} now) and is Ready: its turn of NodeMaintenance {} is over; it is uncordoned, then gives its slot to the next node",
                        rec.boot_id,
                        turns::boot_id(node).unwrap_or(""),
                        t.object
                    );
                    p.emit(ev);
                    self.end_turn(t);
                    return;
                }
                TurnState::Started(rec) => {
                    let drained = held.as_ref() == Some(t)
                        && agent.progress().status().phase == Phase::Drained;
                    if drained && self.turns.awaiting_said.insert(t.uid.clone()) {
                        let p = agent.progress();
                        let mut ev = p.event(EventKind::AwaitingReboot);
                        ev.message = format!(
                            "drained for NodeMaintenance {}: the node keeps its slot and stays cordoned until it has booted again (boot ID now {}) and is Ready, at most {} s after its turn started ({})",
                            t.object,
                            rec.boot_id,
                            t.timeout.as_secs(),
                            rec.since
                        );
                        p.emit(ev);
                    }
                    if overdue(&rec, t) && self.turns.overdue_said.insert(t.uid.clone()) {
                        let what = match t.on_timeout {
                            OnRebootTimeout::Hold => {
                                "it stays cordoned and keeps its slot, so the rollout waits here (onTimeout: Hold); reboot the node, or set the object's stage to Complete"
                            }
                            OnRebootTimeout::Release => {
                                "it is uncordoned and gives its slot to the next node without a reboot (onTimeout: Release)"
                            }
                        };
                        let p = agent.progress();
                        let mut ev = p.event(EventKind::RebootOverdue);
                        ev.message = format!(
                            "the node has not booted again within {} s of starting its turn of NodeMaintenance {} (boot ID still {}): {what}",
                            t.timeout.as_secs(),
                            t.object,
                            rec.boot_id
                        );
                        p.emit(ev);
                        agent.drainer.progress.update(|st| {
                            st.last_error = Some(format!(
                                "no reboot within {} s for NodeMaintenance {}",
                                t.timeout.as_secs(),
                                t.object
                            ));
                        });
                    }
                    if overdue(&rec, t) && t.on_timeout == OnRebootTimeout::Release {
                        self.end_turn(t);
                        return;
                    }
                }
                TurnState::Done => {
                    // The slot goes back once the node is uncordoned: from
                    // the guard held, or (after a restart) from the Lease.
                    if held.as_ref() != Some(t)
                        && !agent.has_leftovers()
                        && !self.turns.was_released(&t.uid)
                    {
                        self.release_turn_slot(t);
                        return;
                    }
                }
                TurnState::NotStarted | TurnState::RebootedNotReady(_) => {}
            }
        }
    }

    /// When the loop must look again for a turn that may run out of time.
    pub(super) fn turn_timer(&self) -> Option<Instant> {
        let node = self.agent.node.by_name(&self.agent.config.node)?;
        let (ask, _) = self.slot.as_ref()?;
        let t = ask.turn.as_ref()?;
        let TurnState::Started(rec) = turns::state(&t.uid, &node) else {
            return None;
        };
        if self.turns.overdue_said.contains(&t.uid) {
            return None;
        }
        Some(super::planned::wake_at(deadline(&rec, t)))
    }

    /// Records the turn done: the object no longer asks anything of the
    /// node, which is then uncordoned; the slot follows (see `slot_step`).
    fn end_turn(&mut self, t: &RebootTurn) {
        let key = RecordKey::Done(t.uid.clone());
        if self.turns.recorded_lately(&key) {
            return;
        }
        let uid = t.uid.clone();
        self.write_turn(
            key,
            format!("recording its turn of NodeMaintenance {} done", t.object),
            move |n| (turns::state(&uid, n) != TurnState::Done).then(|| turns::done_patch(n, &uid)),
        );
    }

    /// Writes the Node's turn annotations in the background: the record
    /// `key`, where the Node lacks it.
    fn write_turn(
        &mut self,
        key: RecordKey,
        what: String,
        edit: impl FnMut(&Value) -> Option<Value> + Send + 'static,
    ) {
        let agent = self.agent.clone();
        let recorded = self.turns.recorded.clone();
        self.turns.task = Some(tokio::spawn(async move {
            match agent.drainer.ops.annotate(edit).await {
                Ok(()) => {
                    if let Ok(mut r) = recorded.lock() {
                        *r = Some((key, Instant::now()));
                    }
                }
                Err(e) => {
                    agent.warn(format!("{what}: {e}; will retry"));
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }));
    }

    /// Gives back the slot of a finished turn that this process does not
    /// hold a guard for (it was taken before a restart).
    fn release_turn_slot(&mut self, t: &RebootTurn) {
        self.release_unguarded_slot(
            &format!("nm-{}", t.object),
            t.slots,
            t.uid.clone(),
            "the slot of a finished turn",
        );
    }

    /// Gives back, in the background, a slot of `group` (of `max`) that
    /// the Lease shows this node holding while this process holds no
    /// guard for it (taken before a restart), and marks `key` released
    /// once it is given back or found not held. One at a time with the
    /// turns' writes; the loop looks again when it ends, and tries again
    /// after a failure.
    pub(super) fn release_unguarded_slot(
        &mut self,
        group: &str,
        max: u32,
        key: String,
        what: &'static str,
    ) {
        if self.turns.task.is_some() || self.turns.was_released(&key) {
            return;
        }
        let agent = self.agent.clone();
        let released = self.turns.released.clone();
        // The loop looks at slots only once the Node is known.
        let Ok(slots) = agent.slots_for(group, max) else {
            return;
        };
        self.turns.task = Some(tokio::spawn(async move {
            match slots.release(&agent.config.node).await {
                Ok(_) => mark(&released, key),
                Err(e) => {
                    agent.warn(format!("giving back {what}: {e}; will retry"));
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }));
    }
}

/// When the turn `rec` runs out of time.
fn deadline(rec: &turns::TurnRecord, t: &RebootTurn) -> jiff::Timestamp {
    rec.since
        .checked_add(jiff::SignedDuration::try_from(t.timeout).unwrap_or_default())
        .unwrap_or(rec.since)
}

fn overdue(rec: &turns::TurnRecord, t: &RebootTurn) -> bool {
    jiff::Timestamp::now() >= deadline(rec, t)
}
