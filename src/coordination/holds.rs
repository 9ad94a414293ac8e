//! What one agent holds of its slot Leases, part by part.
//!
//! Several parts of one agent may hold the same slot at once: a wait that
//! was stopped just as it took a slot hands its guard back to be given
//! back, while the wait that replaced it finds the slot already the
//! node's and takes it up again (a second guard on the same Lease). The
//! Lease names the node either way, so giving it back for the first would
//! end the second's hold too: the node would go on with its turn
//! (cordoned, draining) holding no slot, and the next node in line would
//! take it. So a hold is given back only once no part of the agent holds
//! it any more, and taking and giving back are one at a time within the
//! agent, so that neither decides on what the other is changing.
//!
//! It also keeps each slot Lease as the agent's own last write of it left
//! it (the API server's answer), so that a renewal or a give-back is one
//! write guarded by that resourceVersion, not a read and a write: a
//! Lease changed since is refused as a conflict, and only then read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::coordination::v1::Lease;

/// The guards one agent holds on each slot Lease, and the lock that keeps
/// its takes and give-backs one at a time. Cheap to clone; clones share
/// both. An agent passes its own to every set of slots it builds (see
/// [`super::RebootSlots::held_with`]).
#[derive(Clone, Default)]
pub struct SlotHolds {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    writes: tokio::sync::Mutex<()>,
    guards: Mutex<HashMap<String, usize>>,
    /// Each slot Lease as this agent's last write of it answered.
    written: Mutex<HashMap<String, Lease>>,
    /// How long those writes took to be answered.
    times: super::pace::WriteTimes,
}

impl SlotHolds {
    /// Holds of a new agent: none.
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits until no other take or give-back of this agent is under way;
    /// the next waits while the returned lock is kept.
    pub(super) async fn one_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.inner.writes.lock().await
    }

    /// Counts one more guard on the Lease `key` until the ticket is
    /// dropped.
    pub(super) fn ticket(&self, key: String) -> HoldTicket {
        let mut guards = self.inner.guards.lock().unwrap_or_else(|e| e.into_inner());
        *guards.entry(key.clone()).or_default() += 1;
        HoldTicket {
            holds: self.clone(),
            key,
        }
    }

    /// Whether a guard of this agent holds the Lease `key` now.
    pub(super) fn held(&self, key: &str) -> bool {
        self.inner
            .guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .is_some_and(|n| *n > 0)
    }

    /// Notes `lease` as what this agent's write of the Lease `key` left.
    pub(super) fn note_written(&self, key: String, lease: Lease) {
        let mut written = self.inner.written.lock().unwrap_or_else(|e| e.into_inner());
        written.insert(key, lease);
    }

    /// The Lease `key` as this agent last wrote it, if it wrote it and has
    /// not given it back since; it may have changed since.
    pub(super) fn last_written(&self, key: &str) -> Option<Lease> {
        let written = self.inner.written.lock().unwrap_or_else(|e| e.into_inner());
        written.get(key).cloned()
    }

    /// How long this agent's slot writes take to be answered.
    pub(super) fn write_times(&self) -> &super::pace::WriteTimes {
        &self.inner.times
    }

    /// Forgets the Lease `key`: given back, or found changed.
    pub(super) fn forget_written(&self, key: &str) {
        let mut written = self.inner.written.lock().unwrap_or_else(|e| e.into_inner());
        written.remove(key);
    }
}

/// One guard's count on a Lease; dropping it takes the count back.
pub(super) struct HoldTicket {
    holds: SlotHolds,
    key: String,
}

impl Drop for HoldTicket {
    fn drop(&mut self) {
        let mut guards = self
            .holds
            .inner
            .guards
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = guards.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                guards.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_held_while_any_ticket_on_it_lives() {
        let holds = SlotHolds::new();
        let first = holds.ticket("ns/slot-0".into());
        let second = holds.ticket("ns/slot-0".into());
        assert!(holds.held("ns/slot-0"));
        assert!(!holds.held("ns/slot-1"));
        drop(first);
        assert!(holds.held("ns/slot-0"), "the second guard still holds it");
        drop(second);
        assert!(!holds.held("ns/slot-0"));
        assert!(holds.inner.guards.lock().unwrap().is_empty());
    }

    #[test]
    fn clones_share_what_they_hold() {
        let holds = SlotHolds::new();
        let _t = holds.clone().ticket("ns/slot-0".into());
        assert!(holds.held("ns/slot-0"));
    }
}
