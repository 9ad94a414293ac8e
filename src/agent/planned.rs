//! Planned drains wait their turn: first for the agent's policy (the
//! maintenance window, blocking pods, alerts), then for the slot they ask
//! for (a reboot slot, a NodeMaintenance's drain slot). Urgent triggers (a
//! shutdown, a taint) wait for neither. What a drain waits for is in the
//! status (`drain.waiting`), a Node Event when it changes, and a gauge.

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Agent;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::fleet::{Taken, TurnWait};
use super::reconcile::Reconciler;
use crate::coordination::SlotGuard;
use crate::drain::progress::{EventKind, Phase, WaitWords};
use crate::policy::{Hold, HoldKind};
use crate::trigger::{Desired, SlotAsk};

/// Waiting for a slot, or for a place in line before it: the waiter task,
/// and how to stop it.
pub(super) struct SlotWait {
    pub(super) ask: SlotAsk,
    /// Waiting for a place in line (`cordonAhead`), not for the slot.
    place: bool,
    /// Holding a place, waiting for any slot of the group, not only its
    /// near ones (the end of a rollout: see `RebootSlots::widened`).
    wide: bool,
    pub(super) task: JoinHandle<Option<Taken>>,
    cancel: CancellationToken,
    /// The waiter has looked for what this node holds already.
    looked: Arc<AtomicBool>,
    /// Whether the node was a control-plane node when the wait started:
    /// its slots (and the quorum guard) follow from that, so a change of
    /// role starts the wait again.
    control_plane: bool,
}

impl SlotWait {
    /// Whether the waiter still has to find out what this node holds
    /// already: until then, a cordon left over may be this node's turn,
    /// not something to undo.
    pub(super) fn unsure(&self) -> bool {
        !self.looked.load(Ordering::Acquire)
    }
}

impl SlotWait {
    /// Stops waiting. A slot the waiter was taking at that moment still
    /// comes back, and is given back at once, rather than staying held,
    /// unrenewed, until it expires.
    fn stop(self, agent: &Agent) {
        self.cancel.cancel();
        let a = agent.clone();
        tokio::spawn(async move {
            if let Ok(Some(Taken::Slot(guard) | Taken::Place(guard))) = self.task.await
                && let Err(e) = guard.release().await
            {
                a.warn(format!(
                    "giving back a slot taken as the wait for it ended: {e}"
                ));
            }
        });
    }
}

impl Agent {
    /// What the policy holds a planned drain back with now, if anything;
    /// until the node's pods are listed, a blocking-pod selector holds.
    pub(super) fn policy_hold(&self) -> Option<Hold> {
        let pods = &self.drainer.pods;
        let listed = pods.synced().then(|| pods.all());
        self.config
            .policy
            .hold_if_known(listed.as_deref(), jiff::Timestamp::now())
    }

    /// Says what a planned drain waits for (None: nothing). The status
    /// follows every change of the words; an Event and the gauge follow a
    /// change of what is waited for.
    ///
    /// A wait that starts is told to the cluster (the NodeDrain, the Node's
    /// condition, the Event) only once it has lasted [`UNTOLD_FOR`] and a
    /// random part of [`UNTOLD_SPREAD`]: when a rollout starts, every node
    /// of the fleet starts waiting in the same second, and their reports
    /// would crowd out the writes of the nodes taking the first turns. A
    /// wait over sooner is never told.
    pub(super) fn say_waiting(&self, why: Option<(HoldKind, String)>) {
        self.say_waiting_in(why.map(|(k, t)| (k, t.into())));
    }

    /// [`Self::say_waiting`], in words of which the cluster may be told a
    /// part only.
    pub(super) fn say_waiting_in(&self, why: Option<(HoldKind, WaitWords)>) {
        let p = self.progress();
        let st = p.status();
        let (kind, text, told_part) = match why {
            Some((k, w)) => (Some(k), Some(w.text), w.told),
            None => (None, None, None),
        };
        if st.waiting == text && st.waiting_for == kind && st.waiting_told == told_part {
            return;
        }
        let starts = st.waiting.is_none() && text.is_some();
        let epoch = st.waiting_epoch + u64::from(starts);
        p.update(|st| {
            st.waiting = text.clone();
            st.waiting_for = kind;
            st.waiting_told = told_part;
            st.waiting_epoch = epoch;
            st.waiting_untold = starts || (st.waiting_untold && text.is_some());
        });
        if starts {
            // Wakes what follows the local status (the metrics).
            p.emit(p.event(EventKind::WaitingUntold));
            self.tell_waiting_later(epoch);
        } else if st.waiting_for != kind && !st.waiting_untold {
            let mut ev = p.event(EventKind::DrainWaiting);
            ev.message = text.unwrap_or_default();
            p.emit(ev);
        }
    }

    /// Tells the cluster of wait `epoch` once it has lasted long enough, if
    /// it still goes on then: its Event now, its words in the NodeDrain
    /// and the Node's condition with the next status write (which the
    /// Event wakes).
    fn tell_waiting_later(&self, epoch: u64) {
        let p = self.progress().clone();
        // From now, not from when the task first runs.
        let at =
            tokio::time::Instant::now() + UNTOLD_FOR + UNTOLD_SPREAD.mul_f64(rand::random::<f64>());
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let mut told = None;
            p.update(|st| {
                if st.waiting_epoch == epoch && st.waiting_untold {
                    st.waiting_untold = false;
                    told = st.waiting.clone();
                }
            });
            if let Some(text) = told {
                let mut ev = p.event(EventKind::DrainWaiting);
                ev.message = text;
                p.emit(ev);
            }
        });
    }
}

/// How long a wait goes untold at least (see [`Agent::say_waiting`]).
const UNTOLD_FOR: std::time::Duration = std::time::Duration::from_secs(3);
/// And at most this much longer, a random part of it for each node, so
/// that a fleet's reports spread over that time.
const UNTOLD_SPREAD: std::time::Duration = std::time::Duration::from_secs(12);

impl Reconciler {
    /// The slot wait ended: the slot is ours (the next look starts the
    /// drain), or the wait was stopped.
    pub(super) fn on_slot(&mut self, got: Option<Box<Taken>>) {
        let Some(wait) = self.slot_taking.take() else {
            return;
        };
        match got.map(|t| *t) {
            Some(Taken::Slot(guard)) => {
                self.slot = Some((wait.ask, guard));
                // The place in line goes to the next node.
                self.give_back_place();
                self.agent.say_waiting(None);
            }
            Some(Taken::Place(guard)) => match wait.ask.line() {
                Some(line) => self.place = Some((line, guard)),
                None => release_in_background(&self.agent, guard, "a place in line"),
            },
            None => {}
        }
    }

    /// Whether the drain `desired` asks for has already started evicting
    /// (a planned drain that started goes on whatever the policy says now).
    fn started(&self) -> bool {
        self.slot.is_some() || self.running.as_ref().is_some_and(|r| r.desired.evict)
    }

    /// Holds back a planned drain the policy does not let start now: what
    /// may happen meanwhile, and what holds it (for the loop's timer).
    pub(super) fn policy_step(
        &mut self,
        desired: Desired,
        stop: &CancellationToken,
    ) -> (Desired, Option<Hold>) {
        if !desired.waits_for_policy() || self.started() {
            self.ask_prometheus(false, stop);
            return (desired, None);
        }
        let hold = self.agent.policy_hold();
        // Prometheus is asked only while its answer is what decides: not
        // while the window is shut or blocking pods run.
        self.ask_prometheus(
            hold.as_ref().is_none_or(|h| h.kind == HoldKind::Alerts),
            stop,
        );
        let Some(hold) = hold else {
            return (desired, None);
        };
        // Nothing is taken while the policy says no: a slot being waited
        // for, and a place in line, go back to the others.
        if let Some(wait) = self.slot_taking.take() {
            wait.stop(&self.agent);
        }
        self.give_back_place();
        self.agent
            .say_waiting(Some((hold.kind, hold.reason.clone())));
        (desired.while_waiting(), Some(hold))
    }

    /// Starts or stops asking Prometheus (every `--alert-check-interval`,
    /// in the background: the loop reads the last answer).
    fn ask_prometheus(&mut self, on: bool, stop: &CancellationToken) {
        let Some(alerts) = &self.agent.config.policy.alerts else {
            return;
        };
        match (on, &self.asking) {
            (true, None) => {
                let token = stop.child_token();
                tokio::spawn(alerts.clone().keep_asking(token.clone()));
                self.asking = Some(token);
            }
            (false, Some(_)) => {
                if let Some(token) = self.asking.take() {
                    token.cancel();
                }
            }
            _ => {}
        }
    }

    /// Holds, waits for or gives back the slot `desired` asks for, and
    /// returns what may happen meanwhile.
    pub(super) fn slot_step(
        &mut self,
        desired: Desired,
        held: bool,
        stop: &CancellationToken,
    ) -> Desired {
        // A slot lost (taken over, or its renewals failing for most of its
        // hold) is this node's no longer: it stops and waits again (and
        // takes it up again if nobody took it over).
        if self.slot.as_ref().is_some_and(|(_, g)| !g.still_held())
            && let Some((ask, guard)) = self.slot.take()
        {
            self.agent.warn(format!(
                "this node no longer holds {} ({}): its renewals did not land in time or another node took it over; it stops and waits for a slot again",
                ask.what,
                guard.slot()
            ));
        }
        let ask = desired.slot().cloned();
        // A drain slot is needed while there is something to evict, and to
        // take the node out of scheduling: a node without pods takes its
        // turn like any other (cordoning is itself a disruption). Once
        // drained, the slot goes to the next node.
        let ask = ask.filter(|a| {
            !a.release_when_drained || self.something_to_evict(&desired) || !self.agent.marked_out()
        });
        // A drain slot taken before a restart by a node now drained: this
        // process holds no guard for it, so it is given back from the
        // Lease, once, rather than left to expire in this node's name.
        if let Some(raw) = desired.slot()
            && raw.turn.is_none()
            && ask.is_none()
            && self.slot.is_none()
            && self.slot_taking.is_none()
        {
            self.release_unguarded_slot(
                &raw.group,
                raw.max,
                drained_key(&raw.group),
                "a drain slot taken before a restart",
            );
        }
        if let Some((have, _)) = &self.slot
            && Some(have) != ask.as_ref()
        {
            // A turn's slot goes to the next node only once this one is
            // uncordoned: never more nodes out of scheduling than slots.
            match &have.turn {
                Some(_) if self.agent.has_leftovers() => {}
                Some(t) => {
                    self.turns.released(&t.uid);
                    self.give_back_slot();
                }
                None => {
                    self.turns.released(&drained_key(&have.group));
                    self.give_back_slot();
                }
            }
        }
        // What to wait for: nothing (no slot asked, the slot held, the
        // policy holding the drain back), the slot, or first a place in
        // line before it (`cordonAhead`).
        let waiting = ask.as_ref().filter(|_| self.slot.is_none() && !held);
        let line = waiting.and_then(|a| self.agent.line(a));
        // A place in line is kept while its node waits for that slot.
        if self
            .place
            .as_ref()
            .is_some_and(|(held_line, _)| line.as_ref() != Some(held_line))
        {
            self.give_back_place();
        }
        let wait_for = waiting.map(|a| (a, line.is_some() && self.place.is_none()));
        let wide = self.place.is_some() && waiting.is_some_and(|a| self.agent.any_slot_now(a));
        let control_plane = self.agent.is_control_plane_now();
        // Only which slots a node in line watches changes (at the end of a
        // rollout, all of them): the wait ends, but a slot it was taking
        // at that moment is this node's turn, kept when the wait comes
        // back (`on_slot`), not given back for the next node. A new wait
        // starts after it.
        if let Some(w) = self.slot_taking.as_mut()
            && Some((&w.ask, w.place)) == wait_for
            && Some(w.control_plane) == control_plane
            && w.wide != wide
        {
            w.cancel.cancel();
            w.wide = wide;
        }
        if self.slot_taking.as_ref().is_some_and(|w| {
            Some((&w.ask, w.place)) != wait_for
                || w.wide != wide
                || Some(w.control_plane) != control_plane
        }) && let Some(wait) = self.slot_taking.take()
        {
            wait.stop(&self.agent);
        }
        let Some((ask, place)) = wait_for else {
            if ask.is_none() && !held {
                self.agent.say_waiting(None);
            }
            return desired;
        };
        if self.slot_taking.is_none() {
            let cancel = stop.child_token();
            // In line, the slot of its place's number is its own.
            let own_place = self.place.as_ref().and_then(|(_, guard)| guard.index());
            let wait = match (place, self.place.is_some()) {
                (true, _) => TurnWait::Place,
                (false, true) => TurnWait::SlotAhead,
                (false, false) => TurnWait::Slot,
            };
            match self
                .agent
                .wait_for_turn(ask, wait, wide, own_place, stop, cancel.clone())
            {
                Ok((task, looked)) => {
                    self.slot_taking = Some(SlotWait {
                        ask: ask.clone(),
                        place,
                        wide,
                        task,
                        cancel,
                        looked,
                        control_plane: control_plane.unwrap_or_default(),
                    });
                }
                // The Node not seen yet: nothing is taken, and the loop
                // looks again when it is.
                Err(why) => {
                    self.agent.say_waiting(Some((HoldKind::Slot, why)));
                    return desired.while_waiting();
                }
            }
        }
        if self.place.is_some() && ask.cordons_ahead() {
            desired.cordoned_ahead()
        } else {
            desired.while_waiting()
        }
    }

    /// Gives back the place in line this node holds, in the background.
    pub(super) fn give_back_place(&mut self) {
        if let Some((_, guard)) = self.place.take() {
            release_in_background(&self.agent, guard, "a place in line");
        }
    }

    /// Whether the node has pods the drain would still evict (true until
    /// its pods are known).
    fn something_to_evict(&self, desired: &Desired) -> bool {
        let agent = &self.agent;
        if !agent.drainer.pods.synced() {
            return true;
        }
        if agent.progress().status().phase == Phase::Drained
            && self.running.as_ref().is_some_and(|r| r.desired.evict)
        {
            return false;
        }
        agent
            .drainer
            .plan(&agent.options(desired))
            .stages
            .iter()
            .any(|s| !s.pods.is_empty())
    }

    /// When the policy's hold passes by itself (the window opens), for the
    /// loop's timer.
    pub(super) fn hold_until(&self) -> Option<tokio::time::Instant> {
        Some(wake_at(self.hold.as_ref()?.until?))
    }

    /// Gives back the slot this node holds, in the background.
    pub(super) fn give_back_slot(&mut self) {
        if let Some((_, guard)) = self.slot.take() {
            release_in_background(&self.agent, guard, "the reboot slot");
        }
    }
}

/// What marks a drain slot of `group` given back once the node is
/// drained, among the released turns.
fn drained_key(group: &str) -> String {
    format!("drained/{group}")
}

/// Gives back `guard`'s slot in the background; a failure is a warning
/// naming `what` (the hold lapses by itself after the lease).
fn release_in_background(agent: &Agent, guard: SlotGuard, what: &'static str) {
    let a = agent.clone();
    tokio::spawn(async move {
        if let Err(e) = guard.release().await {
            a.warn(format!("giving back {what}: {e}"));
        }
    });
}

impl Agent {
    /// The places in line before `ask`'s slot, if its node queues for them:
    /// never a control-plane node, which takes its turn alone whatever the
    /// object says, nor a node not seen yet (it takes nothing).
    pub(super) fn line(&self, ask: &SlotAsk) -> Option<SlotAsk> {
        ask.line()
            .filter(|_| self.is_control_plane_now() == Some(false))
    }

    /// Whether this node carries the control-plane role label, as the
    /// agent sees its Node now (None: not seen yet).
    pub(super) fn is_control_plane_now(&self) -> Option<bool> {
        let node = self.node.by_name(&self.config.node)?;
        Some(crate::coordination::is_control_plane_json(&node))
    }
}

/// When the loop must look again for what happens at `until` (a wall-clock
/// time): a moment late rather than early, so it has happened by then (the
/// window is open, the turn is overdue).
pub(super) fn wake_at(until: jiff::Timestamp) -> tokio::time::Instant {
    let left = until.duration_since(jiff::Timestamp::now());
    let left = std::time::Duration::try_from(left).unwrap_or_default();
    crate::bounds::later(
        tokio::time::Instant::now(),
        left.saturating_add(std::time::Duration::from_millis(200)),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::drain::progress::DrainEvent;

    fn agent() -> Agent {
        // Never used to talk to anything.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Agent::new(Config::for_node("node-a", "/nonexistent".into()), client)
    }

    /// The words of the DrainWaiting events sent since the last look (the
    /// Events the cluster gets).
    fn told(events: &mut tokio::sync::broadcast::Receiver<Arc<DrainEvent>>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(ev) = events.try_recv() {
            if ev.event == EventKind::DrainWaiting && !ev.message.is_empty() {
                out.push(ev.message.clone());
            }
        }
        out
    }

    async fn pass(d: Duration) {
        tokio::time::advance(d).await;
        for _ in 0..5 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_told_to_the_cluster_once_it_has_lasted_and_a_short_one_never() {
        let a = agent();
        let mut events = a.progress().subscribe();
        let waiting = |a: &Agent| a.progress().status().waiting;
        let told_waiting = |a: &Agent| a.progress().status().as_told().waiting;

        // The local status says so at once; the cluster is not told yet.
        a.say_waiting(Some((HoldKind::Slot, "waiting for a drain slot".into())));
        assert_eq!(waiting(&a).as_deref(), Some("waiting for a drain slot"));
        assert_eq!(told_waiting(&a), None);
        // Over within two seconds: never told, however long after.
        pass(Duration::from_secs(2)).await;
        a.say_waiting(None);
        pass(UNTOLD_FOR + UNTOLD_SPREAD).await;
        assert_eq!(told(&mut events), Vec::<String>::new());
        assert_eq!(told_waiting(&a), None);

        // A wait that lasts is told within its time, with its words then.
        a.say_waiting(Some((HoldKind::Slot, "held by node-b".into())));
        pass(UNTOLD_FOR - Duration::from_millis(100)).await;
        assert_eq!(told(&mut events), Vec::<String>::new());
        assert_eq!(told_waiting(&a), None);
        a.say_waiting(Some((HoldKind::Slot, "held by node-c".into())));
        pass(UNTOLD_SPREAD + Duration::from_millis(200)).await;
        assert_eq!(told(&mut events), ["held by node-c"]);
        assert_eq!(told_waiting(&a).as_deref(), Some("held by node-c"));
        // From then on, a change of what it waits for is told at once.
        a.say_waiting(Some((HoldKind::Window, "the window opens at 02:00".into())));
        assert_eq!(told(&mut events), ["the window opens at 02:00"]);
        assert_eq!(
            told_waiting(&a).as_deref(),
            Some("the window opens at 02:00")
        );
        // Who holds the slots it waits for is in the local status and the
        // Event; the NodeDrain and the condition say that they are held.
        let words = WaitWords::with_local_part("its slots are held".into(), " by node-d");
        a.say_waiting_in(Some((HoldKind::Slot, words.clone())));
        assert_eq!(told(&mut events), ["its slots are held by node-d"]);
        assert_eq!(waiting(&a).as_deref(), Some("its slots are held by node-d"));
        assert_eq!(told_waiting(&a).as_deref(), Some("its slots are held"));
        // A new holder changes the local status alone.
        let words = WaitWords::with_local_part("its slots are held".into(), " by node-e");
        a.say_waiting_in(Some((HoldKind::Slot, words)));
        assert_eq!(told(&mut events), Vec::<String>::new());
        assert_eq!(waiting(&a).as_deref(), Some("its slots are held by node-e"));
        assert_eq!(told_waiting(&a).as_deref(), Some("its slots are held"));
    }
}
