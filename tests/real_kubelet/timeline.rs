//! What happened to the node's pods and when, from two witnesses that are
//! not maintd: the API server's audit log (every eviction and delete, who
//! sent it, what it answered, to the microsecond) and a watch of the
//! node's pods (what the kubelet wrote in their status).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;
use serde_json::Value;

/// maintd's ServiceAccount, as the audit log names it.
pub const MAINTD: &str = "system:serviceaccount:maintd:maintd";

/// One write the API server answered.
#[derive(Debug, Clone)]
pub struct Write {
    pub at: Timestamp,
    pub verb: String,
    pub user: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
}

/// Every write of the audit log at `path`.
pub fn writes(path: &Path) -> Vec<Write> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            Some(Write {
                at: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                verb: s(&e["verb"]),
                user: s(&e["user"]["username"]),
                resource: s(&e["objectRef"]["resource"]),
                subresource: s(&e["objectRef"]["subresource"]),
                namespace: s(&e["objectRef"]["namespace"]),
                name: s(&e["objectRef"]["name"]),
                code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            })
        })
        .collect()
}

/// One pod's life on the node, as the API saw it.
#[derive(Debug, Clone, Default)]
pub struct PodLife {
    /// maintd's first eviction the API accepted (201).
    pub evicted: Option<Timestamp>,
    /// maintd's evictions the API refused with 429 (a budget).
    pub refused: usize,
    /// Deletes maintd sent itself (not evictions).
    pub deleted_by_maintd: Vec<Timestamp>,
    /// The kubelet's final delete: the pod's containers had stopped.
    pub gone: Option<Timestamp>,
}

/// Each pod's life, by `namespace/name`, from the audit log; `node`'s
/// kubelet is the one whose final deletes count.
pub fn pod_lives(path: &Path, node: &str) -> BTreeMap<String, PodLife> {
    let kubelet = format!("system:node:{node}");
    let mut lives: BTreeMap<String, PodLife> = BTreeMap::new();
    for w in writes(path) {
        if w.resource != "pods" {
            continue;
        }
        let life = || format!("{}/{}", w.namespace, w.name);
        match (w.verb.as_str(), w.subresource.as_str()) {
            ("create", "eviction") if w.user == MAINTD => {
                let l = lives.entry(life()).or_default();
                match w.code {
                    201 | 200 => {
                        l.evicted.get_or_insert(w.at);
                    }
                    429 => l.refused += 1,
                    _ => {}
                }
            }
            ("delete", "") if w.user == MAINTD && w.code < 300 => {
                lives
                    .entry(life())
                    .or_default()
                    .deleted_by_maintd
                    .push(w.at);
            }
            ("delete", "") if w.user == kubelet && w.code < 300 => {
                lives.entry(life()).or_default().gone.get_or_insert(w.at);
            }
            _ => {}
        }
    }
    lives
}

/// What a watch of the node's pods saw, by `namespace/name`.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Its deletion began (deletionTimestamp set).
    pub deleting: Option<Timestamp>,
    /// The kubelet stopped it for the node's shutdown (phase Failed,
    /// condition DisruptionTarget, reason TerminationByKubelet).
    pub killed_by_kubelet: Option<Timestamp>,
    /// Its priority.
    pub priority: i32,
    /// Its owner's kind (ReplicaSet, DaemonSet, Node for a mirror pod).
    pub owner: String,
    /// Gone from the API.
    pub gone: Option<Timestamp>,
}

/// A watch of `node`'s pods, recording when each thing was first seen.
pub struct PodWatch {
    pub seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodWatch {
    pub fn start(client: &kube::Client, node: &str) -> PodWatch {
        let seen: Arc<Mutex<BTreeMap<String, Seen>>> = Arc::default();
        let api: Api<Pod> = Api::all(client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, cfg).boxed();
            while let Some(ev) = events.next().await {
                let now = Timestamp::now();
                let (pod, deleted) = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                let key = format!(
                    "{}/{}",
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default()
                );
                let mut seen = sink.lock().unwrap();
                let s = seen.entry(key).or_default();
                let spec = pod.spec.clone().unwrap_or_default();
                s.priority = spec.priority.unwrap_or(0);
                s.owner = pod
                    .metadata
                    .owner_references
                    .as_ref()
                    .and_then(|o| o.first())
                    .map(|o| o.kind.clone())
                    .unwrap_or_default();
                if pod.metadata.deletion_timestamp.is_some() {
                    s.deleting.get_or_insert(now);
                }
                if killed_by_kubelet(&pod) {
                    s.killed_by_kubelet.get_or_insert(now);
                }
                if deleted {
                    s.gone.get_or_insert(now);
                }
            }
        });
        PodWatch { seen, task }
    }

    pub fn seen(&self) -> BTreeMap<String, Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fewest pods of app `app` in `ns` a watch saw Ready at once, from
/// its start until it is dropped: what a budget promises to keep.
pub struct ReadyFloor {
    least: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl ReadyFloor {
    pub fn start(client: &kube::Client, ns: &str, app: &str) -> ReadyFloor {
        let least = Arc::new(Mutex::new(usize::MAX));
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let cfg = watcher::Config::default().labels(&format!("app={app}"));
        let sink = least.clone();
        let task = tokio::spawn(async move {
            let mut ready: BTreeMap<String, bool> = BTreeMap::new();
            let mut synced = false;
            let mut events = watcher(api, cfg).boxed();
            while let Some(ev) = events.next().await {
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let leaving = p.metadata.deletion_timestamp.is_some();
                        ready.insert(
                            p.metadata.name.clone().unwrap_or_default(),
                            !leaving && crate::common::is_ready(&p),
                        );
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        ready.remove(&p.metadata.name.clone().unwrap_or_default());
                    }
                    Ok(watcher::Event::InitDone) => synced = true,
                    _ => {}
                }
                if synced {
                    let now = ready.values().filter(|r| **r).count();
                    let mut least = sink.lock().unwrap();
                    *least = (*least).min(now);
                }
            }
        });
        ReadyFloor { least, task }
    }

    pub fn least(&self) -> usize {
        *self.least.lock().unwrap()
    }
}

impl Drop for ReadyFloor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Who held a delay lock from a given time on.
type Holders = Vec<(Timestamp, Vec<String>)>;

/// logind's delay locks over time: each change of who holds one, and when.
pub struct LockLog {
    log: Arc<Mutex<Holders>>,
    task: tokio::task::JoinHandle<()>,
}

impl LockLog {
    /// Looks at logind's table every 20 ms from now on.
    pub fn start(logind: &maintd_sim::logind::SimLogind) -> LockLog {
        let log: Arc<Mutex<Holders>> = Arc::default();
        let (sink, logind) = (log.clone(), logind.clone());
        let task = tokio::spawn(async move {
            loop {
                let mut holders: Vec<String> = logind
                    .inhibitors()
                    .into_iter()
                    .filter(|i| i.delays("shutdown"))
                    .map(|i| format!("{} (pid {})", i.who, i.pid))
                    .collect();
                holders.sort();
                {
                    let mut log = sink.lock().unwrap();
                    if log.last().is_none_or(|(_, h)| *h != holders) {
                        log.push((Timestamp::now(), holders));
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        });
        LockLog { log, task }
    }

    /// Every change: when, and who held a delay lock from then on.
    pub fn changes(&self) -> Holders {
        self.log.lock().unwrap().clone()
    }

    /// The most delay locks `who` held at once.
    pub fn most_held(&self, who: &str) -> usize {
        self.changes()
            .iter()
            .map(|(_, h)| {
                h.iter()
                    .filter(|x| x.starts_with(&format!("{who} ")))
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    /// When `who` held no lock any more, the first time after `since`.
    pub fn released(&self, who: &str, since: Timestamp) -> Option<Timestamp> {
        let changes = self.changes();
        // The state at `since` is the last change before it.
        let first = changes
            .iter()
            .rposition(|(at, _)| *at <= since)
            .unwrap_or(0);
        changes[first..]
            .iter()
            .find(|(_, h)| !h.iter().any(|x| x.starts_with(&format!("{who} "))))
            .map(|(at, _)| (*at).max(since))
    }
}

impl Drop for LockLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The kubelet's graceful node shutdown stopped this pod.
pub fn killed_by_kubelet(p: &Pod) -> bool {
    p.status.as_ref().is_some_and(|s| {
        s.conditions.as_ref().is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("TerminationByKubelet")
            })
        })
    })
}

/// Seconds from `a` to `b`.
pub fn secs(a: Timestamp, b: Timestamp) -> f64 {
    (b - a).total(jiff::Unit::Second).unwrap_or(f64::NAN)
}
