//! A rolling maintenance's order on the agent: a node of a higher
//! `maintd.io/drain-order` does not queue for a turn until the status
//! writer's Lease says the nodes of lower orders are done (see
//! [`crate::api::order`]).

use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::api::order;
use crate::policy::HoldKind;
use crate::report::writer::LEASE_NAME;

impl Agent {
    /// Waits until this node may queue for a turn of the rolling
    /// maintenance `name`, saying meanwhile what it waits for. Returns
    /// false when `cancel` ends the wait first.
    pub(super) async fn wait_for_order(&self, name: &str, cancel: &CancellationToken) -> bool {
        let mut lease = self.writer_lease.changes();
        let mut node = self.node.changes();
        let mut objects = self.maintenance.index.changes();
        loop {
            match self.order_verdict(name) {
                Ok(()) => return true,
                Err(why) => self.say_waiting(Some((HoldKind::Slot, why))),
            }
            // Each view lives as long as the agent: none of these closes.
            tokio::select! {
                _ = lease.changed() => {}
                _ = node.changed() => {}
                _ = objects.changed() => {}
                _ = cancel.cancelled() => return false,
            }
        }
    }

    /// Whether the nodes in line for `ask`'s slots may take any of them, not
    /// only their near ones: every node still waiting has a place in line
    /// (the status writer says so with the order it publishes).
    pub(super) fn any_slot_now(&self, ask: &crate::trigger::SlotAsk) -> bool {
        let Some(name) = ask.group.strip_prefix("nm-") else {
            return false;
        };
        let (uid, published) = self.published(name);
        published
            .get(name)
            .is_some_and(|p| Some(&p.uid) == uid.as_ref() && p.any_slot)
    }

    /// Whether this node's order lets it queue for a turn of `name` now.
    fn order_verdict(&self, name: &str) -> Result<(), String> {
        // Its order is its Node's label: not seen yet, not known.
        let node = self
            .node
            .by_name(&self.config.node)
            .ok_or_else(|| self.node_unknown())?;
        // A bad label counts as 0 (the loop warns of it): it changes which
        // group the node goes with, never how many nodes go at once (the
        // slots decide that), so it is not held back for a typo.
        let mine = order::of_node(&node).unwrap_or(0);
        if mine == 0 {
            return Ok(());
        }
        let (uid, published) = self.published(name);
        order::gate(mine, name, &uid.unwrap_or_default(), &published)
    }

    /// The uid of the NodeMaintenance `name` as this agent sees it, and the
    /// orders the status writer's Lease publishes.
    fn published(&self, name: &str) -> (Option<String>, order::Orders) {
        let uid = self
            .maintenance
            .index
            .by_name(name)
            .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_string));
        let published = self
            .writer_lease
            .by_name(LEASE_NAME)
            .map(|l| order::read(&l))
            .unwrap_or_default();
        (uid, published)
    }
}
