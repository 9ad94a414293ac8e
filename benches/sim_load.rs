//! Load on the simulated apiserver: 10,000 pods on 100 nodes, one watch per
//! node (100 concurrent watches, field-selected like the agent's), then
//! label patches and evictions over HTTP. Prints watch-event delivery and
//! eviction latency percentiles. Run with `cargo bench --bench sim_load`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Writer};
use maintd_sim::{SimCluster, SimConfig};
use serde_json::json;

const NODES: usize = 100;
const PODS_PER_NODE: usize = 100;
const PATCHES: usize = 2_000;
const EVICTIONS: usize = 1_000;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(what: &str, mut d: Vec<Duration>) {
    d.sort();
    println!(
        "{what:<28} n={:<6} p50={:>8.3} ms  p99={:>8.3} ms  max={:>8.3} ms",
        d.len(),
        pct(&d, 0.5).as_secs_f64() * 1e3,
        pct(&d, 0.99).as_secs_f64() * 1e3,
        d.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let sim = SimCluster::start(SimConfig {
        history: 100_000,
        ..SimConfig::default()
    })
    .await
    .expect("sim starts");
    let seed = Instant::now();
    {
        let state = &sim.state;
        let writer = Writer {
            manager: "bench".into(),
            force: false,
            user: None,
        };
        let nodes = state.store().resource(&Gr::nodes()).expect("nodes");
        let pods = state.store().resource(&Gr::pods()).expect("pods");
        for n in 0..NODES {
            let node = json!({"metadata": {"name": format!("node-{n:03}")}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
            verbs::create(state, &nodes, None, node, &writer, true).expect("node");
            for p in 0..PODS_PER_NODE {
                let pod = json!({
                    "metadata": {"name": format!("p-{n:03}-{p:03}"), "labels": {"app": format!("a{}", p % 10)}},
                    "spec": {"nodeName": format!("node-{n:03}"), "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "x"}]},
                    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
                });
                verbs::create(state, &pods, Some("default"), pod, &writer, true).expect("pod");
            }
        }
    }
    println!(
        "seeded {} nodes and {} pods in {:?}",
        NODES,
        NODES * PODS_PER_NODE,
        seed.elapsed()
    );

    let client = sim.client_with(false);
    let all: Api<Pod> = Api::all(client.clone());
    let t = Instant::now();
    let list = all.list(&ListParams::default()).await.expect("list");
    println!(
        "full list of {} pods over HTTP: {:?}",
        list.items.len(),
        t.elapsed()
    );
    let rv = list.metadata.resource_version.unwrap_or_default();

    // Sent times of the patches, by pod name; delivery = receipt − send.
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let delivered: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut watchers = Vec::new();
    for n in 0..NODES {
        let api = all.clone();
        let (sent, delivered, rv) = (sent.clone(), delivered.clone(), rv.clone());
        watchers.push(tokio::spawn(async move {
            let wp = WatchParams::default().fields(&format!("spec.nodeName=node-{n:03}"));
            let mut s = api.watch(&wp, &rv).await.expect("watch").boxed();
            while let Some(Ok(ev)) = s.next().await {
                if let WatchEvent::Modified(p) = ev {
                    let name = p.metadata.name.unwrap_or_default();
                    if let Some(at) = sent.lock().unwrap().remove(&name) {
                        delivered.lock().unwrap().push(at.elapsed());
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let t = Instant::now();
    for i in 0..PATCHES {
        let name = format!("p-{:03}-{:03}", i % NODES, (i / NODES) % PODS_PER_NODE);
        sent.lock().unwrap().insert(name.clone(), Instant::now());
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"step": i.to_string()}}})),
        )
        .await
        .expect("patch");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered.lock().unwrap().len() < PATCHES && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{PATCHES} patches with {NODES} watches open: {:?} ({:.0}/s)",
        t.elapsed(),
        PATCHES as f64 / t.elapsed().as_secs_f64()
    );
    report("watch event delivery", delivered.lock().unwrap().clone());

    let mut lat = Vec::new();
    let t = Instant::now();
    for i in 0..EVICTIONS {
        let name = format!(
            "p-{:03}-{:03}",
            i % NODES,
            PODS_PER_NODE - 1 - (i / NODES) % PODS_PER_NODE
        );
        let s = Instant::now();
        pods.evict(&name, &EvictParams::default())
            .await
            .expect("evict");
        lat.push(s.elapsed());
    }
    println!("{EVICTIONS} evictions: {:?}", t.elapsed());
    report("eviction request", lat);
    for w in watchers {
        w.abort();
    }
}
