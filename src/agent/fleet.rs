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
use crate::drain::progress::{Phase, Progress};
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
        let pods = self.agent.drainer.pods.all();
        let hold = self
            .agent
            .config
            .policy
            .hold(&pods, jiff::Timestamp::now())?;
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

    /// What reboot slots are taken with: the client, the agent's namespace
    /// (where the slot Leases live; `maintd` outside a pod) and this Node.
    pub(super) fn slot_context(&self) -> (kube::Client, String, Node) {
        let namespace = self.namespace();
        let node: Node = self
            .node
            .by_name(&self.config.node)
            .and_then(|n| serde_json::from_value((*n).clone()).ok())
            .unwrap_or_default();
        (self.drainer.ops.client().clone(), namespace, node)
    }

    /// The FleetLock handler of this agent, with the reboot slots it held
    /// before a restart (the slot taken for a reboot stays held across it,
    /// until Zincati's steady-state).
    pub(super) fn fleetlock(&self, stop: &CancellationToken) -> Arc<FleetLock<AgentDrain>> {
        let (client, namespace, node) = self.slot_context();
        let max = self.config.reboot_slots;
        let (c, ns) = (client.clone(), namespace.clone());
        let agent = self.clone();
        // The boot ID is read when a slot is taken: at start the node may
        // not be known yet.
        let slots_for = Box::new(move |group: &str| {
            RebootSlots::for_node(c.clone(), &ns, &node, group, max, DEFAULT_LEASE_DURATION)
                .noting_boot(agent.boot_id())
        });
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
        // (a node booting while the control plane is away).
        let (resume, stop, node) = (fl.clone(), stop.clone(), self.config.node.clone());
        tokio::spawn(async move {
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
    /// again); the flag says when that first look is over.
    pub(super) fn wait_for_turn(
        &self,
        ask: &SlotAsk,
        wait: TurnWait,
        wide: bool,
        stop: &CancellationToken,
        cancel: CancellationToken,
    ) -> (tokio::task::JoinHandle<Option<Taken>>, Arc<AtomicBool>) {
        let looked = Arc::new(AtomicBool::new(false));
        let slots = self.slots_of(ask);
        let line = self.line(ask).map(|l| self.slots_of(&l));
        let place = wait == TurnWait::Place && line.is_some();
        let waiter: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Taken>> + Send>> =
            match (wait, &line) {
                // Not in line yet: a slot free now is taken at once, after
                // the nodes in line had their try; otherwise a place in
                // line. Only the place's wait speaks in the status.
                (TurnWait::Place, Some(places)) => {
                    let (now, later) = (cancel.child_token(), cancel.child_token());
                    let what = ask.line().map(|l| l.what).unwrap_or_default();
                    let direct = self.slot_waiter(
                        slots.clone().behind_line(places.size()),
                        None,
                        stop,
                        now.clone(),
                    );
                    let queued = self.slot_waiter(places.clone(), Some(what), stop, later.clone());
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
                        .any_slot(line.as_ref().map_or(0, RebootSlots::size));
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
        let agent = self.clone();
        let task = tokio::spawn(async move {
            let held = async {
                if wait == TurnWait::SlotAhead {
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
        (task, looked)
    }

    /// The slots `ask` names, for this node.
    fn slots_of(&self, ask: &SlotAsk) -> RebootSlots {
        let (client, namespace, node) = self.slot_context();
        RebootSlots::for_node(
            client,
            &namespace,
            &node,
            &ask.group,
            ask.max,
            DEFAULT_LEASE_DURATION,
        )
        .noting_boot(self.boot_id())
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
        let client = self.drainer.ops.client().clone();
        let agent = self.clone();
        let silent = what.is_none();
        let report = Arc::new(move |why: String| {
            if !silent {
                agent.say_waiting(Some((crate::policy::HoldKind::Slot, why)));
            }
        });
        let request = SlotRequest {
            slots,
            node: self.config.node.clone(),
            what: what.unwrap_or_default(),
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
/// from now on), if any.
async fn take_up(
    slots: &RebootSlots,
    node: &str,
    renew: &CancellationToken,
    cancel: &CancellationToken,
) -> Option<SlotGuard> {
    if !matches!(slots.held_by(node).await, Ok(true)) || cancel.is_cancelled() {
        return None;
    }
    match slots.acquire_with_renewal(node, renew.clone()).await {
        Ok(Acquisition::Acquired(g)) => Some(g),
        _ => None,
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
