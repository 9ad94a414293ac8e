//! The eviction request controller, as the API's type comments describe
//! the evictionrequest-controller (Kubernetes 1.37.2 ships none; it runs
//! only when `SimConfig::eviction_request_controller` says so): it
//! validates EvictionRequests, makes one
//! Eviction per target pod from the active ones, hands the eviction from
//! responder to responder, cancels it when every requester has withdrawn,
//! records the target's eviction, copies the outcome into every
//! EvictionRequest, and collects Evictions whose requests are all gone.
//! It reacts to the store's changes per namespace, as the other simulated
//! controllers do, and wakes for the responders' timers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::responders::{self, Memory};
use super::status::{self, FAILED, Requester, Target};
use super::{GROUP, VERSION, domain_prefixed_path, eviction_requests, evictions};
use crate::meta;
use crate::resources::{Gr, ResourceDef};
use crate::state::SimState;
use crate::verbs::{self, DeleteOptions, Part, Writer};

const MANAGER: &str = "evictionrequest-controller";

/// How often an unfinished eviction is looked at without a change (to
/// notice a responder that went silent).
const RESYNC: Duration = Duration::from_secs(30);

/// Starts the controller; it runs until `stop`.
pub fn start(sim: Arc<SimState>, stop: CancellationToken) {
    let mut rx = sim.store().subscribe();
    tokio::spawn(async move {
        let mut mem = Memory::default();
        let mut dirty: BTreeSet<String> = namespaces(&sim);
        let mut due: BTreeMap<String, Instant> = BTreeMap::new();
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(ev) => {
                        let ns = meta::namespace(&ev.object).to_string();
                        if ev.gr == Gr::pdbs() {
                            // A budget that changed may allow what it refused.
                            mem.retry_now(&ns);
                        }
                        if [eviction_requests(), evictions(), Gr::pods(), Gr::pdbs()].contains(&ev.gr) {
                            dirty.insert(ns);
                        }
                    }
                    Err(RecvError::Lagged(_)) => dirty.extend(namespaces(&sim)),
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick() => {
                    let now = Instant::now();
                    let ready: Vec<String> = due.iter().filter(|(_, t)| **t <= now).map(|(ns, _)| ns.clone()).collect();
                    for ns in ready {
                        due.remove(&ns);
                        dirty.insert(ns);
                    }
                    for ns in std::mem::take(&mut dirty) {
                        if let Some(at) = reconcile(&sim, &ns, &mut mem) {
                            due.insert(ns, at);
                        }
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    });
}

fn namespaces(sim: &SimState) -> BTreeSet<String> {
    let store = sim.store();
    store
        .list(&Gr::namespaces(), None)
        .iter()
        .map(|n| meta::name(n).to_string())
        .collect()
}

/// (pod name, pod uid) an EvictionRequest or Eviction is about.
type TargetKey = (String, String);

fn target_of(obj: &Value) -> TargetKey {
    let pod = &obj["spec"]["target"]["pod"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    (s(&pod["name"]), s(&pod["uid"]))
}

/// The `n` of an Eviction named `pod-<n>-<pod name>`.
fn counter(eviction: &Value) -> u64 {
    meta::name(eviction)
        .strip_prefix("pod-")
        .and_then(|r| r.split('-').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Reconciles every target of one namespace; returns when to look again.
fn reconcile(sim: &SimState, ns: &str, mem: &mut Memory) -> Option<Instant> {
    let (requests, existing) = {
        let store = sim.store();
        (
            store.list(&eviction_requests(), Some(ns)),
            store.list(&evictions(), Some(ns)),
        )
    };
    let targets: BTreeSet<TargetKey> = requests
        .iter()
        .chain(existing.iter())
        .map(|o| target_of(o))
        .collect();
    let mut wake: Option<Instant> = None;
    for key in targets {
        let reqs: Vec<&Arc<Value>> = requests.iter().filter(|r| target_of(r) == key).collect();
        let mut evs: Vec<&Arc<Value>> = existing.iter().filter(|e| target_of(e) == key).collect();
        evs.sort_by_key(|e| counter(e));
        if reqs.is_empty() {
            // Every request is gone: the Eviction is garbage.
            for e in evs {
                mem.forget(ns, meta::name(e));
                delete(sim, &evictions(), ns, meta::name(e));
            }
            continue;
        }
        if let Some(at) = reconcile_target(sim, ns, &key, &reqs, evs.last().copied(), mem) {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
    }
    wake
}

fn reconcile_target(
    sim: &SimState,
    ns: &str,
    key: &TargetKey,
    reqs: &[&Arc<Value>],
    latest: Option<&Arc<Value>>,
    mem: &mut Memory,
) -> Option<Instant> {
    let now = meta::now_time();
    let pod = sim
        .store()
        .get(&Gr::pods(), ns, &key.0)
        .filter(|p| meta::uid(p) == key.1);
    let target = match &pod {
        None => Target::Gone,
        Some(p) if matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) => {
            Target::Terminal
        }
        Some(_) => Target::Running,
    };
    let requesters = requesters(reqs);
    let wants = requesters.iter().any(|(_, i)| i == "Eviction");
    // A cancelled eviction starts over (a new Eviction) when a requester
    // wants it again; an evicted target or a failed eviction stays so.
    let canceled = latest.is_some_and(|e| {
        status::outcome(&e["status"])
            .iter()
            .any(|(t, s, r, _)| *t == FAILED && *s == "True" && *r == "CanceledDueToNoRequesters")
    });
    let mut wake = None;
    let mut current = latest.cloned();
    let mut refusal: Option<String> = None;
    if (latest.is_none() || canceled) && wants {
        match (&pod, target) {
            (Some(p), Target::Running) if !p["spec"]["schedulingGroup"].is_null() => {
                refusal = Some(format!(
                    "Target Pod {} is part of a Workload/PodGroup. Eviction of such pods is currently not supported.",
                    key.0
                ));
            }
            (Some(p), Target::Running) => {
                let n = latest.map_or(1, |e| counter(e) + 1);
                current = create_eviction(sim, ns, p, n, &requesters, &now).or(current);
            }
            _ => refusal = Some(format!("Target Pod {} was not found.", key.0)),
        }
    }
    let conds = match (&refusal, &current) {
        (Some(why), _) => vec![(FAILED, "True", "EvictionInvalid", why.clone())],
        (None, Some(ev)) => {
            let age = |t: &str| meta::age_secs(t);
            let next = status::advance(&ev["status"], &requesters, target, &now, &age);
            let mut ev = ev.clone();
            if next != ev["status"] {
                ev = write(sim, &evictions(), &ev, Part::Status, |o| {
                    o["status"] = next.clone()
                })?;
            }
            ev = label(sim, &ev)?;
            if status::is_final(&ev["status"]) {
                mem.forget(ns, meta::name(&ev));
            } else if let Some(p) = &pod {
                let at = responders::act(sim, &ev, p, mem);
                let resync = Instant::now() + RESYNC;
                wake = Some(at.map_or(resync, |a| a.min(resync)));
            }
            status::outcome(&ev["status"])
        }
        (None, None) if !wants => vec![(
            FAILED,
            "True",
            "CanceledDueToNoRequesters",
            "No EvictionRequest for this target has the Eviction intent.".to_string(),
        )],
        (None, None) => vec![],
    };
    for r in reqs {
        let generation = r["metadata"]["generation"].as_i64().unwrap_or(1);
        let next = status::request(&r["status"], &conds, generation, &now);
        if next != r["status"] {
            write(sim, &eviction_requests(), r, Part::Status, |o| {
                o["status"] = next.clone()
            });
        }
    }
    wake
}

/// Each requester once, with its intent; a request being deleted counts as
/// withdrawn, and of two requests by one requester, Eviction wins.
fn requesters(reqs: &[&Arc<Value>]) -> Vec<Requester> {
    let mut out: Vec<Requester> = Vec::new();
    for r in reqs {
        let name = r["spec"]["requester"].as_str().unwrap_or("").to_string();
        let intent = if meta::is_terminating(r) {
            "Withdrawn"
        } else {
            r["spec"]["intent"].as_str().unwrap_or("Withdrawn")
        };
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(seen) if intent == "Eviction" => seen.1 = intent.to_string(),
            Some(_) => {}
            None => out.push((name, intent.to_string())),
        }
    }
    out
}

/// Creates `pod-<n>-<pod name>` (the KEP's naming), or the next free
/// counter if that name is taken.
fn create_eviction(
    sim: &SimState,
    ns: &str,
    pod: &Value,
    first: u64,
    requesters: &[Requester],
    now: &str,
) -> Option<Arc<Value>> {
    let def = served(sim, &evictions())?;
    for n in first..first + 8 {
        let mut name = format!("pod-{n}-{}", meta::name(pod));
        name.truncate(253);
        let name = name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        let body = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"target": {"pod": {"name": meta::name(pod), "uid": meta::uid(pod)}}},
            "status": status::initial(pod, requesters, now),
        });
        match verbs::create(sim, &def, Some(ns), body, &writer(), true) {
            Ok(created) => return label(sim, &created),
            Err(e) if e.code == 409 => continue,
            Err(e) => {
                tracing::debug!(%name, error = %e.message, "the eviction request controller could not create an Eviction");
                return None;
            }
        }
    }
    None
}

/// The lookup labels: each requester and responder name as a key, valued
/// `requester`, `responder` or `requester-responder`.
fn label(sim: &SimState, ev: &Arc<Value>) -> Option<Arc<Value>> {
    let names = |list: &str| -> Vec<String> {
        ev["status"][list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .filter(|n| domain_prefixed_path(n).is_ok())
            .collect()
    };
    let (req, resp) = (names("requesters"), names("targetResponders"));
    let mut labels = ev["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (n, role) in status::roles(&req, &resp) {
        labels.insert(n, json!(role));
    }
    if ev["metadata"]["labels"].as_object() == Some(&labels) {
        return Some(ev.clone());
    }
    write(sim, &evictions(), ev, Part::Main, |o| {
        o["metadata"]["labels"] = Value::Object(labels.clone())
    })
}

/// A conflict-checked write of `obj` changed by `edit`; None when it
/// failed (a newer version exists: the next pass works from that one).
pub(super) fn write(
    sim: &SimState,
    gr: &Gr,
    obj: &Value,
    part: Part,
    edit: impl FnOnce(&mut Value),
) -> Option<Arc<Value>> {
    let def = served(sim, gr)?;
    let mut next = obj.clone();
    edit(&mut next);
    let (ns, name) = (meta::namespace(obj), meta::name(obj));
    verbs::update(sim, &def, ns, name, part, next, &writer())
        .inspect_err(|e| tracing::debug!(%name, error = %e.message, "the eviction request controller could not write"))
        .ok()
}

fn delete(sim: &SimState, gr: &Gr, ns: &str, name: &str) {
    if let Some(def) = served(sim, gr) {
        let _ = verbs::delete(sim, &def, ns, name, &DeleteOptions::default());
    }
}

fn served(sim: &SimState, gr: &Gr) -> Option<Arc<ResourceDef>> {
    sim.store().resource(gr)
}

pub(super) fn writer() -> Writer {
    Writer {
        manager: MANAGER.into(),
        force: false,
        user: None,
    }
}
