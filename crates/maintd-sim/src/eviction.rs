//! The `pods/eviction` subresource as the API server decides it: from the
//! PodDisruptionBudget's *status* (which the disruption controller keeps,
//! with a lag), through a conflict-checked check-and-decrement of
//! `status.disruptionsAllowed` that records the pod in
//! `status.disruptedPods`. 429 with a `DisruptionBudget` cause when the
//! budget allows no disruption or its status is behind its spec; 500 when
//! several budgets match.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::meta;
use super::resources::{Gr, ResourceDef};
use super::select::selector_object_matches;
use super::state::SimState;
use super::store::Store;
use super::typecheck;
use super::verbs::{self, DeleteOptions, Part, Writer};

/// How often an eviction that lost a race for its budget's status reads it
/// again (upstream's EvictionsRetry: 20 steps).
const CONFLICT_RETRIES: usize = 20;

/// How long an eviction that lost the race for its budget's status waits
/// before it reads it again: upstream's EvictionsRetry, 500 ms plus up to
/// a tenth more (jitter 0.1).
pub const CONFLICT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(500);

/// How long a pod recorded in `status.disruptedPods` counts as going if it
/// is not seen deleted (upstream's DeletionTimeout).
pub const DISRUPTED_POD_TIMEOUT_SECS: i64 = 120;

/// Upstream refuses evictions once this many are unconfirmed.
const MAX_DISRUPTED_PODS: usize = 2000;

const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// What a PodDisruptionBudget allows right now, as its status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetStatus {
    pub expected_pods: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub disruptions_allowed: i64,
}

/// What an eviction must do about the budget covering its pod.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// The budget does not guard this pod (none, not running, unhealthy
    /// and let go): delete without touching the budget.
    Delete,
    /// Take one disruption from the budget first.
    Decrement,
}

/// Who last wrote a budget's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusWriter {
    Eviction,
    Controller,
}

/// Writes budget `pdb`'s status as `new` (conditional on the version it
/// was read at), and notes who wrote that version, so that an eviction
/// that loses its race to it can be told apart (see [`wait_turn`]).
pub(crate) fn write_status(
    sim: &SimState,
    def: &ResourceDef,
    pdb: &Value,
    new: Value,
    writer: &Writer,
    by: StatusWriter,
) -> Result<std::sync::Arc<Value>, ApiError> {
    let written = verbs::update(
        sim,
        def,
        meta::namespace(pdb),
        meta::name(pdb),
        Part::Status,
        new,
        writer,
    )?;
    sim.status_writes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            meta::uid(pdb).to_string(),
            (meta::rv(&written).to_string(), by),
        );
    Ok(written)
}

/// Waits as an API server makes an eviction wait that raced another write
/// of its budget's status. Upstream, each eviction reads the budget, then
/// writes its status with the disruption taken (a write conditional on
/// what it read); if anything wrote the status in between (another
/// eviction, or the disruption controller, which writes as the budget's
/// pods change), it gets a conflict and reads again 500 ms later
/// (pkg/registry/core/pod/storage/eviction.go, EvictionsRetry). Measured
/// on Kubernetes 1.37: five evictions sent together under a budget
/// allowing five were granted 0.16 s, 0.67 s, 0.68 s, 0.74 s and 0.76 s
/// after they were sent; in a drain of the realistic scenario, 8 of 106
/// evictions sent one at a time took 400 ms or more, most of them sent as
/// replacements turned Ready and the controller wrote the status again.
/// Here an eviction reads its budget's resourceVersion once its read is
/// served (see [`fresh_cache`]) and compares it the config's
/// `eviction_window` later, where it would write: any write of the budget in between (another eviction's, the
/// disruption controller's, anyone's edit of it) lost it the race, and it
/// waits the backoff before it reads again. Requests that arrive together
/// are let in first (a yield), as the API server's handlers run side by
/// side.
pub async fn wait_turn(sim: &SimState, ns: &str, name: &str) {
    fresh_cache(sim, ns, name).await;
    let read = tokio::time::Instant::now();
    /// Counts the eviction out when it is done, or dropped (its client
    /// went away).
    struct InWindow<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for InWindow<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    sim.evictions_in_window
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _in = InWindow(&sim.evictions_in_window);
    race(sim, ns, name, read).await;
}

/// Waits as Kubernetes makes an eviction of a running pod wait before it
/// reads the namespace's budgets: the read is a consistent list served
/// from the API server's watch cache once the cache has caught up with
/// etcd, which it knows at its next progress answer (asked for every
/// `cache_progress` while a read waits, on one clock for every reader, so
/// that evictions sent together are served together), or sooner when a
/// budget's write reaches it.
async fn fresh_cache(sim: &SimState, ns: &str, name: &str) {
    let period = sim.config.cache_progress;
    if period.is_zero() {
        return;
    }
    let (mut writes, lists) = {
        let mut store = sim.store();
        let lists = store
            .get(&Gr::pods(), ns, name)
            .is_some_and(|pod| pod["status"]["phase"] == "Running" && !meta::is_terminating(&pod));
        (
            store.subscribe_route(crate::store::Route::Resource(Gr::pdbs())),
            lists,
        )
    };
    if !lists {
        return;
    }
    let started = tokio::time::Instant::from_std(sim.started);
    let now = tokio::time::Instant::now();
    let since = now.saturating_duration_since(started).as_nanos();
    let step = period.as_nanos().max(1);
    let wait = u64::try_from(step - since % step).unwrap_or(0);
    let answer = tokio::time::sleep(std::time::Duration::from_nanos(wait));
    tokio::pin!(answer);
    loop {
        tokio::select! {
            () = &mut answer => return,
            ev = writes.recv() => match ev {
                Ok(ev) if ev.gr == Gr::pdbs() => return,
                Ok(_) => {}
                Err(_) => return,
            },
        }
    }
}

/// The uid and resourceVersion of the budget guarding pod `ns/name`, if
/// one does.
fn budget_version(sim: &SimState, ns: &str, name: &str) -> Option<(String, String)> {
    let store = sim.store();
    let pod = store.get(&Gr::pods(), ns, name)?;
    let pdb = budget_of(&store, &pod).ok()??;
    Some((meta::uid(&pdb).to_string(), meta::rv(&pdb).to_string()))
}

async fn race(sim: &SimState, ns: &str, name: &str, mut read: tokio::time::Instant) {
    let mut seen = budget_version(sim, ns, name);
    tokio::task::yield_now().await;
    for _ in 0..CONFLICT_RETRIES {
        tokio::time::sleep_until(read + sim.config.eviction_window).await;
        let now = budget_version(sim, ns, name);
        match (&seen, &now) {
            (Some((uid, was)), Some((still, rv))) if uid == still && was != rv => {
                let last = sim
                    .status_writes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(uid)
                    .cloned();
                let races = match last {
                    Some((written, StatusWriter::Eviction)) if written == *rv => {
                        &sim.eviction_races
                    }
                    Some((written, StatusWriter::Controller)) if written == *rv => {
                        &sim.controller_races
                    }
                    _ => &sim.other_races,
                };
                races.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let jitter = rand::random_range(0.0..0.1);
                tokio::time::sleep(CONFLICT_BACKOFF.mul_f64(1.0 + jitter)).await;
                read = tokio::time::Instant::now();
                seen = budget_version(sim, ns, name);
            }
            _ => return,
        }
    }
}

/// Evicts a pod if its disruption budget allows it.
pub fn evict(sim: &SimState, ns: &str, name: &str, body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the Eviction must be a JSON object"));
    }
    typecheck::on_eviction(body)?;
    if let Some(n) = body["metadata"]["name"].as_str()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {name} != {n}"
        )));
    }
    let opts = DeleteOptions::from_json(&body["deleteOptions"])?;
    let writer = Writer {
        manager: "kube-apiserver".into(),
        force: false,
        user: None,
    };
    let mut attempt = 0;
    loop {
        let (pdb, decision) = {
            let store = sim.store();
            let pod = store
                .get(&Gr::pods(), ns, name)
                .ok_or_else(|| ApiError::not_found(&Gr::pods(), name))?;
            // The eviction checks its uid precondition itself, in words
            // of its own (pkg/registry/core/pod/storage/eviction.go), not
            // the delete's.
            if let Some(uid) = &opts.uid
                && uid != meta::uid(&pod)
            {
                let gr = Gr {
                    group: String::new(),
                    plural: "Pod".into(),
                };
                return Err(ApiError::conflict(
                    &gr,
                    name,
                    &format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                        meta::uid(&pod)
                    ),
                ));
            }
            match budget_of(&store, &pod)? {
                None => break,
                Some(pdb) => {
                    let d = decide(&pod, &pdb)?;
                    (pdb, d)
                }
            }
        };
        if decision == Decision::Delete {
            break;
        }
        let def = sim
            .store()
            .resource(&Gr::pdbs())
            .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not served"))?;
        let updated = decremented(&pdb, name, &meta::now_time());
        // Conflict-checked on the status read above: of two evictions that
        // read the same status, one wins and the other reads again.
        match write_status(sim, &def, &pdb, updated, &writer, StatusWriter::Eviction) {
            Ok(_) => break,
            Err(e) if e.code == 409 && attempt < CONFLICT_RETRIES => attempt += 1,
            Err(e) if e.code == 409 => {
                return Err(ApiError::timeout(format!(
                    "couldn't update PodDisruptionBudget {:?} due to conflicts",
                    meta::name(&pdb)
                )));
            }
            Err(e) => return Err(e),
        }
    }
    let def = sim
        .store()
        .resource(&Gr::pods())
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let verdict = sim.invariants.judge_eviction(&sim.store(), ns, name);
    verbs::delete(sim, &def, ns, name, &opts)?;
    sim.invariants.eviction_granted(verdict);
    Ok(())
}

/// The one budget guarding `pod`, if any: pods that are not running, or
/// are already going, are not guarded; several budgets are an error.
fn budget_of(store: &Store, pod: &Value) -> Result<Option<Value>, ApiError> {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    if matches!(phase, "Succeeded" | "Failed" | "Pending") || meta::is_terminating(pod) {
        return Ok(None);
    }
    let mut pdbs: Vec<_> = store
        .list(&Gr::pdbs(), Some(meta::namespace(pod)))
        .into_iter()
        .filter(|p| selector_object_matches(&p["spec"]["selector"], pod))
        .collect();
    match pdbs.len() {
        0 => Ok(None),
        1 => Ok(pdbs.pop().map(|p| (*p).clone())),
        _ => Err(ApiError::internal(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        )),
    }
}

/// The API server's rules, from the budget's status only.
fn decide(pod: &Value, pdb: &Value) -> Result<Decision, ApiError> {
    let st = &pdb["status"];
    let num = |k: &str| st[k].as_i64().unwrap_or(0);
    if !meta::pod_ready(pod) {
        // An unready pod does not count as healthy: letting it go costs the
        // budget nothing, if the policy says so or the budget is healthy.
        if pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow" {
            return Ok(Decision::Delete);
        }
        if num("currentHealthy") >= num("desiredHealthy") && num("desiredHealthy") > 0 {
            return Ok(Decision::Delete);
        }
    }
    let generation = pdb["metadata"]["generation"].as_i64().unwrap_or(1);
    if num("observedGeneration") < generation {
        return Err(ApiError::too_many_requests(REFUSED).with_cause(
            "DisruptionBudget",
            &format!(
                "The disruption budget {} is still being processed by the server.",
                meta::name(pdb)
            ),
            "",
        ));
    }
    if num("disruptionsAllowed") < 0 {
        return Err(ApiError::forbidden_message(
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted = st["disruptedPods"].as_object().map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(ApiError::forbidden_message(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if num("disruptionsAllowed") == 0 {
        return Err(ApiError::too_many_requests(REFUSED).with_cause(
            "DisruptionBudget",
            &format!(
                "The disruption budget {} needs {} healthy pods and has {} currently",
                meta::name(pdb),
                num("desiredHealthy"),
                num("currentHealthy")
            ),
            "",
        ));
    }
    Ok(Decision::Decrement)
}

/// The budget with one disruption taken for `pod` at `now`.
fn decremented(pdb: &Value, pod: &str, now: &str) -> Value {
    let mut new = pdb.clone();
    let allowed = new["status"]["disruptionsAllowed"].as_i64().unwrap_or(0) - 1;
    new["status"]["disruptionsAllowed"] = json!(allowed);
    if !new["status"]["disruptedPods"].is_object() {
        new["status"]["disruptedPods"] = json!({});
    }
    new["status"]["disruptedPods"][pod] = json!(now);
    if allowed == 0
        && let Some(conds) = new["status"]["conditions"].as_array_mut()
    {
        for c in conds
            .iter_mut()
            .filter(|c| c["type"] == "DisruptionAllowed")
        {
            c["status"] = json!("False");
            c["reason"] = json!("InsufficientPods");
            c["lastTransitionTime"] = json!(now);
        }
    }
    new
}

/// The disruption controller's arithmetic for one budget, from the live
/// pods and the pods evictions recorded in `status.disruptedPods`: those
/// count as gone until they are seen deleted, or for
/// [`DISRUPTED_POD_TIMEOUT_SECS`] at most. An error when the budget's
/// expected count cannot be known (a pod's controller has no scale): the
/// controller then fails safe.
pub fn budget_status(store: &Store, pdb: &Value) -> Result<(BudgetStatus, Value), String> {
    let ns = meta::namespace(pdb);
    let pods: Vec<_> = store
        .list(&Gr::pods(), Some(ns))
        .into_iter()
        .filter(|p| selector_object_matches(&pdb["spec"]["selector"], p))
        .collect();
    let mut disrupted = serde_json::Map::new();
    if let Some(recorded) = pdb["status"]["disruptedPods"].as_object() {
        for (name, at) in recorded {
            let live = pods
                .iter()
                .any(|p| meta::name(p) == name && !meta::is_terminating(p));
            let fresh = at
                .as_str()
                .and_then(meta::age_secs)
                .is_some_and(|age| age < DISRUPTED_POD_TIMEOUT_SECS);
            if live && fresh {
                disrupted.insert(name.clone(), at.clone());
            }
        }
    }
    let healthy = pods
        .iter()
        .filter(|p| {
            !meta::is_terminating(p) && meta::pod_ready(p) && !disrupted.contains_key(meta::name(p))
        })
        .count() as i64;
    let spec = &pdb["spec"];
    let (expected, desired) = if !spec["maxUnavailable"].is_null() {
        let expected = expected_scale(store, &pods)?;
        let max = scaled(&spec["maxUnavailable"], expected);
        (expected, (expected - max).max(0))
    } else if !spec["minAvailable"].is_null() {
        match &spec["minAvailable"] {
            Value::Number(n) => (pods.len() as i64, n.as_i64().unwrap_or(0)),
            v => {
                let expected = expected_scale(store, &pods)?;
                (expected, scaled(v, expected))
            }
        }
    } else {
        (pods.len() as i64, pods.len() as i64)
    };
    let st = BudgetStatus {
        expected_pods: expected,
        current_healthy: healthy,
        desired_healthy: desired,
        disruptions_allowed: (healthy - desired).max(0),
    };
    Ok((st, Value::Object(disrupted)))
}

/// An int-or-percent against a total, rounded up as Kubernetes does for
/// budgets.
fn scaled(v: &Value, total: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
        {
            Some(pct) => (pct * total + 99) / 100,
            None => s.trim().parse().unwrap_or(0),
        },
        _ => 0,
    }
}

mod scale;
use scale::expected_scale;

#[cfg(test)]
mod tests;
