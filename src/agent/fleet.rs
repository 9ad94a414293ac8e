//! FleetLock (what Zincati speaks) on the agent: a pre-reboot takes a
//! reboot slot and drains the node through a local drain request; a
//! steady-state ends that request and frees the slot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::coordination::{
    Acquisition, DEFAULT_LEASE_DURATION, RebootSlots, SlotGuard, SlotRequest, groups_held_by,
    wait_for_slot,
};
use crate::drain::progress::{Phase, Progress, WaitWords};
use crate::fleetlock::{DrainControl, DrainState, FleetLock};
use crate::trigger::SlotAsk;
use crate::trigger::local::{LocalRequests, LocalSource};

/// The drain FleetLock asks for, as a local drain request.
pub struct AgentDrain {
    local: LocalRequests,
    progress: Progress,
    /// The policy's hold, as the agent sees it now.
    agent: Agent,
}

impl DrainControl for AgentDrain {
    async fn request_drain(&self, reason: &str) -> Result<DrainState, String> {
        let current = self.local.current();
        if !current.is_some_and(|r| r.source == LocalSource::FleetLock && r.reason == reason) {
            // A new request restarts the drain; the status still shows the
            // last one, so only a later call can answer "drained".
            self.local.request(LocalSource::FleetLock, reason, None);
            return Ok(DrainState::InProgress {
                detail: "drain requested".into(),
            });
        }
        let st = self.progress.status();
        if st.phase == Phase::Drained {
            return Ok(DrainState::Drained);
        }
        let blockers: Vec<String> = st
            .blockers
            .iter()
            .map(|b| format!("{}/{}: {}", b.namespace, b.pod, b.reason))
            .collect();
        Ok(DrainState::InProgress {
            detail: format!(
                "{:?}, stage {}, {} of {} pods left{}",
                st.phase,
                st.current_stage
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                st.pods_remaining,
                st.pods_total,
                if blockers.is_empty() {
                    String::new()
                } else {
                    format!("; blocked: {}", blockers.join("; "))
                }
            ),
        })
    }

    fn boot_id(&self) -> Option<String> {
        self.agent.boot_id()
    }

    fn reboot_timeout(&self) -> Duration {
        self.agent.config.reboot_timeout
    }

    fn overdue(&self, message: String) {
        let p = self.agent.progress();
        let mut ev = p.event(crate::drain::progress::EventKind::RebootOverdue);
        ev.message = message;
        p.emit(ev);
    }

    fn hold(&self) -> Option<String> {
        let hold = self.agent.policy_hold()?;
        Some(match hold.until {
            Some(t) => format!("{} (retry after {t})", hold.reason),
            None => hold.reason,
        })
    }

    async fn undo(&self) -> Result<(), String> {
        if self
            .local
            .current()
            .is_some_and(|r| r.source == LocalSource::FleetLock)
        {
            self.local.clear();
        }
        Ok(())
    }
}

impl Agent {
    /// The node's boot ID now, as its kubelet reports it (None until the
    /// node is known).
    pub(super) fn boot_id(&self) -> Option<String> {
        let node = self.node.by_name(&self.config.node)?;
        crate::api::turns::boot_id(&node)
            .filter(|b| !b.is_empty())
            .map(str::to_string)
    }

    /// The slots of `group` (at most `max` holders) this node may take,
    /// read from its Node as the agent sees it now, when a slot is about
    /// to be taken: a control-plane node takes the `control-plane` slot,
    /// behind the quorum guard, and notes its boot ID. Until the agent has
    /// seen its Node, it takes none: what the node is is not guessed.
    pub(super) fn slots_for(&self, group: &str, max: u32) -> Result<RebootSlots, String> {
        let node: Node = self
            .node
            .by_name(&self.config.node)
            .and_then(|n| serde_json::from_value((*n).clone()).ok())
            .ok_or_else(|| self.node_unknown())?;
        Ok(RebootSlots::for_node(
            self.drainer.ops.client().clone(),
            &self.namespace(),
            &node,
            group,
            max,
            DEFAULT_LEASE_DURATION,
        )
        .noting_boot(self.boot_id())
        .watched_with(&self.lease_clock)
        .held_with(&self.slot_holds))
    }

    /// Why nothing that depends on what this node is (control-plane or
    /// not, its labels, its boot ID) can be decided yet.
    pub(super) fn node_unknown(&self) -> String {
        format!(
            "the agent has not seen its Node {} yet (its watch of the API server has not answered): whether it is a control-plane node is not known, so it takes no slot until it has",
            self.config.node
        )
    }

    /// The FleetLock handler of this agent, with the reboot slots it held
    /// before a restart (the slot taken for a reboot stays held across it,
    /// until Zincati's steady-state).
    pub(super) fn fleetlock(&self, stop: &CancellationToken) -> Arc<FleetLock<AgentDrain>> {
        let (client, namespace) = (self.drainer.ops.client().clone(), self.namespace());
        let max = self.config.reboot_slots;
        let agent = self.clone();
        // The Node (its role, its boot ID) is read at each request: at
        // start the agent may not have seen it yet.
        let slots_for = Box::new(move |group: &str| agent.slots_for(group, max));
        let drain = AgentDrain {
            local: self.local.clone(),
            progress: self.drainer.progress.clone(),
            agent: self.clone(),
        };
        let fl = Arc::new(FleetLock::new(
            &self.config.node,
            slots_for,
            drain,
            stop.clone(),
        ));
        // In the background: the endpoints must not wait on the API server
        // (a node booting while the control plane is away). Which group a
        // held slot is resumed in depends on the Node: first, see it.
        let (resume, stop, node) = (fl.clone(), stop.clone(), self.config.node.clone());
        let view = self.node.clone();
        tokio::spawn(async move {
            let name = node.clone();
            tokio::select! {
                _ = view.wait_until(move |i| i.by_name(&name).is_some()) => {}
                _ = stop.cancelled() => return,
            }
            let mut backoff = crate::index::Backoff::with(1_000, 60_000);
            loop {
                let lookup = tokio::time::timeout(
                    Duration::from_secs(10),
                    groups_held_by(client.clone(), &namespace, &node),
                );
                let why = match lookup.await {
                    Ok(Ok(groups)) => {
                        // A NodeMaintenance's drain slots (`nm-<name>`)
                        // and places in line are taken and given back by
                        // the agent's loop.
                        for g in groups.into_iter().filter(|g| {
                            !g.starts_with("nm-") && !g.starts_with(crate::trigger::AHEAD_PREFIX)
                        }) {
                            if let Err(e) = resume.resume(&g).await {
                                tracing::warn!(group = %g, error = %e, "could not resume the reboot slot held before the restart");
                            }
                        }
                        return;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "timed out".to_string(),
                };
                tracing::warn!(error = %why, "could not look up reboot slots held before the restart; will retry");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = stop.cancelled() => return,
                }
            }
        });
        fl
    }
}

impl Agent {
    /// Starts waiting for `ask`'s turn, as a task that ends holding what it
    /// waited for (renewed until released) or with `stop`; while it waits,
    /// the status says for what and who holds the slots. First, in one
    /// small LIST each, it takes up again what this node already holds
    /// (the agent restarted in the middle of its turn: it does not queue
    /// again), unless the NodeMaintenance appeared after the agent
    /// started; the flag says when that first look is over.
    pub(super) fn wait_for_turn(
        &self,
        ask: &SlotAsk,
        wait: TurnWait,
        wide: bool,
        own_place: Option<u32>,
        stop: &CancellationToken,
        cancel: CancellationToken,
    ) -> Result<(tokio::task::JoinHandle<Option<Taken>>, Arc<AtomicBool>), String> {
        let looked = Arc::new(AtomicBool::new(false));
        let slots = self.slots_of(ask)?;
        let line = match self.line(ask) {
            Some(l) => Some(self.slots_of(&l)?),
            None => None,
        };
        let place = wait == TurnWait::Place && line.is_some();
        let waiter: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Taken>> + Send>> =
            match (wait, &line) {
                // Not in line yet: a slot free now is taken at once, after
                // the nodes in line had their try; otherwise a place in
                // line. Only the place's wait speaks in the status.
                (TurnWait::Place, Some(places)) => {
                    let (now, later) = (cancel.child_token(), cancel.child_token());
                    let what = ask.line().map(|l| l.what).unwrap_or_default();
                    // The place is asked for once the direct wait looked
                    // and found no slot free: a node that takes a slot at
                    // once takes no place in line it would give back, and
                    // the nodes behind it see that place free sooner.
                    let (looked, mut seen) = tokio::sync::watch::channel(false);
                    let direct = self.slot_wait(
                        slots.clone().behind_line(places.size()),
                        String::new(),
                        Arc::new(move |_| {
                            looked.send_replace(true);
                        }),
                        stop,
                        now.clone(),
                    );
                    let queued = self.slot_waiter(places.clone(), Some(what), stop, later.clone());
                    let stopped = later.clone();
                    let queued = async move {
                        // Stopped before the direct wait looked, or that
                        // wait ended (its sender dropped) without looking.
                        tokio::select! {
                            l = seen.wait_for(|looked| *looked) => l.ok()?,
                            _ = stopped.cancelled() => return None,
                        };
                        queued.await
                    };
                    Box::pin(first_of(direct, now, queued, later))
                }
                (TurnWait::SlotAhead, _) => {
                    let what = if ask.cordons_ahead() {
                        format!("{}, cordoned ahead of its turn", ask.what)
                    } else {
                        format!("{}, next in line", ask.what)
                    };
                    let mut any = slots
                        .clone()
                        .any_slot(line.as_ref().map_or(0, RebootSlots::size))
                        .first_for(own_place);
                    if let Some(places) = &line {
                        any = any.placed_in(places.group());
                    }
                    if wide {
                        any = any.widened();
                    }
                    let w = self.slot_waiter(any, Some(what), stop, cancel.clone());
                    Box::pin(async move { w.await.map(Taken::Slot) })
                }
                _ => {
                    let w = self.slot_waiter(
                        slots.clone(),
                        Some(ask.what.clone()),
                        stop,
                        cancel.clone(),
                    );
                    Box::pin(async move { w.await.map(Taken::Slot) })
                }
            };
        let (node, renew, l) = (self.config.node.clone(), stop.child_token(), looked.clone());
        // A rolling maintenance's order holds a node back before it queues,
        // not once it is in line.
        let ordered = ask
            .group
            .strip_prefix("nm-")
            .filter(|_| wait != TurnWait::SlotAhead)
            .map(str::to_string);
        // A NodeMaintenance that appeared after the agent started has no
        // slot this node took before: nothing to look for. When a rollout
        // starts, every node of the fleet would otherwise send these reads
        // at the same moment, each a consistent read, ahead of its turn.
        let fresh = ask
            .group
            .strip_prefix("nm-")
            .is_some_and(|name| self.maintenance.appeared_since_start(name));
        let agent = self.clone();
        let task = tokio::spawn(async move {
            let held = async {
                if wait == TurnWait::SlotAhead || fresh {
                    return None;
                }
                if let Some(g) = take_up(&slots, &node, &renew, &cancel).await {
                    return Some(Taken::Slot(g));
                }
                match &line {
                    Some(places) if place => take_up(places, &node, &renew, &cancel)
                        .await
                        .map(Taken::Place),
                    _ => None,
                }
            }
            .await;
            l.store(true, Ordering::Release);
            if held.is_some() {
                return held;
            }
            if let Some(name) = ordered
                && !agent.wait_for_order(&name, &cancel).await
            {
                return None;
            }
            waiter.await
        });
        Ok((task, looked))
    }

    /// The slots `ask` names, for this node as the agent sees it now.
    fn slots_of(&self, ask: &SlotAsk) -> Result<RebootSlots, String> {
        self.slots_for(&ask.group, ask.max)
    }

    /// Waits for a slot of `slots`, saying why in the status meanwhile when
    /// `what` names it (None: a wait beside another that speaks).
    fn slot_waiter(
        &self,
        slots: RebootSlots,
        what: Option<String>,
        stop: &CancellationToken,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Option<SlotGuard>> + Send + 'static {
        let agent = self.clone();
        let silent = what.is_none();
        let report = Arc::new(move |why: WaitWords| {
            if !silent {
                agent.say_waiting_in(Some((crate::policy::HoldKind::Slot, why)));
            }
        });
        self.slot_wait(slots, what.unwrap_or_default(), report, stop, cancel)
    }

    /// Waits for a slot of `slots`, telling `report` why it still waits
    /// each time that changes (the first time: it looked and found none).
    fn slot_wait(
        &self,
        slots: RebootSlots,
        what: String,
        report: Arc<dyn Fn(WaitWords) + Send + Sync>,
        stop: &CancellationToken,
        cancel: CancellationToken,
    ) -> impl std::future::Future<Output = Option<SlotGuard>> + Send + 'static {
        let client = self.drainer.ops.client().clone();
        let request = SlotRequest {
            slots,
            node: self.config.node.clone(),
            what,
        };
        wait_for_slot(
            client,
            request,
            self.watch_guard(),
            stop.child_token(),
            cancel,
            report,
        )
    }
}

/// What a slot wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TurnWait {
    /// The slot, among the node's two candidates.
    Slot,
    /// The slot, any of them: the node holds a place in line.
    SlotAhead,
    /// A place in line before the slot (`cordonAhead`).
    Place,
}

/// The slot of `slots` that `node` holds already, taken up again (renewed
/// from now on), if any. Asked until the API server answers: "could not
/// tell" is not "holds none", which would undo a turn under way.
async fn take_up(
    slots: &RebootSlots,
    node: &str,
    renew: &CancellationToken,
    cancel: &CancellationToken,
) -> Option<SlotGuard> {
    let mut backoff = crate::index::Backoff::with(500, 10_000);
    loop {
        if cancel.is_cancelled() {
            return None;
        }
        let answer = match slots.held_by(node).await {
            Ok(false) => return None,
            Ok(true) => slots.acquire_with_renewal(node, renew.clone()).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(Acquisition::Acquired(g)) => return Some(g),
            // Taken over meanwhile: not this node's any more.
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(error = %e, group = %slots.group(), "looking for the slot this node holds already; will retry");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = cancel.cancelled() => return None,
        }
    }
}

/// Whichever of a wait for the slot itself and a wait for a place in line
/// ends first; the other is stopped, and what it took meanwhile (it was in
/// the middle of taking it) is given back. With both, the slot is kept.
async fn first_of(
    direct: impl std::future::Future<Output = Option<SlotGuard>> + Send + 'static,
    stop_direct: CancellationToken,
    queued: impl std::future::Future<Output = Option<SlotGuard>> + Send + 'static,
    stop_queued: CancellationToken,
) -> Option<Taken> {
    let (mut direct, mut queued) = (tokio::spawn(direct), tokio::spawn(queued));
    let (slot, place) = tokio::select! {
        d = &mut direct => {
            stop_queued.cancel();
            (d.ok().flatten(), queued.await.ok().flatten())
        }
        q = &mut queued => {
            stop_direct.cancel();
            (direct.await.ok().flatten(), q.ok().flatten())
        }
    };
    match (slot, place) {
        (Some(slot), place) => {
            // In the background: giving it back is retried for as long as
            // the hold would last, and the drain must not wait for that.
            if let Some(place) = place {
                tokio::spawn(async move {
                    if let Err(e) = place.release().await {
                        tracing::warn!(error = %e, "giving back a place in line taken beside the slot; it lapses by itself");
                    }
                });
            }
            Some(Taken::Slot(slot))
        }
        (None, place) => place.map(Taken::Place),
    }
}

/// What a slot wait came to.
pub(super) enum Taken {
    /// The slot itself.
    Slot(SlotGuard),
    /// A place in line before the slot: the node is cordoned ahead of its
    /// turn and waits for the slot with it.
    Place(SlotGuard),
}
