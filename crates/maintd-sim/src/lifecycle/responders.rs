//! The responders the simulator plays when the controller makes them
//! Active, following the KEP's responder protocol: they write only their
//! own entry of the Eviction's `.status.responders` (heartbeat, expected
//! completion, completion, message).
//!
//! - `imperative-eviction.k8s.io/evictor`: the Eviction API, so budgets
//!   hold; a refusal is counted in its message and retried with backoff,
//!   and at once when a budget in the namespace changes.
//! - `live-migration.kubevirt.io/migrator`: a KubeVirt-like live migration
//!   that takes `sim.maintd.io/live-migration-seconds` (or the configured
//!   default), then deletes the migration source pod and completes.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::controller::write;
use super::{IMPERATIVE_EVICTOR, LIVE_MIGRATION, LIVE_MIGRATION_ANNOTATION, evictions, status};
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::{self, DeleteOptions, Part};

/// The evictor's first retry after a refusal; it doubles from there.
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// The KEP's cap on the evictor's backoff.
const LAST_RETRY: Duration = Duration::from_secs(15 * 60);
/// The longest live migration a pod can ask for.
const LONGEST_MIGRATION_SECS: f64 = 600.0;

/// (namespace, Eviction name)
type Key = (String, String);

/// What the responders remember between passes.
#[derive(Default)]
pub struct Memory {
    /// The evictor's refusals so far and when it tries again.
    backoff: HashMap<Key, (u32, Instant)>,
    /// When each live migration started.
    migrations: HashMap<Key, Instant>,
}

impl Memory {
    /// Lets every evictor of `ns` try again at once.
    pub fn retry_now(&mut self, ns: &str) {
        let now = Instant::now();
        for ((n, _), (_, due)) in self.backoff.iter_mut() {
            if n == ns {
                *due = now;
            }
        }
    }

    /// Drops what is remembered of a finished or deleted Eviction.
    pub fn forget(&mut self, ns: &str, name: &str) {
        let key = (ns.to_string(), name.to_string());
        self.backoff.remove(&key);
        self.migrations.remove(&key);
    }
}

/// Lets the active responder of `ev`, if the simulator plays it, do its
/// part for `pod`; returns when it wants to act again.
pub fn act(sim: &SimState, ev: &Value, pod: &Value, mem: &mut Memory) -> Option<Instant> {
    let i = status::position(&ev["status"], "Active")?;
    let key = (meta::namespace(ev).to_string(), meta::name(ev).to_string());
    match ev["status"]["targetResponders"][i]["name"].as_str() {
        Some(IMPERATIVE_EVICTOR) => evict(sim, ev, i, pod, key, mem),
        Some(LIVE_MIGRATION) => migrate(sim, ev, i, pod, key, mem),
        _ => None,
    }
}

fn evict(
    sim: &SimState,
    ev: &Value,
    i: usize,
    pod: &Value,
    key: Key,
    mem: &mut Memory,
) -> Option<Instant> {
    // No attempt is made to evict a pod that is already terminating.
    if meta::is_terminating(pod) {
        return None;
    }
    let daemon = matches!(meta::controller_of(pod), Some(("DaemonSet", _, _)));
    if daemon || meta::annotation(pod, crate::kubelet::MIRROR_ANNOTATION).is_some() {
        report(
            sim,
            ev,
            i,
            json!({
                "message": "API-initiated eviction of DaemonSet pods and mirror pods is not supported.",
                "completionTime": meta::now_time(),
            }),
        );
        return None;
    }
    let now = Instant::now();
    if let Some((_, due)) = mem.backoff.get(&key)
        && *due > now
    {
        return Some(*due);
    }
    let body = json!({
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": meta::name(pod), "namespace": meta::namespace(pod)},
        "deleteOptions": {"preconditions": {"uid": meta::uid(pod)}},
    });
    match crate::eviction::evict(sim, meta::namespace(pod), meta::name(pod), &body) {
        Ok(()) => {
            mem.backoff.remove(&key);
            report(
                sim,
                ev,
                i,
                json!({"message": "The pod was evicted through the Eviction API."}),
            );
            None
        }
        Err(e) => {
            let retries = mem
                .backoff
                .get(&key)
                .map_or(0, |(n, _)| *n)
                .saturating_add(1);
            let wait = FIRST_RETRY
                .checked_mul(1 << retries.saturating_sub(1).min(16))
                .unwrap_or(LAST_RETRY)
                .min(LAST_RETRY);
            mem.backoff.insert(key, (retries, now + wait));
            report(
                sim,
                ev,
                i,
                json!({"message": format!(
                    "Could not evict a pod due to failing eviction requests, number of retries: {retries} (last answer: {} {})",
                    e.code, e.message
                )}),
            );
            Some(now + wait)
        }
    }
}

fn migrate(
    sim: &SimState,
    ev: &Value,
    i: usize,
    pod: &Value,
    key: Key,
    mem: &mut Memory,
) -> Option<Instant> {
    let secs = meta::seconds_annotation(pod, LIVE_MIGRATION_ANNOTATION)
        .map(|s| s.min(LONGEST_MIGRATION_SECS))
        .map_or(sim.config.live_migration, Duration::from_secs_f64);
    let started = match mem.migrations.get(&key) {
        Some(t) => *t,
        None => {
            let ends = meta::time_after(secs.as_secs_f64().ceil() as i64);
            report(
                sim,
                ev,
                i,
                json!({
                    "message": format!("Live migration of pod {} to another node in progress.", meta::name(pod)),
                    "expectedCompletionTime": ends,
                }),
            );
            let now = Instant::now();
            mem.migrations.insert(key, now);
            now
        }
    };
    let done = started + secs;
    if Instant::now() < done {
        return Some(done);
    }
    // The virtual machine runs on its new node: the source pod goes.
    let pods = sim.store().resource(&Gr::pods());
    if let Some(def) = pods {
        let opts = DeleteOptions {
            uid: Some(meta::uid(pod).to_string()),
            ..DeleteOptions::default()
        };
        let _ = verbs::delete(sim, &def, meta::namespace(pod), meta::name(pod), &opts);
    }
    report(
        sim,
        ev,
        i,
        json!({
            "message": "Live migration finished; the migration source pod was deleted.",
            "completionTime": meta::now_time(),
        }),
    );
    None
}

/// Writes `fields` and a heartbeat into the responder's own entry.
fn report(sim: &SimState, ev: &Value, i: usize, fields: Value) {
    let _ = write(sim, &evictions(), ev, Part::Status, |o| {
        let entry = o["status"]["responders"]
            .get_mut(i)
            .and_then(Value::as_object_mut);
        if let (Some(e), Some(f)) = (entry, fields.as_object()) {
            e.insert("heartbeatTime".into(), json!(meta::now_time()));
            for (k, v) in f {
                e.insert(k.clone(), v.clone());
            }
        }
    });
}
