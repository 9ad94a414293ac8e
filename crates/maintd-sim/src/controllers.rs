//! Simulated controllers: a scheduler that binds pending pods, the
//! DaemonSet, ReplicaSet, StatefulSet and Deployment controllers, the node
//! lifecycle controller's taints, and the disruption controller that keeps
//! PodDisruptionBudget status current. They react to the store's changes,
//! batch their work every few milliseconds, and write through the API verbs
//! like the real controllers do.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::meta;
use super::resources::Gr;
use super::state::SimState;
use super::store::{EventType, StoreEvent};
use super::verbs::Writer;
use serde_json::Value;

mod daemonset;
mod deployment;
mod disruption;
mod nodes;
mod pods;
mod replicaset;
mod scheduler;
mod statefulset;

pub use deployment::HASH_LABEL;
pub use nodes::{NOT_READY, NodeHealth, UNREACHABLE, UNSCHEDULABLE, set_node_health};
pub use scheduler::{fits, schedule, tolerates};
pub use statefulset::REVISION_LABEL;

/// How often the controllers act on what changed: every change waits for
/// the next step, and the disruption controller's lag counts from the step
/// that noticed the change. A status the disruption controller writes is a
/// change it notices only at its next step, so two recomputes of one
/// namespace's budgets are at least the lag and one step apart.
pub const CONTROLLER_STEP: Duration = Duration::from_millis(20);

/// Places a workload's first pods on this node (scenarios use it to load
/// one node); replacements are scheduled normally.
pub const INITIAL_NODE_ANNOTATION: &str = "sim.maintd.io/initial-node";

fn writer(name: &str) -> Writer {
    Writer {
        manager: name.into(),
        force: false,
        user: None,
    }
}

/// (namespace, name) of an object.
type Key = (String, String);

#[derive(Default)]
struct Dirty {
    nodes: BTreeSet<String>,
    daemonsets: BTreeSet<Key>,
    replicasets: BTreeSet<Key>,
    statefulsets: BTreeSet<Key>,
    deployments: BTreeSet<Key>,
    pdb_namespaces: BTreeSet<String>,
    schedule: bool,
    every_daemonset: bool,
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
            // A Deployment's status follows its ReplicaSets'.
            if let Some(("Deployment", owner, _)) = meta::controller_of(obj) {
                self.deployments.insert((key.0.clone(), owner.to_string()));
            }
            self.replicasets.insert(key);
        } else if ev.gr == Gr::statefulsets() {
            self.statefulsets.insert(key);
        } else if ev.gr == Gr::deployments() {
            self.deployments.insert(key);
        } else if ev.gr == Gr::pdbs() {
            self.pdb_namespaces.insert(key.0);
        } else if ev.gr == Gr::nodes() {
            // The node lifecycle controller looks at this node only; a node
            // change can make DaemonSet pods due and unblock pending pods.
            self.nodes.insert(key.1);
            self.every_daemonset = true;
            self.schedule = true;
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
                    "StatefulSet" => {
                        self.statefulsets.insert(owner);
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
        let mut tick = tokio::time::interval(CONTROLLER_STEP);
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
                        if let Some(recheck) = disruption::disruption(&sim, &ns) {
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
        let key = |o: &Value| (meta::namespace(o).to_string(), meta::name(o).to_string());
        for node in store.list(&Gr::nodes(), None) {
            work.nodes.insert(meta::name(&node).into());
        }
        for (gr, set) in [
            (Gr::daemonsets(), &mut work.daemonsets),
            (Gr::replicasets(), &mut work.replicasets),
            (Gr::statefulsets(), &mut work.statefulsets),
            (Gr::deployments(), &mut work.deployments),
        ] {
            set.extend(store.list(&gr, None).iter().map(|o| key(o)));
        }
        for ns in store.list(&Gr::namespaces(), None) {
            work.pdb_namespaces.insert(meta::name(&ns).into());
        }
        drop(store);
        work.schedule = true;
    } else if work.every_daemonset {
        let daemonsets = sim.store().list(&Gr::daemonsets(), None);
        work.daemonsets.extend(
            daemonsets
                .iter()
                .map(|o| (meta::namespace(o).to_string(), meta::name(o).to_string())),
        );
    }
    // Taints first: they decide where the others' pods may go.
    for name in &work.nodes {
        nodes::node_taints(sim, name);
    }
    for (ns, name) in &work.daemonsets {
        daemonset::daemonset(sim, ns, name);
    }
    // In the order of ownership: Deployments make ReplicaSets, which make
    // pods.
    for (ns, name) in &work.deployments {
        deployment::deployment(sim, ns, name);
    }
    for (ns, name) in &work.replicasets {
        replicaset::replicaset(sim, ns, name, placed);
    }
    for (ns, name) in &work.statefulsets {
        statefulset::statefulset(sim, ns, name, placed);
    }
    if work.schedule {
        scheduler::bind_pending(sim);
    }
    work.pdb_namespaces
}
