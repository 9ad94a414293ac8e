//! Local drain requests: someone on the node (an OS update script running
//! `maintd drain --wait`, a person) asked through the local endpoint for the
//! node to be drained.
//!
//! The request lives in the agent's memory only; nothing is written to the
//! cluster or the disk. A local request therefore does NOT survive an agent
//! restart: `maintd drain --wait` sees its request gone from the status and
//! fails (exit 1), so `maintd drain --wait && systemctl reboot` does not
//! reboot an undrained node; the script retries. This is deliberate: a file
//! under /run would outlive a crashed caller and leave the node drained with
//! nobody left to undrain it, while an in-memory request ends with the agent
//! and the node goes back to service.

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

/// Who made a local request. Told by how it arrived, never by its words:
/// a reason is free text any caller chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalSource {
    /// `POST /v1/drain` (`maintd drain`): waits for its policy and a
    /// reboot slot, as a planned maintenance does.
    Request,
    /// The FleetLock handler, which took its own slot already.
    FleetLock,
}

/// One local request to drain the node.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalRequest {
    pub source: LocalSource,
    /// Why, as the caller said it ("os update", "replace disk").
    pub reason: String,
    /// When the request arrived (RFC 3339, UTC).
    pub requested_at: String,
    /// Everything must be done by then, if the caller gave a deadline.
    pub deadline: Option<Instant>,
}

/// How a local request appears in the status document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LocalRequestStatus {
    pub reason: String,
    pub requested_at: String,
    /// Seconds left until the caller's deadline, if it gave one.
    pub deadline_seconds_left: Option<f64>,
}

/// The shared slot for the node's local drain request; cheap to clone. The
/// agent's loop subscribes and wakes when it changes.
#[derive(Clone)]
pub struct LocalRequests {
    slot: Arc<watch::Sender<Option<LocalRequest>>>,
}

impl Default for LocalRequests {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalRequests {
    pub fn new() -> Self {
        LocalRequests {
            slot: Arc::new(watch::Sender::new(None)),
        }
    }

    /// Asks for a drain. A second request replaces the first (its reason and
    /// deadline win): the latest caller is the one waiting.
    pub fn request(
        &self,
        source: LocalSource,
        reason: &str,
        deadline: Option<std::time::Duration>,
    ) {
        let req = LocalRequest {
            source,
            reason: reason.to_string(),
            requested_at: crate::drain::progress::now_time(),
            deadline: deadline.map(|d| crate::bounds::later(Instant::now(), d)),
        };
        self.slot.send_replace(Some(req));
    }

    /// Withdraws the request; returns whether there was one.
    pub fn clear(&self) -> bool {
        self.slot.send_replace(None).is_some()
    }

    /// The request in force, if any.
    pub fn current(&self) -> Option<LocalRequest> {
        self.slot.borrow().clone()
    }

    /// The request as the status document shows it.
    pub fn status(&self) -> Option<LocalRequestStatus> {
        self.current().map(|r| LocalRequestStatus {
            deadline_seconds_left: r
                .deadline
                .map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64()),
            reason: r.reason,
            requested_at: r.requested_at,
        })
    }

    /// A receiver that sees every change.
    pub fn subscribe(&self) -> watch::Receiver<Option<LocalRequest>> {
        self.slot.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn request_replace_and_clear_wake_subscribers() {
        let local = LocalRequests::new();
        let mut rx = local.subscribe();
        assert!(local.current().is_none());
        local.request(
            LocalSource::Request,
            "os update",
            Some(Duration::from_secs(60)),
        );
        rx.changed().await.unwrap();
        let r = local.current().unwrap();
        assert_eq!(r.reason, "os update");
        assert!(r.deadline.is_some());
        local.clone().request(LocalSource::Request, "disk", None);
        assert_eq!(local.status().unwrap().reason, "disk");
        assert!(local.status().unwrap().deadline_seconds_left.is_none());
        assert!(local.clear());
        assert!(!local.clear());
        rx.changed().await.unwrap();
        assert!(rx.borrow().is_none());
    }

    /// The deadline runs from the request, and the status counts it down.
    #[tokio::test(start_paused = true)]
    async fn the_deadline_counts_down_from_the_request() {
        let local = LocalRequests::new();
        local.request(
            LocalSource::Request,
            "os update",
            Some(Duration::from_secs(60)),
        );
        let left = || local.status().unwrap().deadline_seconds_left.unwrap();
        assert_eq!(left(), 60.0);
        tokio::time::advance(Duration::from_secs(45)).await;
        assert_eq!(left(), 15.0);
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(left(), 0.0, "past the deadline, nothing is left");
    }
}
