//! What the agent tells the cluster about its node. One component applies
//! the node's entry into every NodeMaintenance that selects it (server-side
//! apply under `maintd/<node>`, so agents never overwrite each other),
//! coalesced to at most one write a second per object with the last state
//! always written, every call bounded by a timeout.

pub mod events;
mod medik8s;

use std::collections::BTreeMap;
use std::time::Duration;

use http::Request;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api::status::{
    SUMMARY_MANAGER, VALIDATION_MANAGER, entry_apply_body, summary_update, validation_update,
};
use crate::api::{self, NodeStatus, PendingPod, Phase as ApiPhase, Stage};
use crate::drain::progress::{DrainStatus, Phase, Progress};
use crate::index::Index;
use crate::trigger::maintenance::MaintenanceTrigger;

/// Writes NodeMaintenance status for one node.
pub struct StatusReporter {
    pub client: kube::Client,
    pub node: String,
    pub progress: Progress,
    pub maintenance: MaintenanceTrigger,
    /// medik8s' NodeMaintenance objects, with `--medik8s`.
    pub medik8s: Option<MaintenanceTrigger>,
    pub node_index: Index,
    /// Counts the writes (`maintd_status_writes_total`).
    pub writes: prometheus_client::metrics::counter::Counter,
}

const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// When the reporter may write again: at once after a success, after a
/// growing delay (1 s doubling up to 60 s, with jitter) after failures.
struct RetryPace {
    backoff: crate::index::Backoff,
    not_before: Option<tokio::time::Instant>,
}

impl Default for RetryPace {
    fn default() -> Self {
        RetryPace {
            backoff: crate::index::Backoff::with(1_000, 60_000),
            not_before: None,
        }
    }
}

impl RetryPace {
    fn ready(&self, now: tokio::time::Instant) -> bool {
        self.not_before.is_none_or(|t| now >= t)
    }

    fn record(&mut self, ok: bool, now: tokio::time::Instant) {
        if ok {
            self.backoff.reset();
            self.not_before = None;
        } else {
            self.not_before = Some(now + self.backoff.next_delay());
        }
    }
}

/// This node's entry from the drain's status and the object's stage.
pub fn entry(node: &str, stage: &Stage, st: &DrainStatus) -> NodeStatus {
    let phase = match (stage, st.phase) {
        (Stage::Complete, _) => ApiPhase::Completed,
        (_, Phase::Idle) => ApiPhase::Pending,
        (_, Phase::Cordoned) => ApiPhase::Cordoned,
        (_, Phase::Draining) => ApiPhase::Draining,
        (_, Phase::Blocked) => ApiPhase::Blocked,
        (_, Phase::Drained) => ApiPhase::Drained,
        (_, Phase::Failed) => ApiPhase::Failed,
    };
    let total = i32::try_from(st.pods_total).unwrap_or(i32::MAX);
    let remaining = i32::try_from(st.pods_remaining).unwrap_or(i32::MAX);
    let progress = if total == 0 {
        if phase == ApiPhase::Drained { 100 } else { 0 }
    } else {
        (total - remaining) * 100 / total
    };
    let time = |t: &Option<String>| {
        t.as_deref()
            .and_then(|s| s.parse().ok())
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
    };
    NodeStatus {
        node_name: node.to_string(),
        phase,
        stage: Some(stage.clone()),
        pods_total: total,
        pods_remaining: remaining,
        drain_progress: progress.clamp(0, 100),
        pending_pods: st
            .blockers
            .iter()
            .filter(|b| !b.pod.is_empty())
            .map(|b| PendingPod {
                namespace: b.namespace.clone(),
                name: b.pod.clone(),
                reason: "eviction refused".into(),
                blocker: Some(b.reason.clone()),
            })
            .collect(),
        last_error: st.last_error.clone(),
        started_at: time(&st.started_at),
        updated_at: time(&st.updated_at),
    }
}

impl StatusReporter {
    /// Runs until `stop`: wakes on drain progress and on the objects
    /// changing, writes at most once a second; after a failed write, waits
    /// longer each time (up to a minute) so a refused write (RBAC, a
    /// missing CRD) from thousands of agents does not flood the API.
    pub async fn run(self, stop: CancellationToken) {
        let mut events = self.progress.subscribe();
        let mut objects = self.maintenance.index.changes();
        let mut medik8s_objects = self.medik8s.as_ref().map(|m| m.index.changes());
        let mut written: BTreeMap<String, Value> = BTreeMap::new();
        let mut written_medik8s = BTreeMap::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut dirty = true;
        let mut pace = RetryPace::default();
        let mut condition: Option<(String, String, String)> = None;
        loop {
            tokio::select! {
                _ = events.recv() => dirty = true,
                r = objects.changed() => { if r.is_err() { return } dirty = true }
                _ = async {
                    match medik8s_objects.as_mut() {
                        Some(rx) => rx.changed().await,
                        None => std::future::pending().await,
                    }
                } => dirty = true,
                _ = tick.tick() => {
                    let now = tokio::time::Instant::now();
                    if dirty && pace.ready(now) {
                        let objects_ok = self.write_all(&mut written).await;
                        let medik8s = self.write_medik8s(&mut written_medik8s, now).await;
                        let node_ok = self.write_condition(&mut condition).await;
                        let ok = objects_ok && medik8s.ok && node_ok;
                        // Progress held back for its turn keeps the round
                        // open without counting as a failure.
                        dirty = !ok || medik8s.deferred;
                        pace.record(ok, now);
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Applies this node's entry to every object selecting it, skipping an
    /// entry identical to the last one written. Returns false if a write
    /// failed (it is retried on the next tick).
    async fn write_all(&self, written: &mut BTreeMap<String, Value>) -> bool {
        let Some(node) = self.node_index.by_name(&self.node) else {
            return true;
        };
        let eval = self.maintenance.evaluate(&node);
        let st = self.progress.status();
        let mut ok = true;
        // Keyed by uid: an object deleted and created again under the same
        // name gets its entry written afresh.
        let key_of = |nm: &api::NodeMaintenance| {
            let meta = &nm.metadata;
            meta.uid
                .clone()
                .or_else(|| meta.name.clone())
                .unwrap_or_default()
        };
        written.retain(|uid, _| eval.valid.iter().any(|nm| key_of(nm) == *uid));
        for nm in eval.valid.iter().filter(|nm| api::selects(nm, &node)) {
            let name = nm.metadata.name.clone().unwrap_or_default();
            let uid = key_of(nm);
            let mut e = entry(&self.node, &nm.spec.stage, &st);
            // The entry's times change on every update; compare without them.
            let key = serde_json::to_value(NodeStatus {
                updated_at: None,
                ..e.clone()
            })
            .unwrap_or_default();
            // The counts are judged on the object as last seen, whether or
            // not this entry changed.
            if let Some(body) = summary_update(nm, &self.node) {
                ok &= self
                    .apply(api::NODEMAINTENANCES_PATH, &name, SUMMARY_MANAGER, body)
                    .await;
            }
            if written.get(&uid) == Some(&key) {
                continue;
            }
            if e.updated_at.is_none() {
                e.updated_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::now(),
                ));
            }
            let body = entry_apply_body(&name, &e);
            if self
                .apply(api::NODEMAINTENANCES_PATH, &name, &self.manager(), body)
                .await
            {
                written.insert(uid, key);
            } else {
                ok = false;
            }
        }
        // An invalid object that selects nobody in particular still gets a
        // condition saying what is wrong (the same from every agent).
        let now = crate::drain::progress::now_time();
        for bad in &eval.invalid {
            if let Some(body) = validation_update(&bad.object, &Err(bad.problems.clone()), &now) {
                ok &= self
                    .apply(
                        api::NODEMAINTENANCES_PATH,
                        &bad.name,
                        VALIDATION_MANAGER,
                        body,
                    )
                    .await;
            }
        }
        ok
    }

    /// maintd's condition on the Node (type `MaintdDrain`): True while the
    /// node is draining or drained, with the progress and the first blocker.
    /// Written only when it changes.
    async fn write_condition(&self, last: &mut Option<(String, String, String)>) -> bool {
        let st = self.progress.status();
        let (status, reason) = match st.phase {
            Phase::Idle => ("False", "Idle"),
            Phase::Cordoned => ("False", "Cordoned"),
            Phase::Draining => ("True", "Draining"),
            Phase::Blocked => ("True", "Blocked"),
            Phase::Drained => ("True", "Drained"),
            Phase::Failed => ("False", "Failed"),
        };
        let gone = st.pods_total.saturating_sub(st.pods_remaining);
        let mut message = if st.triggers.is_empty() {
            "no maintenance".to_string()
        } else {
            format!(
                "{gone}/{} pods drained for {}",
                st.pods_total,
                st.triggers.join(", ")
            )
        };
        if let Some(b) = st.blockers.first() {
            message.push_str(&format!(
                "; waiting on {}/{}: {}",
                b.namespace, b.pod, b.reason
            ));
        }
        let now = (status.to_string(), reason.to_string(), message.clone());
        if last.as_ref() == Some(&now) {
            return true;
        }
        let time = crate::drain::progress::now_time();
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node},
            "status": {"conditions": [{
                "type": "MaintdDrain", "status": status, "reason": reason, "message": message,
                "lastTransitionTime": time, "lastHeartbeatTime": time,
            }]},
        });
        let ok = self
            .apply("/api/v1/nodes", &self.node, &self.manager(), body)
            .await;
        if ok {
            *last = Some(now);
        }
        ok
    }

    /// This agent's own field manager, `maintd/<node>`.
    fn manager(&self) -> String {
        format!("maintd/{}", self.node)
    }

    /// Applies `body` to the status of `name` in `collection` as `manager`.
    async fn apply(&self, collection: &str, name: &str, manager: &str, body: Value) -> bool {
        let path = format!("{collection}/{name}/status?fieldManager={manager}&force=true");
        self.patch_apply(path, &body).await
    }

    /// One server-side apply, bounded by a timeout; failures are logged and
    /// retried by the caller's next tick.
    async fn patch_apply(&self, path: String, body: &Value) -> bool {
        let name = path.clone();
        let req = match Request::patch(path)
            .header("content-type", "application/apply-patch+yaml")
            .body(serde_json::to_vec(body).unwrap_or_default())
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%name, error = %e, "building the status write");
                return false;
            }
        };
        match tokio::time::timeout(WRITE_TIMEOUT, self.client.request::<Value>(req)).await {
            Ok(Ok(_)) => {
                self.writes.inc();
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(%name, error = %e, "writing status; will retry");
                false
            }
            Err(_) => {
                tracing::warn!(%name, "writing status timed out; will retry");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn failed_writes_are_retried_ever_more_slowly_and_a_success_resets() {
        let mut pace = RetryPace::default();
        let t0 = Instant::now();
        assert!(pace.ready(t0));
        // Consecutive failures: each wait is about twice the last (±25 %
        // jitter), up to a minute.
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..10 {
            pace.record(false, now);
            let until = pace.not_before.unwrap();
            assert!(!pace.ready(now));
            assert!(pace.ready(until));
            waits.push(until - now);
            now = until;
        }
        let secs: Vec<f64> = waits.iter().map(|w| w.as_secs_f64()).collect();
        assert!((0.75..=1.25).contains(&secs[0]), "{secs:?}");
        assert!((1.5..=2.5).contains(&secs[1]), "{secs:?}");
        assert!(secs.iter().all(|s| *s <= 75.0), "{secs:?}");
        assert!(secs[9] >= 45.0, "capped near a minute: {secs:?}");
        pace.record(true, now);
        assert!(pace.ready(now));
        pace.record(false, now);
        assert!((pace.not_before.unwrap() - now).as_secs_f64() <= 1.25);
    }
}
