//! A held slot that renews itself until it is released.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::holds::HoldTicket;
use super::{CoordinationError, RebootSlots};

/// A slot this node holds, renewed every third of the lease duration by a
/// background task. [`release`](Self::release) gives it back; dropping the
/// guard only stops the renewals, so the hold lapses after one lease
/// duration — what happens when an agent dies holding a slot.
pub struct SlotGuard {
    slots: RebootSlots,
    node: String,
    slot: String,
    renewing: CancellationToken,
    lost: Arc<AtomicBool>,
    /// When the hold last landed (taken, or renewed), by this process's
    /// clock.
    renewed: Arc<std::sync::Mutex<tokio::time::Instant>>,
    /// Told when a renewal finds the slot lost.
    lost_now: Arc<tokio::sync::Notify>,
    /// This guard's count among what the agent holds: while it lives, no
    /// other part of the agent gives the slot back.
    ticket: Option<HoldTicket>,
}

/// The share of the lease's duration a hold is trusted for after its last
/// renewal landed: another agent counts it lapsed after the whole duration
/// from when it saw that renewal, which is no earlier.
const TRUSTED_SHARE: f64 = 0.8;

impl SlotGuard {
    pub(super) fn start(
        slots: RebootSlots,
        node: &str,
        slot: String,
        ticket: HoldTicket,
        stop: CancellationToken,
    ) -> Self {
        let renewing = stop.child_token();
        let lost = Arc::new(AtomicBool::new(false));
        let renewed = Arc::new(std::sync::Mutex::new(tokio::time::Instant::now()));
        let lost_now = Arc::new(tokio::sync::Notify::new());
        let period = (slots.lease_duration() / 3).max(Duration::from_millis(100));
        tokio::spawn(renew_until_stopped(
            slots.clone(),
            node.to_string(),
            slot.clone(),
            period,
            renewing.clone(),
            (lost.clone(), renewed.clone(), lost_now.clone()),
        ));
        SlotGuard {
            slots,
            node: node.to_string(),
            slot,
            renewing,
            lost,
            renewed,
            lost_now,
            ticket: Some(ticket),
        }
    }

    /// The slot Lease's name.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// The number of the slot, among its group's.
    pub fn index(&self) -> Option<u32> {
        self.slots.index_of(&self.slot)
    }

    /// The group of the slot.
    pub fn group(&self) -> &str {
        self.slots.group()
    }

    /// False once a renewal found the slot taken over or released, or once
    /// no renewal has landed for most of the lease's duration (others may
    /// be about to take it over): the node must not go on as if it held it.
    pub fn still_held(&self) -> bool {
        !self.lost.load(Ordering::Relaxed) && tokio::time::Instant::now() < self.trusted_until()
    }

    /// Until when the hold is trusted without another renewal landing.
    fn trusted_until(&self) -> tokio::time::Instant {
        let last = self
            .renewed
            .lock()
            .map(|t| *t)
            .unwrap_or_else(|_| tokio::time::Instant::now());
        crate::bounds::later(last, self.slots.lease_duration().mul_f64(TRUSTED_SHARE))
    }

    /// Resolves once the hold is no longer [`Self::still_held`].
    pub async fn lost(&self) {
        while self.still_held() {
            tokio::select! {
                _ = self.lost_now.notified() => {}
                _ = tokio::time::sleep_until(self.trusted_until()) => {}
            }
        }
    }

    /// Stops renewing and gives the slot back. A failed attempt (an API
    /// server too busy to answer in time) is tried again, with backoff,
    /// for as long as the hold would otherwise last: a slot that is not
    /// given back keeps every node waiting for it until it expires. The
    /// last error is returned once the hold has lapsed anyway. While
    /// another guard of the agent holds the same slot (another part took
    /// it up again), the slot stays held: `Ok(false)`.
    pub async fn release(mut self) -> Result<bool, CoordinationError> {
        self.renewing.cancel();
        drop(self.ticket.take());
        let lapsed = tokio::time::Instant::now() + self.slots.lease_duration();
        let mut backoff = crate::index::Backoff::with(500, 10_000);
        loop {
            match self.slots.release_slot(&self.node, &self.slot).await {
                Ok(released) => return Ok(released),
                Err(e) if tokio::time::Instant::now() < lapsed => {
                    tracing::warn!(error = %e, slot = %self.slot, "giving back the slot failed; trying again");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl std::fmt::Debug for SlotGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotGuard")
            .field("node", &self.node)
            .field("slot", &self.slot)
            .field("still_held", &self.still_held())
            .finish()
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.renewing.cancel();
    }
}

async fn renew_until_stopped(
    slots: RebootSlots,
    node: String,
    slot: String,
    period: Duration,
    stop: CancellationToken,
    (lost, renewed, lost_now): (
        Arc<AtomicBool>,
        Arc<std::sync::Mutex<tokio::time::Instant>>,
        Arc<tokio::sync::Notify>,
    ),
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let asked = tokio::time::Instant::now();
        match slots.renew(&node, &slot).await {
            Ok(()) => {
                if let Ok(mut t) = renewed.lock() {
                    *t = asked;
                }
            }
            Err(e @ CoordinationError::Lost { .. }) => {
                tracing::warn!(error = %e, "reboot slot lost; no longer renewing it");
                lost.store(true, Ordering::Relaxed);
                lost_now.notify_one();
                return;
            }
            // A failed renewal is retried at the next tick; the hold lasts
            // three periods, so one miss does not lose it.
            Err(e) => tracing::warn!(error = %e, "renewing the reboot slot failed; will retry"),
        }
    }
}
