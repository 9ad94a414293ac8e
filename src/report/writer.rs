//! The NodeMaintenance status writer: one agent at a time, the holder of
//! the `maintd-status-writer` Lease in the agent's namespace, aggregates
//! the nodes' `NodeDrain` objects into each NodeMaintenance's status
//! (counts by phase, the nodes that need attention, the `Valid`
//! condition), only when something changed and at most once every
//! [`write_every`]: 5 s, longer in a large cluster, since every write
//! reaches every agent.
//!
//! The holder also publishes each rolling maintenance's drain order (see
//! [`crate::api::order`]) in an annotation of its Lease, as soon as it
//! changes (at most once a second): the Lease is what every agent watches
//! already, and the order changes only when a group of nodes is done.
//!
//! Only the holder watches the NodeDrain objects; the other agents watch
//! the Lease alone (a renewal every 20 s) and take it over, after a random
//! pause so they do not all try at once, when it has not been renewed for
//! its duration. Where no NodeMaintenance exists, nobody takes it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::nodedrain::{NODEDRAINS_PATH, NodeDrainStatus};
use crate::api::status::{STATUS_WRITER_MANAGER, aggregate, status_apply_body, valid_condition};
use crate::api::{self, NODEMAINTENANCES_PATH, order};
use crate::coordination::LeaseClock;
use crate::coordination::lease::{self as lease_body, SlotState};
use crate::index::{Index, WatchGuard, WatchTarget, sleep_until};
use crate::trigger::maintenance::MaintenanceTrigger;

/// Trims a NodeDrain to what [`aggregate`] and the order read: its
/// identity, and of its status the node, phase, maintenances, first
/// blocker, last error, drain order, pending turn and whether it waits.
pub(crate) fn keep_what_aggregates_read(o: &mut Value) {
    let meta = &o["metadata"];
    let mut status = serde_json::Map::new();
    for key in [
        "nodeName",
        "phase",
        "maintenances",
        "lastError",
        "drainOrder",
        "pendingTurn",
    ] {
        if let Some(v) = o["status"].get(key) {
            status.insert(key.to_string(), v.clone());
        }
    }
    // Whether the node waits for a turn, not why: kept short.
    if o["status"].get("waiting").is_some_and(|w| !w.is_null()) {
        status.insert("waiting".into(), Value::String(String::new()));
    }
    if let Some(first) = o["status"]["blockers"].get(0) {
        status.insert("blockers".into(), Value::Array(vec![first.clone()]));
    }
    *o = serde_json::json!({
        "metadata": {
            "name": meta["name"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
        },
        "status": status,
    });
}

/// The Lease that says which agent writes NodeMaintenance status.
pub const LEASE_NAME: &str = "maintd-status-writer";
/// How long a hold lasts without renewal.
const LEASE_DURATION: Duration = Duration::from_secs(60);
/// The holder renews this often.
const RENEW_EVERY: Duration = Duration::from_secs(20);
/// At most one status write per object this often in a small cluster.
pub const WRITE_EVERY: Duration = Duration::from_secs(5);
/// Every agent watches every NodeMaintenance, so each status write is an
/// event for each of them: the writer waits this long per agent between
/// writes (agents counted by their NodeDrain objects), so the cluster
/// receives at most 100 such events a second whatever its size.
const WRITE_EVERY_PER_AGENT: Duration = Duration::from_millis(10);
/// The longest wait between writes (at 6,000 agents and more).
const WRITE_EVERY_MAX: Duration = Duration::from_secs(60);

/// How long the writer waits between status writes with `agents` agents.
pub fn write_every(agents: usize) -> Duration {
    let per_agent = WRITE_EVERY_PER_AGENT.saturating_mul(u32::try_from(agents).unwrap_or(u32::MAX));
    per_agent.clamp(WRITE_EVERY, WRITE_EVERY_MAX)
}
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One agent's part in writing NodeMaintenance status.
pub struct StatusWriter {
    pub client: kube::Client,
    /// The view of the [`LEASE_NAME`] Lease, which this runs; the agent's
    /// loop reads the published drain order from it.
    pub leases: Index,
    /// This agent's node: its identity in the Lease.
    pub node: String,
    /// Where the Lease lives (the agent's namespace).
    pub namespace: String,
    pub maintenance: MaintenanceTrigger,
    pub guard: WatchGuard,
    pub writes: prometheus_client::metrics::counter::Counter,
    /// 1 while this agent holds the Lease and writes, else 0.
    pub holding: prometheus_client::metrics::gauge::Gauge,
    /// The NodeMaintenance objects this agent sees.
    pub objects: prometheus_client::metrics::gauge::Gauge,
    /// Whether the Lease's hold has lapsed, as this agent has watched it
    /// (see [`LeaseClock`]).
    pub clock: LeaseClock,
}

/// The holder looks at the drain order at most this often.
const ORDER_EVERY: Duration = Duration::from_secs(1);
/// How long a rolling maintenance's turns are pending before its order is
/// first published, at the least: the agents report their nodes one by one.
const ORDER_SETTLE: Duration = Duration::from_secs(10);

/// The holder's view while it holds: the NodeDrain objects, and what it
/// wrote last per NodeMaintenance (uid → aggregates and condition).
struct Holding {
    drains: Index,
    stop: CancellationToken,
    written: BTreeMap<String, Value>,
    last_write: Option<Instant>,
    /// When the order was last looked at, the NodeDrain version then, and
    /// whether to look again without a change (see `publish_order`).
    order_looked: Option<(Instant, u64, bool)>,
    /// Since when each rolling maintenance (by uid) has had turns pending.
    pending_since: std::collections::HashMap<String, Instant>,
}

impl Holding {
    /// The nodes' reports, as the NodeDrain objects held say them.
    fn statuses(&self) -> Vec<NodeDrainStatus> {
        self.drains
            .all()
            .iter()
            .filter_map(|d| serde_json::from_value(d["status"].clone()).ok())
            .collect()
    }
}

impl StatusWriter {
    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let leases = self.leases.clone();
        let target = WatchTarget::new(
            format!(
                "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
                self.namespace
            ),
            Some(format!("metadata.name={LEASE_NAME}")),
            self.guard.clone(),
        );
        tokio::spawn(
            leases
                .clone()
                .run(self.client.clone(), target, stop.clone()),
        );
        let mut lease_changes = leases.changes();
        let mut objects = self.maintenance.index.changes();
        let mut holding: Option<Holding> = None;
        // A random pause before taking a free Lease: thousands of agents
        // see it expire at the same moment.
        let mut try_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let seen = self.maintenance.index.len();
            self.objects.set(i64::try_from(seen).unwrap_or(i64::MAX));
            let interested = seen > 0;
            let lease = leases
                .by_name(LEASE_NAME)
                .and_then(|l| serde_json::from_value::<Lease>((*l).clone()).ok());
            let state = lease
                .as_ref()
                .map(|l| self.clock.state(l))
                .unwrap_or(SlotState::Free);
            let mine = matches!(&state, SlotState::Held { holder, expired: false } if *holder == self.node);
            let mut wake: Option<Instant> = None;
            self.holding.set(i64::from(mine && interested));
            if mine && interested {
                let h = holding.get_or_insert_with(|| self.start_holding(&stop));
                // From when this agent saw its last renewal land, by its own
                // clock: not from the time it wrote, which a clock set
                // back would put far in the future.
                let renew_at = lease
                    .as_ref()
                    .and_then(|l| self.clock.unchanged_since(l))
                    .map(|t| t + RENEW_EVERY);
                if renew_at.is_none_or(|t| t <= now) {
                    if let Some(l) = &lease {
                        self.write_lease(lease_body::renewed(l, Timestamp::now()), true)
                            .await;
                    }
                    wake = Some(now + RENEW_EVERY);
                } else {
                    wake = renew_at;
                }
                let every = write_every(h.drains.len());
                let due = h.last_write.is_none_or(|t| t + every <= now);
                if due && h.drains.synced() {
                    self.write_all(h).await;
                    h.last_write = Some(Instant::now());
                }
                let next_write = h.last_write.map(|t| t + every);
                let next_order = match (&lease, h.drains.synced()) {
                    (Some(l), true) => self.publish_order(h, l, now).await,
                    _ => None,
                };
                wake = [wake, next_write, next_order].into_iter().flatten().min();
            } else {
                if let Some(h) = holding.take() {
                    h.stop.cancel();
                }
                let free = match &state {
                    SlotState::Free => true,
                    SlotState::Held { expired, .. } => *expired,
                };
                if interested && free && leases.synced() {
                    let at = *try_at.get_or_insert_with(|| {
                        now + Duration::from_millis(rand::random_range(0..5_000))
                    });
                    if at <= now {
                        try_at = None;
                        let taken = match &lease {
                            Some(l) => lease_body::taken_over(
                                l,
                                &self.node,
                                LEASE_DURATION,
                                Timestamp::now(),
                            ),
                            None => self.new_lease(),
                        };
                        self.write_lease(taken, lease.is_some()).await;
                    } else {
                        wake = Some(at);
                    }
                } else {
                    try_at = None;
                    // A hold that lapses without a renewal: look again then.
                    wake = lease
                        .as_ref()
                        .and_then(|l| self.clock.expires_at(l))
                        .map(|t| t + Duration::from_millis(100))
                        .filter(|t| *t > now);
                }
            }
            let drains = holding.as_ref().map(|h| h.drains.clone());
            tokio::select! {
                _ = sleep_until(wake) => {}
                _ = lease_changes.changed() => {}
                _ = objects.changed() => {}
                _ = async {
                    match drains {
                        // Changes are picked up by the next write, at most
                        // every `write_every`; this only wakes the loop.
                        Some(d) => d.changes().changed().await.map(|_| ()).unwrap_or(()),
                        None => std::future::pending().await,
                    }
                } => {}
                _ = stop.cancelled() => {
                    // Given back on the way out, so that another agent
                    // takes over at once rather than a lease duration
                    // later (a DaemonSet rollout restarts every agent).
                    if mine && let Some(l) = &lease {
                        self.write_lease(lease_body::released(l), true).await;
                    }
                    return;
                }
            }
        }
    }

    fn start_holding(&self, stop: &CancellationToken) -> Holding {
        tracing::info!(node = %self.node, "writing NodeMaintenance status for the cluster (holding {LEASE_NAME})");
        let drains = Index::new();
        let child = stop.child_token();
        // One NodeDrain per node: at 5,000 nodes, whole objects would take
        // most of the pod's memory. Only what the aggregates read is kept.
        let target = WatchTarget::new(NODEDRAINS_PATH, None, self.guard.clone())
            .trimmed_with(keep_what_aggregates_read);
        tokio::spawn(
            drains
                .clone()
                .run(self.client.clone(), target, child.clone()),
        );
        Holding {
            drains,
            stop: child,
            written: BTreeMap::new(),
            last_write: None,
            order_looked: None,
            pending_since: Default::default(),
        }
    }

    fn new_lease(&self) -> Lease {
        let mut l = lease_body::new_held(
            LEASE_NAME,
            &self.namespace,
            "status-writer",
            &self.node,
            LEASE_DURATION,
            Timestamp::now(),
        );
        l.metadata.labels = None;
        l
    }

    /// Creates (`replace` false) or replaces the Lease; a conflict means
    /// another agent got there first, which the watch will show.
    async fn write_lease(&self, lease: Lease, replace: bool) {
        let base = format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
            self.namespace
        );
        let body = serde_json::to_vec(&lease).unwrap_or_default();
        let req = if replace {
            http::Request::put(format!("{base}/{LEASE_NAME}"))
        } else {
            http::Request::post(base)
        };
        let Ok(req) = req.header("content-type", "application/json").body(body) else {
            return;
        };
        match tokio::time::timeout(CALL_TIMEOUT, self.client.request::<Value>(req)).await {
            Ok(Ok(_)) => {}
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {}
            Ok(Err(e)) => {
                crate::refusals::log_retry(&format!("writing the {LEASE_NAME} Lease"), &e)
            }
            Err(_) => tracing::warn!("writing the {LEASE_NAME} Lease timed out"),
        }
    }

    /// Publishes the rolling maintenances' drain order in the Lease when it
    /// changed; returns when to look again (None: when the NodeDrain
    /// objects change). Looks at most every [`ORDER_EVERY`], and only when
    /// the NodeDrain objects changed or an order waits to settle.
    async fn publish_order(&self, h: &mut Holding, lease: &Lease, now: Instant) -> Option<Instant> {
        let version = *h.drains.changes().borrow();
        if let Some((at, seen, again)) = h.order_looked {
            if at + ORDER_EVERY > now {
                return Some(at + ORDER_EVERY);
            }
            if seen == version && !again {
                return None;
            }
        }
        let drains = h.statuses();
        let lease_json = serde_json::to_value(lease).unwrap_or_default();
        let published = order::read(&lease_json);
        let settle = write_every(drains.len()).max(ORDER_SETTLE);
        let lowest = order::lowest(&drains);
        let waiting = order::waiting(&drains, &lowest);
        // One pass over the objects: each one's uid, and whether every node
        // of it still waiting fits in its line, so that the nodes in line
        // may take any slot (see `RebootSlots::widened`). Only objects with
        // turns pending are looked at.
        let mut uids: BTreeMap<String, String> = BTreeMap::new();
        let mut any_slot: std::collections::BTreeSet<String> = Default::default();
        for o in self.maintenance.index.all() {
            let Some(name) = o["metadata"]["name"].as_str() else {
                continue;
            };
            if !lowest.contains_key(name) {
                continue;
            }
            uids.insert(name.to_string(), uid_of(&o));
            let fits = api::parse(&o).ok().and_then(|nm| {
                let max = u32::try_from(nm.spec.max_concurrent_drains?).ok()?;
                let ahead = u32::try_from(nm.spec.cordon_ahead.unwrap_or(0)).unwrap_or(0);
                let line = crate::trigger::line_size(max, ahead)?;
                Some(waiting.get(name).copied().unwrap_or(0) <= line as usize)
            });
            if fits == Some(true) {
                any_slot.insert(name.to_string());
            }
        }
        let publish = order::to_publish(
            &lowest,
            &any_slot,
            &uids,
            &published,
            &mut h.pending_since,
            now,
            settle,
        );
        if publish != published {
            let mut next = lease_body::renewed(lease, Timestamp::now());
            let annotations = next.metadata.annotations.get_or_insert_with(BTreeMap::new);
            if publish.is_empty() {
                annotations.remove(order::ANNOTATION);
            } else {
                annotations.insert(
                    order::ANNOTATION.to_string(),
                    serde_json::to_string(&publish).unwrap_or_default(),
                );
            }
            self.write_lease(next, true).await;
        }
        // Looked at again by itself while an order waits to settle, and
        // until the Lease shows what was written (a write may lose a race
        // with the renewal).
        let again = publish != published || publish.len() < h.pending_since.len();
        h.order_looked = Some((now, version, again));
        again.then(|| now + ORDER_EVERY)
    }

    /// Writes every NodeMaintenance whose aggregates or condition changed.
    async fn write_all(&self, h: &mut Holding) {
        let drains = h.statuses();
        let objects: Vec<Arc<Value>> = self.maintenance.index.all();
        let uids: Vec<String> = objects.iter().map(|o| uid_of(o)).collect();
        h.written.retain(|uid, _| uids.contains(uid));
        let now = crate::drain::progress::now_time();
        for obj in &objects {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            let verdict = api::parse(obj).and_then(|nm| api::validate(&nm));
            let mut status = if verdict.is_ok() {
                aggregate(name, &drains)
            } else {
                serde_json::json!({})
            };
            status["conditions"] = serde_json::json!([valid_condition(obj, &verdict, &now)]);
            // Compared without the condition's transition time, which is
            // the write's own time for a new condition.
            let mut key = status.clone();
            key["conditions"][0]["lastTransitionTime"] = Value::Null;
            let uid = uid_of(obj);
            if h.written.get(&uid) == Some(&key) {
                continue;
            }
            let conditions = status["conditions"][0].take();
            let body = status_apply_body(name, status, Some(conditions), &now);
            let path = format!(
                "{NODEMAINTENANCES_PATH}/{name}/status?fieldManager={STATUS_WRITER_MANAGER}&force=true"
            );
            if self.apply(path, name, body, obj).await {
                h.written.insert(uid, key);
            }
        }
    }

    /// One apply, based on the object's version as last seen: a late
    /// write of older aggregates is refused rather than landing over newer
    /// ones. The version comes from the metadata view, which every status
    /// write moves on; the full objects are fetched on spec changes only.
    async fn apply(&self, path: String, name: &str, body: Value, obj: &Value) -> bool {
        let seen = self
            .maintenance
            .view()
            .by_name(name)
            .filter(|m| m["metadata"]["uid"] == obj["metadata"]["uid"]);
        let rv = seen.as_deref().or(Some(obj)).and_then(super::apply::rv_of);
        let applier = super::apply::Applier {
            client: &self.client,
            timeout: CALL_TIMEOUT,
            writes: &self.writes,
            what: "NodeMaintenance status",
        };
        let object_path = format!("{NODEMAINTENANCES_PATH}/{name}");
        let outcome = applier
            .apply_based(&path, Some(&object_path), &body, rv)
            .await;
        matches!(outcome, super::apply::Applied::Written(_))
    }
}

fn uid_of(o: &Value) -> String {
    o["metadata"]["uid"]
        .as_str()
        .or(o["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trimmed_node_drain_aggregates_as_the_whole_one_does() {
        let whole = serde_json::json!({
            "metadata": {"name": "node-a", "uid": "u1", "resourceVersion": "7",
                "managedFields": [{"manager": "maintd", "fieldsV1": {"f:status": {}}}]},
            "status": {"nodeName": "node-a", "phase": "Blocked", "stage": "2",
                "podsTotal": 110, "podsRemaining": 3, "progress": "107/110",
                "blockers": [
                    {"namespace": "shop", "pod": "db-0", "reason": "budget db allows no disruption"},
                    {"namespace": "shop", "pod": "db-1", "reason": "budget db allows no disruption"}],
                "blockersTotal": 2, "triggers": ["NodeMaintenance m (stage Drain)"],
                "maintenances": ["m"], "lastError": "x", "updatedAt": "2026-11-25T10:00:00Z"}});
        let mut trimmed = whole.clone();
        keep_what_aggregates_read(&mut trimmed);
        assert!(trimmed["metadata"].get("managedFields").is_none());
        assert_eq!(trimmed["metadata"]["uid"], "u1");
        let read =
            |v: &Value| -> NodeDrainStatus { serde_json::from_value(v["status"].clone()).unwrap() };
        assert_eq!(
            aggregate("m", [&read(&whole)]),
            aggregate("m", [&read(&trimmed)])
        );
        assert!(
            serde_json::to_vec(&trimmed).unwrap().len() * 2
                < serde_json::to_vec(&whole).unwrap().len(),
            "less than half is kept"
        );
    }

    #[test]
    fn the_wait_between_writes_grows_with_the_agents_each_write_reaches() {
        assert_eq!(write_every(0), WRITE_EVERY);
        assert_eq!(write_every(500), WRITE_EVERY);
        assert_eq!(write_every(1_000), Duration::from_secs(10));
        assert_eq!(write_every(5_000), Duration::from_secs(50));
        assert_eq!(write_every(100_000), WRITE_EVERY_MAX);
        // At most 100 events a second reach the agents, at any size.
        for agents in [10usize, 1_000, 5_000, 6_000] {
            let per_second = agents as f64 / write_every(agents).as_secs_f64();
            assert!(per_second <= 100.0, "{agents} agents: {per_second}/s");
        }
    }
}
