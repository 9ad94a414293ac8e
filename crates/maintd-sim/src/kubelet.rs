//! Simulated kubelets, one per Node: they start pods bound to their node
//! (Running, then Ready after `sim.maintd.io/startup-seconds`), finish
//! graceful deletions after min(grace period, `sim.maintd.io/shutdown-seconds`),
//! and keep a mirror pod for each static pod manifest in
//! `<static_pod_root>/<node>/`, as the kubelet does for its manifest
//! directory: a manifest that goes away stops its static pod (taking
//! min(grace period, shutdown seconds)), and only then is the mirror pod
//! deleted, with grace 0. Status is written through the API verbs, as a
//! kubelet would.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::meta::{self, now_time};
use super::resources::Gr;
use super::state::SimState;
use super::store::EventType;
use super::verbs::{self, DeleteOptions, Writer};

pub const STARTUP_ANNOTATION: &str = "sim.maintd.io/startup-seconds";
pub const SHUTDOWN_ANNOTATION: &str = "sim.maintd.io/shutdown-seconds";
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

fn kubelet() -> Writer {
    Writer {
        manager: "kubelet".into(),
        force: false,
        user: None,
    }
}

#[derive(Default)]
struct Kubelets {
    /// Pod uids whose removal is scheduled, with the grace it was scheduled for.
    removing: HashMap<String, i64>,
    /// Pod uids being started.
    starting: HashSet<String>,
    /// node name → (index for pod IPs, next host number)
    ips: BTreeMap<String, (usize, usize)>,
}

type Shared = Arc<Mutex<Kubelets>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Kubelets> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the simulated kubelets of every node, present and future.
pub fn start(sim: Arc<SimState>, stop: CancellationToken) {
    let shared: Shared = Arc::default();
    let mut rx = sim.store().subscribe();
    let (s2, sh2, st2) = (sim.clone(), shared.clone(), stop.clone());
    tokio::spawn(async move {
        // Catch up with what exists before the first event.
        resync(&s2, &sh2);
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = st2.cancelled() => return,
            };
            match ev {
                Ok(ev) if ev.gr == Gr::pods() && ev.kind != EventType::Deleted => {
                    on_pod(&s2, &sh2, &ev.object)
                }
                Ok(ev) if ev.gr == Gr::nodes() && ev.kind != EventType::Deleted => {
                    on_node(&s2, &ev.object);
                    let name = meta::name(&ev.object).to_string();
                    // Bound first: the store lock must not be held while handling.
                    let pods = s2.store().pods_on(&name);
                    for pod in pods {
                        on_pod(&s2, &sh2, &pod);
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => resync(&s2, &sh2),
                Err(RecvError::Closed) => return,
            }
        }
    });
    if let Some(root) = sim.config.static_pod_root.clone() {
        let poll = sim.config.static_pod_poll;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            let mut stopping = Stopping::new();
            loop {
                tokio::select! {
                    _ = tick.tick() => sync_static_pods(&sim, &root, &mut stopping),
                    _ = stop.cancelled() => return,
                }
            }
        });
    }
}

fn resync(sim: &Arc<SimState>, shared: &Shared) {
    let nodes = sim.store().list(&Gr::nodes(), None);
    for node in nodes {
        on_node(sim, &node);
    }
    let pods = sim.store().list(&Gr::pods(), None);
    for pod in pods {
        on_pod(sim, shared, &pod);
    }
}

/// A new node reports itself Ready with the usual status, unless its
/// creator gave it conditions (a scenario's NotReady node).
fn on_node(sim: &SimState, node: &Value) {
    let st = &node["status"];
    if st["nodeInfo"]["kubeletVersion"].is_string() {
        return;
    }
    let mut status = json!({
        "nodeInfo": {"kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0", "osImage": "Simulated Linux", "kernelVersion": "6.1.0-sim", "containerRuntimeVersion": "containerd://2.0.0", "operatingSystem": "linux", "architecture": "amd64", "bootID": meta::new_uid()},
        "addresses": [{"type": "InternalIP", "address": node_ip(meta::name(node))}, {"type": "Hostname", "address": meta::name(node)}],
    });
    if st["capacity"].is_null() {
        status["capacity"] = json!({"pods": "110", "cpu": "8", "memory": "32Gi"});
        status["allocatable"] = json!({"pods": "110", "cpu": "8", "memory": "32Gi"});
    }
    if st["conditions"].as_array().is_none_or(|c| c.is_empty()) {
        status["conditions"] = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now_time(), "lastTransitionTime": now_time()}]);
    }
    verbs::write_status(sim, &Gr::nodes(), "", meta::name(node), "kubelet", status);
}

fn on_pod(sim: &Arc<SimState>, shared: &Shared, pod: &Value) {
    let node = pod["spec"]["nodeName"].as_str().unwrap_or("");
    if node.is_empty() {
        return;
    }
    let uid = meta::uid(pod).to_string();
    if meta::is_terminating(pod) {
        let grace = pod["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        {
            let mut k = lock(shared);
            if k.removing.get(&uid).is_some_and(|g| *g <= grace) {
                return;
            }
            k.removing.insert(uid.clone(), grace);
        }
        let shutdown = meta::seconds_annotation(pod, SHUTDOWN_ANNOTATION).unwrap_or(0.0);
        let wait = Duration::from_secs_f64(shutdown.min(grace as f64));
        let (sim, shared) = (sim.clone(), shared.clone());
        let (ns, name) = (
            meta::namespace(pod).to_string(),
            meta::name(pod).to_string(),
        );
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            // A shorter second delete may have rescheduled this removal.
            if lock(&shared).removing.get(&uid) != Some(&grace) {
                return;
            }
            let current = sim.store().get(&Gr::pods(), &ns, &name);
            let def = sim.store().resource(&Gr::pods());
            if current.is_some_and(|p| meta::uid(&p) == uid)
                && let Some(def) = def
            {
                let opts = DeleteOptions {
                    grace_period_seconds: Some(0),
                    uid: Some(uid.clone()),
                    ..Default::default()
                };
                let _ = verbs::delete(&sim, &def, &ns, &name, &opts);
            }
            lock(&shared).removing.remove(&uid);
        });
        return;
    }
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if phase != "Pending" {
        return;
    }
    let Some(node_obj) = sim.store().get(&Gr::nodes(), "", node) else {
        return;
    };
    if !meta::node_ready(&node_obj) || !lock(shared).starting.insert(uid.clone()) {
        return;
    }
    // The pod's hostIP is its node's address, as `kubectl describe pod`
    // shows it next to the node's name.
    let host_ip = node_obj["status"]["addresses"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
        .and_then(|a| a["address"].as_str())
        .map_or_else(|| node_ip(node), str::to_string);
    let ip = {
        let mut k = lock(shared);
        let next_index = k.ips.len();
        let entry = k.ips.entry(node.to_string()).or_insert((next_index, 1));
        entry.1 += 1;
        format!("10.244.{}.{}", entry.0 % 256, entry.1 % 254 + 1)
    };
    let startup = meta::seconds_annotation(pod, STARTUP_ANNOTATION).unwrap_or(0.0);
    let (ns, name) = (
        meta::namespace(pod).to_string(),
        meta::name(pod).to_string(),
    );
    let started = now_time();
    let status = |ready: bool| {
        let r = if ready { "True" } else { "False" };
        let containers: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .map(|cs| cs.iter().map(|c| json!({"name": c["name"], "image": c["image"], "ready": ready, "restartCount": 0, "started": true, "state": {"running": {"startedAt": started}}})).collect())
            .unwrap_or_default();
        json!({
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "startTime": started,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_time()},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now_time()},
                {"type": "ContainersReady", "status": r, "lastTransitionTime": now_time()},
                {"type": "Ready", "status": r, "lastTransitionTime": now_time()},
            ],
            "containerStatuses": containers,
        })
    };
    verbs::write_status(
        sim,
        &Gr::pods(),
        &ns,
        &name,
        "kubelet",
        status(startup == 0.0),
    );
    lock(shared).starting.remove(&uid);
    if startup > 0.0 {
        let sim = sim.clone();
        let ready = status(true);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(startup)).await;
            let same = sim
                .store()
                .get(&Gr::pods(), &ns, &name)
                .is_some_and(|p| meta::uid(&p) == uid && !meta::is_terminating(&p));
            if same {
                verbs::write_status(&sim, &Gr::pods(), &ns, &name, "kubelet", ready);
            }
        });
    }
}

/// A node's address: stable for its name, and distinct between the names
/// of a scenario.
fn node_ip(name: &str) -> String {
    let h = u64::from_str_radix(&hash(name.as_bytes()), 16).unwrap_or_default();
    format!("10.0.{}.{}", (h >> 8) % 250, h % 250 + 1)
}

/// A stable hash of a manifest's bytes (FNV-1a), as the config hash.
fn hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// The mirror pods the manifests in `dir` call for: (namespace, name) → pod.
fn desired_mirrors(dir: &std::path::Path, node: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let node_name = meta::name(node);
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if file_name.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        let parsed: Result<Value, String> = std::str::from_utf8(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_saphyr::from_str::<Value>(t).map_err(|e| e.to_string()));
        let mut pod = match parsed {
            Ok(p) if p["metadata"]["name"].is_string() => p,
            Ok(_) => {
                tracing::warn!(file = %entry.path().display(), "static pod manifest has no metadata.name; skipped");
                continue;
            }
            Err(e) => {
                tracing::warn!(file = %entry.path().display(), error = %e, "static pod manifest does not parse; skipped");
                continue;
            }
        };
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = format!("{}-{node_name}", meta::name(&pod));
        let h = hash(&bytes);
        pod["metadata"]["name"] = json!(name);
        pod["metadata"]["namespace"] = json!(ns);
        pod["metadata"]["annotations"][MIRROR_ANNOTATION] = json!(h);
        pod["metadata"]["annotations"]["kubernetes.io/config.hash"] = json!(h);
        pod["metadata"]["annotations"]["kubernetes.io/config.source"] = json!("file");
        pod["metadata"]["ownerReferences"] = json!([meta::controller_ref("v1", "Node", node)]);
        pod["spec"]["nodeName"] = json!(node_name);
        if let Some(m) = pod.as_object_mut() {
            m.remove("status");
        }
        out.insert((ns, name), pod);
    }
    out
}

/// Mirror pods whose static pod is stopping: uid → when it will have stopped.
type Stopping = HashMap<String, tokio::time::Instant>;

/// How long a static pod takes to stop: its shutdown time, within its grace.
fn stop_time(pod: &Value) -> Duration {
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30)
        .max(0) as f64;
    let shutdown = meta::seconds_annotation(pod, SHUTDOWN_ANNOTATION).unwrap_or(0.0);
    Duration::from_secs_f64(shutdown.min(grace))
}

/// Makes each node's mirror pods follow its manifest directory. A mirror
/// pod whose manifest is gone stays as it is while its static pod stops,
/// then goes with grace 0, as the kubelet deletes it
/// (`deleteOrphanedMirrorPods`, once the pod worker has finished). (The
/// real kubelet also writes the stopping containers into the mirror pod's
/// status; the simulator does not.)
fn sync_static_pods(sim: &SimState, root: &std::path::Path, stopping: &mut Stopping) {
    let Some(pods_def) = sim.store().resource(&Gr::pods()) else {
        return;
    };
    let nodes = sim.store().list(&Gr::nodes(), None);
    let now = tokio::time::Instant::now();
    let mut mirrors: HashSet<String> = HashSet::new();
    for node in nodes {
        let name = meta::name(&node).to_string();
        let dir = root.join(&name);
        let want = desired_mirrors(&dir, &node);
        let have: Vec<Arc<Value>> = sim
            .store()
            .pods_on(&name)
            .into_iter()
            .filter(|p| meta::annotation(p, MIRROR_ANNOTATION).is_some())
            .collect();
        for pod in &have {
            let key = (
                meta::namespace(pod).to_string(),
                meta::name(pod).to_string(),
            );
            let uid = meta::uid(pod).to_string();
            mirrors.insert(uid.clone());
            // Deleted through the API, it goes the graceful way (on_pod).
            if want.contains_key(&key) || meta::is_terminating(pod) {
                stopping.remove(&uid);
                continue;
            }
            let stopped = *stopping
                .entry(uid.clone())
                .or_insert_with(|| now + stop_time(pod));
            if now >= stopped {
                let opts = DeleteOptions {
                    grace_period_seconds: Some(0),
                    uid: Some(uid.clone()),
                    ..Default::default()
                };
                let _ = verbs::delete(sim, &pods_def, &key.0, &key.1, &opts);
                stopping.remove(&uid);
            }
        }
        for ((ns, pname), pod) in want {
            if have
                .iter()
                .any(|p| meta::namespace(p) == ns && meta::name(p) == pname)
            {
                continue;
            }
            if sim.store().get(&Gr::namespaces(), "", &ns).is_none() {
                continue;
            }
            if let Err(e) = verbs::create(sim, &pods_def, Some(&ns), pod, &kubelet(), false) {
                tracing::debug!(pod = %pname, error = %e.message, "mirror pod not created");
            }
        }
    }
    stopping.retain(|uid, _| mirrors.contains(uid));
}

/// The node reboots: its kubelet comes back with a new boot ID, NotReady
/// while it starts, Ready `after` that. Pods stay bound, as after a real
/// reboot. Returns the new boot ID, or None without such a node.
pub fn reboot(sim: &Arc<SimState>, node: &str, after: Duration) -> Option<String> {
    sim.store().get(&Gr::nodes(), "", node)?;
    let boot = meta::new_uid();
    set_ready(sim, node, false, Some(&boot));
    let (sim, node) = (sim.clone(), node.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        set_ready(&sim, &node, true, None);
    });
    Some(boot)
}

/// Writes the node's Ready condition (and boot ID) as its kubelet does,
/// leaving its other conditions as they are.
fn set_ready(sim: &SimState, node: &str, ready: bool, boot: Option<&str>) {
    let Some(current) = sim.store().get(&Gr::nodes(), "", node) else {
        return;
    };
    let mut conditions: Vec<Value> = current["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Ready");
    let (status, reason) = if ready {
        ("True", "KubeletReady")
    } else {
        ("False", "KubeletNotReady")
    };
    conditions.push(json!({"type": "Ready", "status": status, "reason": reason, "message": "kubelet restarted with the node", "lastHeartbeatTime": now_time(), "lastTransitionTime": now_time()}));
    let mut status = json!({"conditions": conditions});
    if let Some(b) = boot {
        status["nodeInfo"] = json!({"bootID": b});
    }
    verbs::write_status(sim, &Gr::nodes(), "", node, "kubelet", status);
}
