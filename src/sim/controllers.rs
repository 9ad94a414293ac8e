//! Simulated controllers: a scheduler that binds pending pods, the
//! DaemonSet and ReplicaSet controllers, and the disruption controller
//! that keeps PodDisruptionBudget status current. They react to the store's
//! changes, batch their work every few milliseconds, and write through the
//! API verbs like the real controllers do.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::meta;
use super::resources::Gr;
use super::state::SimState;

mod disruption;
use super::store::{EventType, StoreEvent};
use super::verbs::{self, DeleteOptions, Part, PatchType, Writer, write_status};
use disruption::disruption;

/// Places a ReplicaSet's first pods on this node (scenarios use it to load
/// one node); replacements are scheduled normally.
pub const INITIAL_NODE_ANNOTATION: &str = "sim.maintd.io/initial-node";

/// Tolerations the DaemonSet controller adds to every DaemonSet pod.
fn daemonset_tolerations() -> Vec<Value> {
    let mut t: Vec<Value> = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    .iter()
    .map(|k| json!({"key": k, "operator": "Exists", "effect": "NoExecute"}))
    .collect();
    for k in [
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/unschedulable",
    ] {
        t.push(json!({"key": k, "operator": "Exists", "effect": "NoSchedule"}));
    }
    t
}

/// Kubernetes toleration semantics for one taint.
pub fn tolerates(tolerations: &Value, taint: &Value) -> bool {
    tolerations.as_array().is_some_and(|ts| {
        ts.iter().any(|t| {
            let key = t["key"].as_str().unwrap_or("");
            let effect = t["effect"].as_str().unwrap_or("");
            let op = t["operator"].as_str().unwrap_or("Equal");
            let key_ok =
                key.is_empty() && op == "Exists" || key == taint["key"].as_str().unwrap_or("");
            let effect_ok = effect.is_empty() || effect == taint["effect"].as_str().unwrap_or("");
            let value_ok = op == "Exists"
                || t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or("");
            key_ok && effect_ok && value_ok
        })
    })
}

/// Whether a pod with this spec may be placed on the node by taints and
/// node selector (not readiness or capacity).
pub fn fits(spec: &Value, node: &Value) -> bool {
    let taints_ok = node["spec"]["taints"].as_array().is_none_or(|taints| {
        taints
            .iter()
            .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule" | "NoExecute")))
            .all(|t| tolerates(&spec["tolerations"], t))
    });
    let selector_ok = spec["nodeSelector"]
        .as_object()
        .is_none_or(|sel| sel.iter().all(|(k, v)| node["metadata"]["labels"][k] == *v));
    taints_ok && selector_ok
}

/// The node the scheduler would pick: Ready, schedulable, fitting, with
/// room, and the fewest pods.
pub fn schedule(sim: &SimState, spec: &Value) -> Option<String> {
    let store = sim.store();
    let pods = store.list(&Gr::pods(), None);
    store
        .list(&Gr::nodes(), None)
        .into_iter()
        .filter(|n| meta::node_ready(n) && n["spec"]["unschedulable"] != true && fits(spec, n))
        .filter_map(|n| {
            let name = meta::name(&n).to_string();
            let count = pods
                .iter()
                .filter(|p| {
                    p["spec"]["nodeName"] == name.as_str()
                        && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                })
                .count();
            let cap = n["status"]["allocatable"]["pods"]
                .as_str()
                .and_then(|c| c.parse().ok())
                .unwrap_or(110usize);
            (count < cap).then_some((count, name))
        })
        .min()
        .map(|(_, n)| n)
}

fn writer(name: &str) -> Writer {
    Writer {
        manager: name.into(),
        force: false,
    }
}

#[derive(Default)]
struct Dirty {
    daemonsets: BTreeSet<(String, String)>,
    replicasets: BTreeSet<(String, String)>,
    pdb_namespaces: BTreeSet<String>,
    schedule: bool,
    all: bool,
}

impl Dirty {
    fn note(&mut self, ev: &StoreEvent) {
        let obj = &ev.object;
        let key = (
            meta::namespace(obj).to_string(),
            meta::name(obj).to_string(),
        );
        if ev.gr == Gr::daemonsets() {
            self.daemonsets.insert(key);
        } else if ev.gr == Gr::replicasets() {
            self.replicasets.insert(key);
        } else if ev.gr == Gr::pdbs() {
            self.pdb_namespaces.insert(key.0);
        } else if ev.gr == Gr::nodes() {
            // A node change can make DaemonSet pods due and unblock pending pods.
            self.all = true;
        } else if ev.gr == Gr::pods() {
            self.pdb_namespaces.insert(key.0.clone());
            if obj["spec"]["nodeName"].as_str().unwrap_or("").is_empty()
                && ev.kind != EventType::Deleted
            {
                self.schedule = true;
            }
            if let Some((kind, name, _)) = meta::controller_of(obj) {
                let owner = (key.0, name.to_string());
                match kind {
                    "DaemonSet" => {
                        self.daemonsets.insert(owner);
                    }
                    "ReplicaSet" => {
                        self.replicasets.insert(owner);
                        self.schedule = true;
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Starts the controllers.
pub fn start(sim: Arc<SimState>, stop: CancellationToken) {
    let mut rx = sim.store().subscribe();
    tokio::spawn(async move {
        let mut dirty = Dirty {
            all: true,
            ..Dirty::default()
        };
        let mut placed: HashSet<String> = HashSet::new();
        // Namespaces whose budgets the disruption controller will recompute,
        // and when: it lags the events it reacts to, as on a busy cluster.
        let mut budgets_due: BTreeMap<String, Instant> = BTreeMap::new();
        let lag = sim.config.disruption_lag;
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(ev) => dirty.note(&ev),
                    Err(RecvError::Lagged(_)) => dirty.all = true,
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick() => {
                    let work = std::mem::take(&mut dirty);
                    let now = Instant::now();
                    // A change brings a later recheck (a disruption's
                    // expiry) forward to the controller's lag.
                    for ns in reconcile(&sim, work, &mut placed) {
                        let due = now + lag;
                        budgets_due
                            .entry(ns)
                            .and_modify(|d| *d = (*d).min(due))
                            .or_insert(due);
                    }
                    let ready: Vec<String> = budgets_due
                        .iter()
                        .filter(|(_, due)| **due <= now)
                        .map(|(ns, _)| ns.clone())
                        .collect();
                    for ns in ready {
                        budgets_due.remove(&ns);
                        // A disrupted pod that is not deleted stops counting
                        // as gone when its time is up: look again then.
                        if let Some(recheck) = disruption(&sim, &ns) {
                            budgets_due.insert(ns, now + recheck);
                        }
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    });
}

/// Runs the controllers on what changed; returns the namespaces whose
/// budgets need recomputing (the disruption controller runs on its own lag).
fn reconcile(sim: &SimState, mut work: Dirty, placed: &mut HashSet<String>) -> BTreeSet<String> {
    if work.all {
        let store = sim.store();
        for ds in store.list(&Gr::daemonsets(), None) {
            work.daemonsets
                .insert((meta::namespace(&ds).into(), meta::name(&ds).into()));
        }
        for rs in store.list(&Gr::replicasets(), None) {
            work.replicasets
                .insert((meta::namespace(&rs).into(), meta::name(&rs).into()));
        }
        for ns in store.list(&Gr::namespaces(), None) {
            work.pdb_namespaces.insert(meta::name(&ns).into());
        }
        drop(store);
        work.schedule = true;
    }
    for (ns, name) in &work.daemonsets {
        daemonset(sim, ns, name);
    }
    for (ns, name) in &work.replicasets {
        replicaset(sim, ns, name, placed);
    }
    if work.schedule {
        bind_pending(sim);
    }
    work.pdb_namespaces
}

fn owned_pods(sim: &SimState, ns: &str, owner_uid: &str) -> Vec<Arc<Value>> {
    sim.store()
        .list(&Gr::pods(), Some(ns))
        .into_iter()
        .filter(|p| meta::controller_of(p).is_some_and(|(_, _, uid)| uid == owner_uid))
        .collect()
}

fn new_pod(
    owner: &Value,
    api_version: &str,
    kind: &str,
    node: Option<&str>,
    extra_tolerations: Vec<Value>,
) -> Value {
    let tpl = &owner["spec"]["template"];
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", meta::name(owner)),
            "namespace": meta::namespace(owner),
            "labels": tpl["metadata"]["labels"],
            "annotations": tpl["metadata"]["annotations"],
            "ownerReferences": [meta::controller_ref(api_version, kind, owner)],
        },
        "spec": tpl["spec"],
    });
    if let Some(n) = node {
        pod["spec"]["nodeName"] = json!(n);
    }
    if !extra_tolerations.is_empty() {
        let mut t = pod["spec"]["tolerations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        t.extend(extra_tolerations);
        pod["spec"]["tolerations"] = Value::Array(t);
    }
    if pod["spec"]["containers"].is_null() {
        pod["spec"]["containers"] = json!([{"name": "app", "image": "registry.example/app:1"}]);
    }
    pod
}

fn create_pod(sim: &SimState, manager: &str, pod: Value) {
    let Some(def) = sim.store().resource(&Gr::pods()) else {
        return;
    };
    let ns = meta::namespace(&pod).to_string();
    if let Err(e) = verbs::create(sim, &def, Some(&ns), pod, &writer(manager), false) {
        tracing::debug!(error = %e.message, "{manager} could not create a pod");
    }
}

fn daemonset(sim: &SimState, ns: &str, name: &str) {
    let Some(ds) = sim.store().get(&Gr::daemonsets(), ns, name) else {
        return;
    };
    if meta::is_terminating(&ds) {
        return;
    }
    let mut tpl_spec = ds["spec"]["template"]["spec"].clone();
    let mut tol = tpl_spec["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    tol.extend(daemonset_tolerations());
    tpl_spec["tolerations"] = Value::Array(tol);
    let pods = owned_pods(sim, ns, meta::uid(&ds));
    let (mut desired, mut current, mut ready) = (0, 0, 0);
    let nodes = sim.store().list(&Gr::nodes(), None);
    for node in nodes {
        let node_name = meta::name(&node);
        let here: Vec<_> = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == node_name)
            .collect();
        let eligible = fits(&tpl_spec, &node);
        if eligible {
            desired += 1;
        }
        if !here.is_empty() {
            current += 1;
            ready += here.iter().filter(|p| meta::pod_ready(p)).count();
            continue;
        }
        // No pod here (a terminating one still counts above): create one,
        // unless a taint the pod does not tolerate keeps it off.
        if eligible {
            create_pod(
                sim,
                "daemonset-controller",
                new_pod(
                    &ds,
                    "apps/v1",
                    "DaemonSet",
                    Some(node_name),
                    daemonset_tolerations(),
                ),
            );
        }
    }
    let status = json!({"desiredNumberScheduled": desired, "currentNumberScheduled": current, "numberReady": ready, "numberAvailable": ready, "updatedNumberScheduled": current, "numberMisscheduled": 0, "observedGeneration": ds["metadata"]["generation"]});
    write_status(
        sim,
        &Gr::daemonsets(),
        ns,
        name,
        "daemonset-controller",
        status,
    );
}

fn replicaset(sim: &SimState, ns: &str, name: &str, placed: &mut HashSet<String>) {
    let Some(rs) = sim.store().get(&Gr::replicasets(), ns, name) else {
        return;
    };
    if meta::is_terminating(&rs) {
        return;
    }
    let want = rs["spec"]["replicas"].as_i64().unwrap_or(1).max(0) as usize;
    let pods = owned_pods(sim, ns, meta::uid(&rs));
    let active: Vec<_> = pods
        .iter()
        .filter(|p| {
            !meta::is_terminating(p)
                && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
        })
        .collect();
    let initial = meta::annotation(&rs, INITIAL_NODE_ANNOTATION).map(str::to_string);
    let first = placed.insert(meta::uid(&rs).to_string());
    if active.len() < want {
        for _ in active.len()..want {
            let node = match (&initial, first && pods.is_empty()) {
                (Some(n), true) => Some(n.clone()),
                _ => schedule(sim, &rs["spec"]["template"]["spec"]),
            };
            create_pod(
                sim,
                "replicaset-controller",
                new_pod(&rs, "apps/v1", "ReplicaSet", node.as_deref(), vec![]),
            );
        }
    } else if active.len() > want {
        let Some(def) = sim.store().resource(&Gr::pods()) else {
            return;
        };
        for p in active.iter().rev().take(active.len() - want) {
            let _ = verbs::delete(sim, &def, ns, meta::name(p), &DeleteOptions::default());
        }
    }
    let ready = active.iter().filter(|p| meta::pod_ready(p)).count();
    let status = json!({"replicas": active.len(), "readyReplicas": ready, "availableReplicas": ready, "fullyLabeledReplicas": active.len(), "observedGeneration": rs["metadata"]["generation"]});
    write_status(
        sim,
        &Gr::replicasets(),
        ns,
        name,
        "replicaset-controller",
        status,
    );
}

/// Binds pods that have no node yet, as the scheduler does.
fn bind_pending(sim: &SimState) {
    let pending: Vec<_> = sim
        .store()
        .list(&Gr::pods(), None)
        .into_iter()
        .filter(|p| {
            p["spec"]["nodeName"].as_str().unwrap_or("").is_empty() && !meta::is_terminating(p)
        })
        .collect();
    let Some(def) = sim.store().resource(&Gr::pods()) else {
        return;
    };
    for pod in pending {
        if let Some(node) = schedule(sim, &pod["spec"]) {
            let patch = json!({"spec": {"nodeName": node}});
            let _ = verbs::patch(
                sim,
                &def,
                meta::namespace(&pod),
                meta::name(&pod),
                Part::Main,
                PatchType::Merge,
                &patch,
                &writer("default-scheduler"),
            );
        }
    }
}
