//! The agent's loop: on every wake-up it looks at what the triggers want
//! and at the drain's state, and starts, keeps or ends the work.
//!
//! The loop never awaits work that can take long: the drain, the undo,
//! taking a reboot slot and releasing medik8s objects run as tasks of
//! their own, and the loop only starts, aborts and collects them. So a
//! `PrepareForShutdown` is acted on at once, whatever the API server or an
//! undo is doing.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::coordination::SlotGuard;
use crate::index::sleep_until;
use crate::trigger::shutdown::ShutdownTrigger;
use crate::trigger::{self, Desired, SlotAsk};

/// How long a failed reboot slot request or medik8s release waits before
/// it is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// A drain the loop started.
pub(super) struct Running {
    pub(super) desired: Desired,
    /// The rolling turn (its object's uid) whose start the drain records
    /// with its cordon, if it does.
    pub(super) records_turn: Option<String>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops the drain without waiting for it: cancelled, so it sends
    /// nothing more, and aborted at its next await.
    fn stop(self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

/// The loop's state: the tasks it runs and the timers it keeps.
pub(super) struct Reconciler {
    pub(super) agent: Agent,
    pub(super) shutdown: Option<ShutdownTrigger>,
    pub(super) running: Option<Running>,
    undo: Option<JoinHandle<()>>,
    /// The slot this node holds for a planned drain, and what asked for it.
    pub(super) slot: Option<(SlotAsk, SlotGuard)>,
    /// Waiting for a slot (see coordination's waiter), and for what.
    pub(super) slot_taking: Option<super::planned::SlotWait>,
    /// The place in line this node holds before its drain slot (see
    /// `SlotAsk::line`): with `cordonAhead`, it is cordoned ahead of its
    /// turn meanwhile.
    pub(super) place: Option<(SlotAsk, SlotGuard)>,
    medik8s_release: Option<JoinHandle<bool>>,
    release_retry: Option<Instant>,
    /// What the drain taint on the node was warned of (its value, its
    /// effect), so each is said once while it stays.
    warned_taint: Vec<String>,
    /// The bad `maintd.io/drain-order` label last warned of.
    warned_order: Option<String>,
    /// The invalid NodeMaintenance objects last said to hold the node.
    warned_invalid: Option<String>,
    /// Handling a shutdown while the API server cannot be reached.
    pub(super) offline: Option<super::shutdown::Offline>,
    pub(super) probe: Option<JoinHandle<()>>,
    pub(super) probe_not_before: Option<Instant>,
    /// When the agent started: the API "last answered" then, at the latest.
    pub(super) started: Instant,
    /// What the policy holds a planned drain back with, if anything.
    pub(super) hold: Option<crate::policy::Hold>,
    /// Stops the questions to Prometheus, while they are asked.
    pub(super) asking: Option<CancellationToken>,
    /// Cordoning the node again after someone uncordoned it mid-drain.
    pub(super) recordon: Option<JoinHandle<()>>,
    /// Turns of rolling maintenances that end with a reboot.
    pub(super) turns: super::turns::Turns,
}

/// What woke the loop.
enum Wake {
    /// Something changed: look again.
    Look,
    Logind(crate::inhibitor::ShutdownEvent),
    /// The slot wait ended: with the slot or a place in line, or without
    /// (stopped).
    Slot(Option<Box<super::fleet::Taken>>),
    Medik8s(Option<bool>),
}

/// A task's end, as a future the loop can wait on (pending without one).
async fn finished<T>(task: &mut Option<JoinHandle<T>>) -> Option<T> {
    match task {
        Some(t) => {
            let out = t.await.ok();
            *task = None;
            out
        }
        None => std::future::pending().await,
    }
}

impl Reconciler {
    pub(super) fn new(agent: Agent, shutdown: Option<ShutdownTrigger>) -> Self {
        Reconciler {
            agent,
            shutdown,
            running: None,
            undo: None,
            slot: None,
            slot_taking: None,
            place: None,
            medik8s_release: None,
            release_retry: None,
            warned_taint: Vec::new(),
            warned_order: None,
            warned_invalid: None,
            offline: None,
            probe: None,
            probe_not_before: None,
            started: Instant::now(),
            hold: None,
            asking: None,
            recordon: None,
            turns: Default::default(),
        }
    }

    pub(super) async fn run(mut self, stop: CancellationToken) {
        let agent = self.agent.clone();
        let mut node_changes = agent.node.changes();
        let mut pod_changes = agent.drainer.pods.changes();
        let mut maintenance_changes = agent.maintenance.index.changes();
        let mut medik8s_changes = agent.medik8s.as_ref().map(|m| m.index.changes());
        let mut alert_answers = agent.config.policy.alerts.as_ref().map(|a| a.changes());
        let mut local_changes = agent.local.subscribe();
        let mut progress = agent.progress().subscribe();
        let mut writer_lease = agent.writer_lease.changes();
        loop {
            // The shutdown first: whether the lock may go is decided from
            // the drain's state on every wake-up.
            self.shutdown_step().await;
            self.judge(&stop);
            self.keep_cordoned();
            self.turn_step();
            self.medik8s_step();
            let timer = [
                self.release_retry,
                self.shutdown_timer(),
                self.hold_until(),
                self.turn_timer(),
                self.turns.watch_timer(),
                // Until the slot wait has looked for a turn held already,
                // an undo waits for it: look again shortly.
                self.slot_taking
                    .as_ref()
                    .filter(|w| w.unsure())
                    .map(|_| Instant::now() + Duration::from_millis(100)),
            ]
            .into_iter()
            .flatten()
            .min();
            let shutting_down = self.shutdown_pending();
            let held_by_pods = self
                .hold
                .as_ref()
                .is_some_and(|h| h.kind == crate::policy::HoldKind::BlockingPods);
            // Until every view has arrived, each one arriving may be what
            // lets an undo of leftovers go ahead: the pods' too.
            let views_pending = !agent.triggers_known();
            let in_line = self.place.is_some();
            let Reconciler {
                shutdown,
                undo,
                slot,
                slot_taking,
                medik8s_release,
                probe,
                recordon,
                turns,
                ..
            } = &mut self;
            let wake = tokio::select! {
                _ = sleep_until(timer) => Wake::Look,
                r = node_changes.changed() => if r.is_err() { return } else { Wake::Look },
                // Pods matter to the loop only while a shutdown waits for
                // the node to be drained, blocking pods hold a drain, or
                // their first list is awaited.
                _ = pod_changes.changed(), if shutting_down || held_by_pods || views_pending => Wake::Look,
                // The sender lives in the agent, so this never closes.
                _ = local_changes.changed() => Wake::Look,
                _ = maintenance_changes.changed() => Wake::Look,
                // The status writer's Lease says when the nodes in line may
                // take any slot: it matters only to a node in line.
                _ = writer_lease.changed(), if in_line => Wake::Look,
                _ = crate::index::changed_if_any(&mut medik8s_changes) => Wake::Look,
                _ = crate::index::changed_if_any(&mut alert_answers) => Wake::Look,
                ev = async {
                    match shutdown.as_mut() {
                        Some(s) => s.next().await,
                        None => std::future::pending().await,
                    }
                } => Wake::Logind(ev),
                // Only a wake-up: a lost or lagged event changes nothing,
                // the state is read again above.
                _ = progress.recv() => Wake::Look,
                _ = finished(undo) => Wake::Look,
                r = async {
                    match slot_taking.as_mut() {
                        Some(w) => (&mut w.task).await.ok().flatten(),
                        None => std::future::pending().await,
                    }
                } => Wake::Slot(r.map(Box::new)),
                // A slot this node no longer holds (taken over, or not
                // renewed for most of its hold): the next look gives it up.
                _ = async {
                    match slot.as_ref() {
                        Some((_, guard)) => guard.lost().await,
                        None => std::future::pending().await,
                    }
                } => Wake::Look,
                r = finished(medik8s_release) => Wake::Medik8s(r),
                _ = finished(probe) => Wake::Look,
                _ = finished(recordon) => Wake::Look,
                _ = finished(turns.task()) => Wake::Look,
                _ = stop.cancelled() => {
                    if let Some(r) = self.running.take() {
                        r.stop();
                    }
                    return;
                }
            };
            match wake {
                Wake::Look => {}
                Wake::Logind(ev) => {
                    if let Some(sd) = self.shutdown.as_mut() {
                        agent.on_logind(sd, &ev);
                    }
                }
                Wake::Slot(r) => self.on_slot(r),
                Wake::Medik8s(r) => {
                    self.release_retry = (r != Some(true)).then(|| Instant::now() + RETRY_AFTER);
                }
            }
            let now = Instant::now();
            self.release_retry = self.release_retry.filter(|t| *t > now);
        }
    }

    /// Works out what the triggers want and starts, keeps or ends the
    /// drain and its undo accordingly.
    fn judge(&mut self, stop: &CancellationToken) {
        let agent = self.agent.clone();
        let shutdown = self.shutdown.as_ref().and_then(ShutdownTrigger::active);
        let mut desired = agent.desired(shutdown);
        agent.publish_triggers(&desired);
        // A planned drain waits for the policy, then for its slot; a
        // reboot slot goes back when the request does, a drain slot once
        // the node is drained.
        let (waited, hold) = self.policy_step(desired, stop);
        desired = self.slot_step(waited, hold.is_some(), stop);
        self.hold = hold;
        if let Some(node) = agent.node.by_name(&agent.config.node) {
            let warnings = trigger::taint::find(&node, &agent.config.drain_taints)
                .map(|t| t.warnings())
                .unwrap_or_default();
            for w in &warnings {
                if !self.warned_taint.contains(w) {
                    agent.warn(w.clone());
                }
                // In the status for as long as the taint says it (a new
                // drain starts its status afresh).
                if !agent.progress().status().warnings.contains(w) {
                    agent.progress().update(|st| st.warnings.push(w.clone()));
                }
            }
            self.warned_taint = warnings;
        }
        let bad_order = agent
            .node
            .by_name(&agent.config.node)
            .and_then(|n| crate::api::order::of_node(&n).err());
        if bad_order.is_some() && bad_order != self.warned_order {
            agent.warn(bad_order.clone().unwrap_or_default());
        }
        self.warned_order = bad_order;
        let wanted = desired.active();
        // Nothing valid asks, but an invalid object may: what it asks is
        // not known, so nothing more is evicted and nothing is undone
        // (said only where there is a drain to hold).
        let holding = self.running.is_some() || agent.has_leftovers();
        let frozen = (!wanted && holding)
            .then(|| agent.invalid_holding())
            .flatten();
        if frozen.is_some() && frozen != self.warned_invalid {
            agent.warn(frozen.clone().unwrap_or_default());
        }
        self.warned_invalid = frozen.clone();
        match (&mut self.running, wanted) {
            (Some(r), true) if r.desired.same_drain(&desired) => {
                // The same drain, asked for by other triggers now: it goes on.
                r.desired = desired;
            }
            (Some(_), false) if frozen.is_some() => {
                if let Some(r) = self.running.take() {
                    r.stop();
                }
            }
            (Some(_), _) => {
                if let Some(r) = self.running.take() {
                    r.stop();
                }
                if wanted {
                    self.start(desired, stop);
                } else {
                    let p = agent.progress();
                    let mut ev = p.event(crate::drain::progress::EventKind::DrainCancelled);
                    ev.message =
                        "no trigger asks for the drain any more: nothing more is evicted".into();
                    p.emit(ev);
                    self.start_undo(stop);
                }
            }
            (None, true) => self.start(desired, stop),
            (None, false) => {
                // Undo only what is known to be over: until every trigger
                // has been heard from, "nothing asks" means "not known yet".
                // Nor while a slot wait still looks for a turn this node
                // holds already (an agent restarted in the middle of it).
                let unsure = self.slot_taking.as_ref().is_some_and(|w| w.unsure());
                if self.undo.is_none()
                    && !unsure
                    && frozen.is_none()
                    && agent.triggers_known()
                    && agent.has_leftovers()
                {
                    self.start_undo(stop);
                }
            }
        }
    }

    fn start(&mut self, desired: Desired, stop: &CancellationToken) {
        // A drain wins over an undo still under way.
        if let Some(u) = self.undo.take() {
            u.abort();
        }
        let cancel = stop.child_token();
        let drainer = self.agent.drainer.clone();
        let mut opts = self.agent.options(&desired);
        // A drain for the turn whose slot this node just took records the
        // turn's start with its cordon (see `turn_step`).
        opts.turn = self.turn_to_start();
        let records_turn = opts.turn.as_ref().map(|r| r.uid.clone());
        let c = cancel.clone();
        let task = tokio::spawn(async move { drainer.run(opts, c).await });
        self.running = Some(Running {
            desired,
            records_turn,
            cancel,
            task,
        });
    }

    fn start_undo(&mut self, stop: &CancellationToken) {
        if let Some(u) = self.undo.take() {
            u.abort();
        }
        let (a, s) = (self.agent.clone(), stop.clone());
        self.undo = Some(tokio::spawn(async move { a.undo_until_done(&s).await }));
    }

    /// A medik8s object being deleted waits on its operator's finalizer;
    /// once the node is not held for it, let it go (not while a shutdown
    /// waits).
    fn medik8s_step(&mut self) {
        if self.shutdown_pending()
            || self.medik8s_release.is_some()
            || self.release_retry.is_some()
            || !self.agent.medik8s_waiting()
        {
            return;
        }
        let held = self.running.is_some();
        let a = self.agent.clone();
        self.medik8s_release = Some(tokio::spawn(async move {
            a.release_medik8s_objects(held).await
        }));
    }

    /// Whether a shutdown is announced and the lock not yet let go.
    pub(super) fn shutdown_pending(&self) -> bool {
        self.shutdown
            .as_ref()
            .and_then(ShutdownTrigger::release_deadline)
            .is_some()
    }
}
