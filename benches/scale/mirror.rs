//! The bench's own view of the real API server: watches (cluster-admin,
//! not counted as any agent's) that keep the current objects of a kind,
//! for the rollout's looks every 50 ms; and what the control plane's
//! processes and etcd used over a window.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;

use crate::cluster::{ControlPlane, EtcdMetrics, ProcUsage};

/// The current objects a watch has seen, by namespace/name.
#[derive(Clone, Default)]
pub struct Mirror {
    objects: Arc<Mutex<BTreeMap<String, Arc<Value>>>>,
    task: Arc<Mutex<Option<tokio::task::AbortHandle>>>,
}

impl Mirror {
    /// Starts watching `ar` objects (in `ns`, or all) on the current runtime.
    pub fn start(client: &kube::Client, ar: &ApiResource, ns: Option<&str>) -> Mirror {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        };
        let mirror = Mirror::default();
        let m = mirror.clone();
        let task = tokio::spawn(async move {
            let mut fresh: BTreeMap<String, Arc<Value>> = BTreeMap::new();
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = events.next().await {
                let key = |o: &DynamicObject| {
                    format!(
                        "{}/{}",
                        o.metadata.namespace.as_deref().unwrap_or(""),
                        o.metadata.name.as_deref().unwrap_or("")
                    )
                };
                let value =
                    |o: &DynamicObject| Arc::new(serde_json::to_value(o).unwrap_or_default());
                match ev {
                    Ok(watcher::Event::Init) => fresh.clear(),
                    Ok(watcher::Event::InitApply(o)) => {
                        fresh.insert(key(&o), value(&o));
                    }
                    Ok(watcher::Event::InitDone) => {
                        *m.lock() = std::mem::take(&mut fresh);
                    }
                    Ok(watcher::Event::Apply(o)) => {
                        m.lock().insert(key(&o), value(&o));
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        m.lock().remove(&key(&o));
                    }
                    Err(e) => {
                        eprintln!("  the bench's watch of {}: {e}", m.len());
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
            }
        });
        *mirror.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
        mirror
    }

    /// Stops watching (what it holds stays as it was).
    pub fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            t.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Value>>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn all(&self) -> Vec<Arc<Value>> {
        self.lock().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn get(&self, key: &str) -> Option<Arc<Value>> {
        self.lock().get(key).cloned()
    }

    /// How many objects satisfy `f`.
    pub fn count(&self, f: impl Fn(&Value) -> bool) -> usize {
        self.lock().values().filter(|v| f(v)).count()
    }
}

/// Whether a Pod or Node says Ready.
pub fn is_ready(obj: &Value) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// What the control plane's processes and etcd stood at, at one moment.
#[derive(Clone)]
pub struct Sample {
    at: Instant,
    apiserver: ProcUsage,
    etcd_proc: ProcUsage,
    kwok: ProcUsage,
    kcm: ProcUsage,
    scheduler: ProcUsage,
    etcd: EtcdMetrics,
}

impl Sample {
    pub fn now(cp: &ControlPlane) -> Sample {
        Sample {
            at: Instant::now(),
            apiserver: cp.usage("kube-apiserver"),
            etcd_proc: cp.usage("etcd"),
            kwok: cp.usage("kwok"),
            kcm: cp.usage("kube-controller-manager"),
            scheduler: cp.usage("kube-scheduler"),
            etcd: cp.etcd(),
        }
    }
}

/// What the control plane used between two samples: CPU seconds of each
/// process, etcd's writes; and where memory, etcd's database and the API
/// server's open files stood at the end.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Window {
    pub secs: f64,
    pub apiserver_cpu: f64,
    pub etcd_cpu: f64,
    pub kwok_cpu: f64,
    pub kcm_cpu: f64,
    pub scheduler_cpu: f64,
    pub etcd_writes: f64,
    pub apiserver_rss_kib: u64,
    pub etcd_rss_kib: u64,
    pub etcd_db_bytes: f64,
    pub apiserver_open_files: u64,
}

impl Window {
    pub fn between(a: &Sample, b: &Sample) -> Window {
        Window {
            secs: (b.at - a.at).as_secs_f64(),
            apiserver_cpu: b.apiserver.cpu_secs - a.apiserver.cpu_secs,
            etcd_cpu: b.etcd_proc.cpu_secs - a.etcd_proc.cpu_secs,
            kwok_cpu: b.kwok.cpu_secs - a.kwok.cpu_secs,
            kcm_cpu: b.kcm.cpu_secs - a.kcm.cpu_secs,
            scheduler_cpu: b.scheduler.cpu_secs - a.scheduler.cpu_secs,
            etcd_writes: b.etcd.writes() - a.etcd.writes(),
            apiserver_rss_kib: b.apiserver.rss_kib,
            etcd_rss_kib: b.etcd_proc.rss_kib,
            etcd_db_bytes: b.etcd.db_bytes,
            apiserver_open_files: b.apiserver.open_files,
        }
    }

    /// API server CPU seconds a minute.
    pub fn apiserver_cpu_per_min(&self) -> f64 {
        self.apiserver_cpu * 60.0 / self.secs.max(1e-9)
    }

    /// etcd writes a second.
    pub fn writes_per_sec(&self) -> f64 {
        self.etcd_writes / self.secs.max(1e-9)
    }
}

/// Where a process of the control plane stands, in a line: for progress
/// and for saying where a run stopped.
pub fn standing(cp: &ControlPlane) -> String {
    let api = cp.usage("kube-apiserver");
    let me = ProcUsage::of(std::process::id());
    let mine = crate::cluster::open_files_limit("/proc/self/limits").unwrap_or(0);
    format!(
        "kube-apiserver {} open files of {}, {} MiB, {:.0} CPU s; this process {} open files of {mine}, {} MiB; etcd {} MiB, db {:.0} MiB; kwok {} MiB; load {}",
        api.open_files,
        cp.apiserver_open_files_limit().unwrap_or(0),
        api.rss_kib / 1024,
        api.cpu_secs,
        me.open_files,
        me.rss_kib / 1024,
        cp.usage("etcd").rss_kib / 1024,
        cp.etcd().db_bytes / 1048576.0,
        cp.usage("kwok").rss_kib / 1024,
        crate::cluster::load_average(),
    )
}

/// Why this machine cannot hold the run any longer, if it cannot: a
/// process of the control plane gone, this process or the API server out
/// of open files (each watch of an agent is a connection of its own), or
/// memory nearly gone.
pub fn out_of_room(cp: &ControlPlane) -> Option<String> {
    for p in ["etcd", "kube-apiserver", "kube-controller-manager", "kwok"] {
        let alive = cp
            .pid(p)
            .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let log =
                std::fs::read_to_string(cp.dir.join(format!("log/{p}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Some(format!(
                "{p} exited; the end of its log: {}",
                tail.join(" | ")
            ));
        }
    }
    let me = ProcUsage::of(std::process::id());
    let mine = crate::cluster::open_files_limit("/proc/self/limits").unwrap_or(u64::MAX);
    if me.open_files + 50 >= mine {
        return Some(format!(
            "this process (the agents' HTTP/1.1 clients: a connection per watch) holds {} open files of its limit of {mine}",
            me.open_files
        ));
    }
    let api = cp.usage("kube-apiserver");
    let limit = cp.apiserver_open_files_limit().unwrap_or(u64::MAX);
    if api.open_files + 50 >= limit {
        return Some(format!(
            "kube-apiserver holds {} open files of its limit of {limit} (a connection per agent watch)",
            api.open_files
        ));
    }
    let available = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok());
    match available {
        Some(kib) if kib < 1024 * 1024 => Some(format!(
            "memory: {} MiB left (kube-apiserver {} MiB, etcd {} MiB, kwok {} MiB, this process {} MiB)",
            kib / 1024,
            api.rss_kib / 1024,
            cp.usage("etcd").rss_kib / 1024,
            cp.usage("kwok").rss_kib / 1024,
            me.rss_kib / 1024
        )),
        _ => None,
    }
}
