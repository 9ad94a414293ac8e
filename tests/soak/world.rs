//! The cluster one soak round runs on, drawn from the round's seed: a few
//! nodes, each with static pods, and workloads of every kind the agent
//! drains (ReplicaSets, Deployments, StatefulSets, DaemonSets, bare pods),
//! some under PodDisruptionBudgets, some of which never allow a disruption.

use std::collections::BTreeMap;
use std::time::Duration;

use maintd_sim::scenario::Scenario;
use maintd_sim::{SimCluster, SimConfig};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::{Value, json};

/// How many nodes (and agents) a round has.
pub const NODES: usize = 3;

/// The label NodeMaintenance selectors pick nodes by.
pub const POOL_LABEL: &str = "soak.maintd.io/pool";

pub fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// What a round's cluster holds, before it starts.
#[derive(Debug, Clone)]
pub struct WorldSpec {
    /// The disruption controller's lag.
    pub lag: Duration,
    pub scenario: Scenario,
}

/// Draws a cluster.
pub fn generate(rng: &mut StdRng) -> WorldSpec {
    let lag = *[0u64, 300, 1000].choose(rng).unwrap_or(&300);
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "maintd"}}),
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "app-high"}, "value": 1000}),
    ];
    for crd in [maintd::api::crd(), maintd::api::nodedrain_crd()] {
        objects.push(serde_json::to_value(crd.expect("the CRD builds")).unwrap_or_default());
    }
    let mut static_pods = BTreeMap::new();
    for i in 0..NODES {
        let pool = if rng.random_bool(0.5) { "a" } else { "b" };
        objects.push(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name(i), "labels": {"kubernetes.io/hostname": node_name(i), POOL_LABEL: pool}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }));
        let manifests: Vec<Value> = (0..rng.random_range(0..=2))
            .map(|k| static_pod(rng, &format!("static-{k}")))
            .collect();
        static_pods.insert(node_name(i), manifests);
    }
    for w in 0..rng.random_range(3..=5) {
        objects.extend(workload(rng, &format!("w{w}")));
    }
    WorldSpec {
        lag: Duration::from_millis(lag),
        scenario: Scenario {
            objects,
            static_pods,
        },
    }
}

/// Starts the cluster and waits until every pod runs.
pub async fn start(spec: &WorldSpec) -> SimCluster {
    let config = SimConfig {
        disruption_lag: spec.lag,
        bookmark_interval: Duration::from_secs(1),
        static_pod_poll: Duration::from_millis(100),
        ..SimConfig::default()
    };
    let sim = SimCluster::start_with_scenario(config, &spec.scenario)
        .await
        .expect("the soak's cluster starts");
    sim.wait_settled(Duration::from_secs(30))
        .await
        .expect("the soak's cluster settles within 30 s");
    sim
}

/// Pod template annotations: quick to start and to stop, as the soak needs
/// many rounds.
fn timing(rng: &mut StdRng) -> Value {
    json!({
        "sim.maintd.io/startup-seconds": format!("{:.2}", rng.random_range(0.05..0.4)),
        "sim.maintd.io/shutdown-seconds": format!("{:.2}", rng.random_range(0.05..0.4)),
    })
}

fn static_pod(rng: &mut StdRng, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "annotations": timing(rng),
                     "labels": {"soak": rng.random_range(0..1_000_000u32).to_string()}},
        "spec": {"priorityClassName": "system-node-critical", "hostNetwork": true,
                 "terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "c", "image": "registry.example/static:1"}]},
    })
}

fn template(rng: &mut StdRng, name: &str) -> Value {
    let mut spec = json!({"terminationGracePeriodSeconds": 2,
                          "containers": [{"name": "c", "image": "registry.example/app:1"}]});
    if rng.random_bool(0.3) {
        spec["priorityClassName"] = json!("app-high");
    }
    json!({"metadata": {"labels": {"app": name}, "annotations": timing(rng)}, "spec": spec})
}

/// One workload and, perhaps, a budget over it.
fn workload(rng: &mut StdRng, name: &str) -> Vec<Value> {
    let replicas: i64 = rng.random_range(1..=4);
    let selector = json!({"matchLabels": {"app": name}});
    let (obj, budgeted) = match rng.random_range(0..5) {
        0 => (
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": "default"},
                   "spec": {"replicas": replicas, "selector": selector, "template": template(rng, name)}}),
            true,
        ),
        1 => (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
                   "spec": {"replicas": replicas, "selector": selector, "template": template(rng, name)}}),
            true,
        ),
        2 => {
            let policy = *["OrderedReady", "Parallel"]
                .choose(rng)
                .unwrap_or(&"Parallel");
            (
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                                "selector": selector, "template": template(rng, name)}}),
                true,
            )
        }
        3 => (
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
                   "spec": {"selector": selector, "template": template(rng, name)}}),
            false,
        ),
        _ => {
            let mut pod = template(rng, name);
            pod["apiVersion"] = json!("v1");
            pod["kind"] = json!("Pod");
            pod["metadata"]["name"] = json!(name);
            pod["metadata"]["namespace"] = json!("default");
            (pod, rng.random_bool(0.5))
        }
    };
    let mut out = vec![obj];
    if budgeted && rng.random_bool(0.7) {
        out.push(budget(rng, name, replicas));
    }
    out
}

/// A budget over app=`name`: one that lets one go, a percentage, or one
/// that never allows a disruption; with either eviction policy for
/// unhealthy pods.
fn budget(rng: &mut StdRng, name: &str, replicas: i64) -> Value {
    let mut spec = json!({"selector": {"matchLabels": {"app": name}}});
    match rng.random_range(0..5) {
        0 => spec["maxUnavailable"] = json!(1),
        1 => spec["minAvailable"] = json!((replicas - 1).max(0)),
        2 => spec["minAvailable"] = json!("50%"),
        3 => spec["maxUnavailable"] = json!(0),
        _ => spec["minAvailable"] = json!("100%"),
    }
    match rng.random_range(0..3) {
        0 => spec["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow"),
        1 => spec["unhealthyPodEvictionPolicy"] = json!("IfHealthyBudget"),
        _ => {}
    }
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}
