//! medik8s' coordination Lease, taken as its node-maintenance-operator
//! takes it: while a medik8s NodeMaintenance names this node, the Lease
//! `medik8s-leases/node-<node>` is held by `node-maintenance` for an hour
//! (renewed well before it runs out), owned by the Node. medik8s'
//! remediation operators (Self Node Remediation, Node Healthcheck) read it
//! and leave a node under maintenance alone. When the object is gone the
//! hold is given back by clearing its holder, which medik8s takes as free.
//! A Lease another holder keeps valid is not taken: the agent says so and
//! asks again later; the drain goes on.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::coordination::LeaseClock;
use crate::coordination::lease::SlotState;

/// Where medik8s keeps its Leases, and who node-maintenance-operator is.
pub const NAMESPACE: &str = "medik8s-leases";
pub const HOLDER: &str = "node-maintenance";
/// How long one hold lasts (node-maintenance-operator's hour).
pub const DURATION: Duration = Duration::from_secs(3600);
/// A hold is renewed once it is this old: a quarter of its length.
const RENEW_AFTER: Duration = Duration::from_secs(900);
/// How soon to look again after a failure or a Lease held by another.
const RETRY: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// medik8s' name for a node's Lease: its kind and name, lower case.
pub fn lease_name(node: &str) -> String {
    format!("node-{}", node.to_ascii_lowercase())
}

/// What to do with the Lease, decided from what it says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do now.
    Keep,
    Create,
    /// Take it (free, expired, or ours) and renew it from now.
    Hold,
    /// Clear the holder: the node is no longer held for medik8s.
    Release,
    /// Someone else holds it and their hold is valid.
    HeldBy(String),
}

/// The step for a Lease (None: there is none) when the node is (`want`)
/// or is not held for a medik8s object, at `now`. Whether another's hold
/// has lapsed is `clock`'s to say: this agent takes it over only once it
/// has seen it unrenewed for its duration, whatever the holder's times
/// read against this node's clock.
pub fn step(current: Option<&Lease>, clock: &LeaseClock, want: bool, now: Timestamp) -> Step {
    let Some(lease) = current else {
        return if want { Step::Create } else { Step::Keep };
    };
    let state = clock.state(lease);
    match (want, state) {
        (false, SlotState::Held { holder, .. }) if holder == HOLDER => Step::Release,
        (false, _) => Step::Keep,
        (
            true,
            SlotState::Held {
                holder,
                expired: false,
            },
        ) if holder != HOLDER => Step::HeldBy(holder),
        (
            true,
            SlotState::Held {
                holder,
                expired: false,
            },
        ) if holder == HOLDER => {
            // Renewed when it is a quarter old by the time it says, or by
            // how long this agent has seen it unchanged: a clock set back
            // since the last renewal must not put the next one off.
            let renewed = lease
                .spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0);
            let limit = SignedDuration::try_from(RENEW_AFTER).unwrap_or_default();
            let fresh = renewed.is_some_and(|t| {
                let age = now.duration_since(t);
                !age.is_negative() && age < limit
            }) && clock
                .unchanged_since(lease)
                .is_some_and(|since| since.elapsed() < RENEW_AFTER);
            if fresh { Step::Keep } else { Step::Hold }
        }
        (true, _) => Step::Hold,
    }
}

/// The Lease as node-maintenance-operator writes it: held from `now` for
/// [`DURATION`], owned by the Node (`node_uid`). A takeover counts a
/// transition and a new acquire time; a renewal keeps both.
pub fn held(current: Option<&Lease>, node: &str, node_uid: &str, now: Timestamp) -> Lease {
    let mut lease = current.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(lease_name(node)),
            namespace: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    lease.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.into(),
        uid: node_uid.into(),
        ..OwnerReference::default()
    }]);
    let before = lease.spec.take().unwrap_or_default();
    // Held by node-maintenance already (lapsed or not, nobody took it
    // over): a renewal, not a takeover.
    let ours = before.holder_identity.as_deref() == Some(HOLDER);
    let transitions = before.lease_transitions.unwrap_or(0);
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(HOLDER.into()),
        lease_duration_seconds: Some(crate::coordination::lease::duration_seconds(DURATION)),
        acquire_time: if ours {
            before.acquire_time
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(match (current.is_some(), ours) {
            (false, _) => 0,
            (true, true) => transitions,
            (true, false) => transitions.saturating_add(1),
        }),
        ..before
    });
    lease
}

/// The Lease given back: no holder, no times (resourceVersion kept).
pub fn given_back(current: &Lease) -> Lease {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.acquire_time = None;
    spec.renew_time = None;
    lease
}

impl Agent {
    /// Holds or gives back medik8s' Lease for this node until `stop`:
    /// looks again when medik8s' objects change, when a hold is due for
    /// renewal, and after a failure.
    pub(super) async fn keep_medik8s_lease(self, client: kube::Client, stop: CancellationToken) {
        let Some(m) = self.medik8s.clone() else {
            return;
        };
        let api: Api<Lease> = Api::namespaced(client, NAMESPACE);
        let name = lease_name(&self.config.node);
        let mut objects = m.index.changes();
        let mut told: Option<String> = None;
        loop {
            // Until medik8s' objects are known, "none names this node" may
            // only mean "not listed yet": a hold is neither taken nor given
            // back (given back, medik8s' remediation could act on a node
            // under maintenance).
            if !m.ready() {
                tokio::select! {
                    r = objects.changed() => if r.is_err() { return },
                    _ = stop.cancelled() => return,
                }
                continue;
            }
            let want =
                !crate::trigger::medik8s::requests(&m.index.all(), &self.config.node).is_empty();
            let wait = match self.lease_pass(&api, &name, want, &mut told).await {
                Ok(true) => RENEW_AFTER,
                Ok(false) => RETRY,
                Err(e) => {
                    let says = format!(
                        "medik8s' Lease {NAMESPACE}/{name} could not be {}: {e}",
                        if want { "held" } else { "given back" }
                    );
                    if told.as_deref() != Some(says.as_str()) {
                        tracing::warn!("{says}");
                        told = Some(says);
                    }
                    RETRY
                }
            };
            tokio::select! {
                r = objects.changed() => if r.is_err() { return },
                _ = tokio::time::sleep(wait) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// One look at the Lease. Ok(true): as wanted; Ok(false): held by
    /// another, asked again soon.
    async fn lease_pass(
        &self,
        api: &Api<Lease>,
        name: &str,
        want: bool,
        told: &mut Option<String>,
    ) -> Result<bool, String> {
        let call = |e: kube::Error| e.to_string();
        let current = tokio::time::timeout(CALL_TIMEOUT, api.get_opt(name))
            .await
            .map_err(|_| format!("no answer within {CALL_TIMEOUT:?}"))?
            .map_err(call)?;
        let now = Timestamp::now();
        let node_uid = || {
            self.node
                .by_name(&self.config.node)
                .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_string))
                .ok_or_else(|| "the Node has not been read yet".to_string())
        };
        let lease = match step(current.as_ref(), &self.lease_clock, want, now) {
            Step::Keep => return Ok(true),
            Step::HeldBy(holder) => {
                let says = format!(
                    "medik8s' Lease {NAMESPACE}/{name} is held by {holder}: medik8s' remediation may act on this node during its maintenance; asking again every {}s",
                    RETRY.as_secs()
                );
                if told.as_deref() != Some(says.as_str()) {
                    self.warn(says.clone());
                    *told = Some(says);
                }
                return Ok(false);
            }
            Step::Create | Step::Hold => {
                held(current.as_ref(), &self.config.node, &node_uid()?, now)
            }
            Step::Release => match &current {
                Some(c) => given_back(c),
                None => return Ok(true),
            },
        };
        let pp = PostParams::default();
        let write = async {
            match current {
                None => api.create(&pp, &lease).await,
                Some(_) => api.replace(name, &pp, &lease).await,
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, write)
            .await
            .map_err(|_| format!("no answer within {CALL_TIMEOUT:?}"))?
            .map_err(call)?;
        *told = None;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed_ago: Option<u64>, now: Timestamp) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("node-n1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                lease_duration_seconds: Some(3600),
                renew_time: renewed_ago
                    .map(|s| MicroTime(now - SignedDuration::from_secs(s as i64))),
                acquire_time: renewed_ago
                    .map(|s| MicroTime(now - SignedDuration::from_secs(s as i64 + 60))),
                lease_transitions: Some(2),
                ..LeaseSpec::default()
            }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_done_with_the_lease() {
        let now = Timestamp::now();
        let fresh = LeaseClock::new();
        let cases: Vec<(Option<Lease>, bool, Step)> = vec![
            (None, true, Step::Create),
            (None, false, Step::Keep),
            // Ours and fresh: nothing; ours and a quarter old: renewed.
            (Some(lease(Some(HOLDER), Some(60), now)), true, Step::Keep),
            (Some(lease(Some(HOLDER), Some(1000), now)), true, Step::Hold),
            // Ours, renewed "in the future" (this node's clock was set
            // back): renewed, not put off.
            (
                Some(lease(
                    Some(HOLDER),
                    Some(0),
                    now + SignedDuration::from_hours(2),
                )),
                true,
                Step::Hold,
            ),
            (Some(lease(None, None, now)), true, Step::Hold),
            // Another's hold, however old its times read: not taken by
            // an agent that has not watched it lapse.
            (
                Some(lease(Some("self-node-remediation"), Some(4000), now)),
                true,
                Step::HeldBy("self-node-remediation".into()),
            ),
            (
                Some(lease(Some("node-healthcheck"), Some(60), now)),
                true,
                Step::HeldBy("node-healthcheck".into()),
            ),
            // No longer wanted: ours given back, another's left alone.
            (
                Some(lease(Some(HOLDER), Some(60), now)),
                false,
                Step::Release,
            ),
            (
                Some(lease(Some("node-healthcheck"), Some(60), now)),
                false,
                Step::Keep,
            ),
            (Some(lease(None, None, now)), false, Step::Keep),
        ];
        for (current, want, expected) in cases {
            assert_eq!(
                step(current.as_ref(), &LeaseClock::new(), want, now),
                expected,
                "{current:?} want={want}"
            );
        }
        // Another's hold this agent has watched go unrenewed for its hour:
        // taken. Ours, seen unchanged for a quarter of it: renewed.
        let mut theirs = lease(Some("self-node-remediation"), Some(60), now);
        theirs.metadata.name = Some("node-n2".into());
        let ours = lease(Some(HOLDER), Some(60), now);
        assert_eq!(step(Some(&ours), &fresh, true, now), Step::Keep);
        step(Some(&theirs), &fresh, true, now);
        tokio::time::advance(RENEW_AFTER).await;
        assert_eq!(step(Some(&ours), &fresh, true, now), Step::Hold);
        tokio::time::advance(DURATION).await;
        assert_eq!(step(Some(&theirs), &fresh, true, now), Step::Hold);
    }

    #[test]
    fn the_lease_reads_as_medik8s_writes_it() {
        let now = Timestamp::now();
        let new = held(None, "N1", "uid-1", now);
        assert_eq!(new.metadata.name.as_deref(), Some("node-n1"));
        assert_eq!(new.metadata.namespace.as_deref(), Some(NAMESPACE));
        let owner = &new.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "N1", "uid-1")
        );
        let spec = new.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some(HOLDER));
        assert_eq!(spec.lease_duration_seconds, Some(3600));
        assert_eq!(spec.lease_transitions, Some(0));
        assert_eq!(spec.acquire_time, spec.renew_time);
        // A renewal keeps the acquire time and the count; a takeover moves both.
        let ours = lease(Some(HOLDER), Some(1000), now);
        let renewed = held(Some(&ours), "n1", "uid-1", now);
        let (was, is) = (ours.spec.as_ref().unwrap(), renewed.spec.as_ref().unwrap());
        assert_eq!(is.acquire_time, was.acquire_time);
        assert_eq!(is.lease_transitions, Some(2));
        assert_eq!(is.renew_time, Some(MicroTime(now)));
        assert_eq!(
            renewed.metadata.resource_version.as_deref(),
            Some("7"),
            "a conditional write"
        );
        let theirs = lease(Some("node-healthcheck"), Some(4000), now);
        let taken = held(Some(&theirs), "n1", "uid-1", now);
        let is = taken.spec.as_ref().unwrap();
        assert_eq!(is.acquire_time, Some(MicroTime(now)));
        assert_eq!(is.lease_transitions, Some(3));
        let back = given_back(&renewed);
        let spec = back.spec.as_ref().unwrap();
        assert!(spec.holder_identity.is_none() && spec.renew_time.is_none());
        assert_eq!(
            step(Some(&back), &LeaseClock::new(), true, now),
            Step::Hold,
            "free again"
        );
    }
}
