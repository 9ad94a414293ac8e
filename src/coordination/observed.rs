//! Whether a Lease's hold has lapsed, judged as Kubernetes' own leader
//! election judges it: never by comparing the holder's `renewTime` with
//! this node's wall clock (a node whose clock runs ahead would take over a
//! slot its holder keeps renewing), but by how long this agent has seen
//! the same record, unchanged, by its own monotonic clock. A hold counts
//! as expired once its record (holder, times, duration, resourceVersion)
//! has stayed as it is for the Lease's duration since this agent first
//! saw it so; until an agent has watched a Lease that long (an agent just
//! started, a Lease seen for the first time) a hold is a hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;

use super::lease::SlotState;

/// The most Leases one agent keeps a record of: it looks at its own few
/// slots, places and Leases, so this is never reached in use; past it the
/// record seen longest ago is forgotten (that hold then counts as held
/// again, for a full duration: the careful side).
const MAX_RECORDS: usize = 4096;

/// What this agent has seen of each Lease, and since when (see the
/// module's words). Cheap to clone; clones share what they have seen, so
/// every part of one agent that reads a Lease judges it alike.
#[derive(Clone, Default)]
pub struct LeaseClock {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
}

/// One Lease's record as last seen, and when this agent first saw it so.
struct Seen {
    record: Record,
    since: Instant,
}

/// What changes when a holder renews, takes or gives back a Lease.
#[derive(PartialEq, Eq)]
struct Record {
    holder: String,
    acquire: Option<String>,
    renew: Option<String>,
    duration: Option<i32>,
    version: Option<String>,
}

impl LeaseClock {
    /// A clock that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Who holds `lease` now, as this agent has watched it; looking is
    /// what starts (or keeps) the watch of its record.
    pub fn state(&self, lease: &Lease) -> SlotState {
        self.look(lease, Instant::now()).0
    }

    /// When `lease`'s hold lapses if it stays unchanged from now on (None:
    /// free, or lapsed already).
    pub fn expires_at(&self, lease: &Lease) -> Option<Instant> {
        self.look(lease, Instant::now()).1
    }

    /// Since when this agent has seen `lease` as it is now (None: free):
    /// for a holder, about when it last renewed, by this process's clock.
    pub fn unchanged_since(&self, lease: &Lease) -> Option<Instant> {
        self.look(lease, Instant::now()).2
    }

    /// [`Self::state`], [`Self::expires_at`] and [`Self::unchanged_since`]
    /// at `now`.
    fn look(&self, lease: &Lease, now: Instant) -> (SlotState, Option<Instant>, Option<Instant>) {
        let Some(spec) = &lease.spec else {
            return (SlotState::Free, None, None);
        };
        let holder = match spec.holder_identity.as_deref() {
            Some(h) if !h.is_empty() => h.to_string(),
            _ => {
                self.forget(lease);
                return (SlotState::Free, None, None);
            }
        };
        // A hold that names no duration (not one maintd wrote) lasts as
        // long as maintd's own: a holder is never judged gone sooner.
        let secs = spec
            .lease_duration_seconds
            .filter(|s| *s > 0)
            .unwrap_or_else(|| super::lease::duration_seconds(super::DEFAULT_LEASE_DURATION));
        let record = Record {
            holder: holder.clone(),
            acquire: spec.acquire_time.as_ref().map(|t| t.0.to_string()),
            renew: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            duration: spec.lease_duration_seconds,
            version: lease.metadata.resource_version.clone(),
        };
        let since = self.since(key(lease), record, now);
        let lapses = crate::bounds::later(since, Duration::from_secs(secs.unsigned_abs().into()));
        let expired = lapses <= now;
        (
            SlotState::Held { holder, expired },
            (!expired).then_some(lapses),
            Some(since),
        )
    }

    /// Since when this agent has seen `record` for the Lease `key`,
    /// unchanged (now, when it is new or changed).
    fn since(&self, key: String, record: Record, now: Instant) -> Instant {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = seen.get_mut(&key) {
            if s.record != record {
                *s = Seen { record, since: now };
            }
            return s.since;
        }
        if seen.len() >= MAX_RECORDS
            && let Some(oldest) = seen
                .iter()
                .min_by_key(|(_, s)| s.since)
                .map(|(k, _)| k.clone())
        {
            seen.remove(&oldest);
        }
        seen.insert(key, Seen { record, since: now });
        now
    }

    fn forget(&self, lease: &Lease) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key(lease));
    }
}

fn key(lease: &Lease) -> String {
    format!(
        "{}/{}",
        lease.metadata.namespace.as_deref().unwrap_or_default(),
        lease.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(name: &str, holder: Option<&str>, renew: &str, secs: i32, rv: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("maintd".into()),
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: Some(MicroTime(renew.parse::<Timestamp>().unwrap())),
                lease_duration_seconds: Some(secs),
                ..LeaseSpec::default()
            }),
        }
    }

    fn expired(s: SlotState) -> Option<bool> {
        match s {
            SlotState::Held { expired, .. } => Some(expired),
            SlotState::Free => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_lapses_only_after_its_record_stayed_unchanged_for_its_duration() {
        let clock = LeaseClock::new();
        // Renewed, by the holder's clock, an hour ago (a clock an hour
        // behind this node's) or an hour ahead: neither says anything.
        for renew in ["2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z"] {
            let clock = LeaseClock::new();
            let l = lease("s", Some("a"), renew, 10, "1");
            assert_eq!(expired(clock.state(&l)), Some(false), "{renew}");
            tokio::time::advance(Duration::from_secs(9)).await;
            assert_eq!(expired(clock.state(&l)), Some(false), "{renew}");
            tokio::time::advance(Duration::from_secs(1)).await;
            assert_eq!(expired(clock.state(&l)), Some(true), "{renew}");
            assert_eq!(clock.expires_at(&l), None);
        }
        // A holder that keeps renewing keeps its hold, whatever its times.
        for rv in 1..=10 {
            let l = lease("s", Some("a"), "2020-01-01T00:00:00Z", 10, &rv.to_string());
            assert_eq!(expired(clock.state(&l)), Some(false));
            assert_eq!(
                clock.expires_at(&l),
                Some(Instant::now() + Duration::from_secs(10))
            );
            tokio::time::advance(Duration::from_secs(5)).await;
        }
        // Given back: free, and a later hold starts a new watch.
        let free = lease("s", None, "2020-01-01T00:00:00Z", 10, "99");
        assert_eq!(clock.state(&free), SlotState::Free);
        let again = lease("s", Some("b"), "2020-01-01T00:00:00Z", 10, "100");
        assert_eq!(expired(clock.state(&again)), Some(false));
        // Another Lease of the same name in another namespace is another.
        let mut elsewhere = again.clone();
        elsewhere.metadata.namespace = Some("other".into());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(expired(clock.state(&again)), Some(true));
        assert_eq!(expired(clock.state(&elsewhere)), Some(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_without_a_duration_lasts_as_long_as_maintds_and_the_records_are_bounded() {
        let clock = LeaseClock::new();
        let l = lease("s", Some("a"), "2026-01-01T00:00:00Z", 0, "1");
        assert_eq!(expired(clock.state(&l)), Some(false));
        tokio::time::advance(super::super::DEFAULT_LEASE_DURATION).await;
        assert_eq!(expired(clock.state(&l)), Some(true));
        for i in 0..MAX_RECORDS + 10 {
            clock.state(&lease(
                &format!("s-{i}"),
                Some("a"),
                "2026-01-01T00:00:00Z",
                5,
                "1",
            ));
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert_eq!(clock.seen.lock().unwrap().len(), MAX_RECORDS);
        // The first ones were forgotten: held again for a full duration.
        let first = lease("s-0", Some("a"), "2026-01-01T00:00:00Z", 5, "1");
        assert_eq!(expired(clock.state(&first)), Some(false));
    }
}
