//! Helpers shared by the integration tests: a simulated cluster and small
//! object builders.
#![allow(dead_code)]

pub mod agent;
pub mod endpoint;
pub mod fault_proxy;
pub mod kubectl;
pub mod logind_agent;
pub mod mirror_pods;
pub mod real;
pub mod recorded;
pub mod slow_proxy;

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use maintd_sim::{SimCluster, SimConfig};

/// A directory of the tests' own (under target/) holding an operator's
/// kustomization: deploy/ with the component deploy/`component` on top.
/// Written whole under another name and renamed, so that two tests
/// writing it at once never leave the other a partial file to read.
pub fn overlay_with_component(component: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(format!("target/kustomize-with-{component}"));
    std::fs::create_dir_all(&dir).expect("the overlay's directory");
    let draft = dir.join(format!("kustomization.yaml.{}", std::process::id()));
    std::fs::write(
        &draft,
        format!("resources:\n  - ../../deploy\ncomponents:\n  - ../../deploy/{component}\n"),
    )
    .expect("the overlay is written");
    std::fs::rename(&draft, dir.join("kustomization.yaml")).expect("the overlay is in place");
    dir
}

pub async fn sim() -> SimCluster {
    sim_with(SimConfig::default()).await
}

pub async fn sim_with(config: SimConfig) -> SimCluster {
    SimCluster::start(config)
        .await
        .expect("the simulated cluster starts")
}

pub fn node_json(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
}

pub async fn create_node(client: &kube::Client, name: &str) -> Node {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(node_json(name)).unwrap();
    api.create(&PostParams::default(), &node)
        .await
        .expect("node created")
}

pub fn pod_json(ns: &str, name: &str, node: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.example/app:1"}]},
    })
}

pub async fn create_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    labels: Value,
) -> Pod {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(pod_json(ns, name, node, labels)).unwrap();
    api.create(&PostParams::default(), &pod)
        .await
        .expect("pod created")
}

/// How long a test waits for something the agent or the simulator should
/// do: far beyond what any of it needs, so only a real stall fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Waits (bounded, so a broken build fails instead of hanging) until `check`
/// holds.
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually_within(what, PATIENCE, check).await;
}

/// [`eventually`], with a patience of its own (for what is slow by design).
pub async fn eventually_within<F, Fut>(what: &str, patience: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

/// A raw HTTP request to the simulator as its admin, for what kube::Client
/// would refuse to send.
pub async fn raw(
    sim: &SimCluster,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    raw_as(
        sim,
        Some(sim.admin_token()),
        method,
        path,
        content_type,
        body,
    )
    .await
}

/// A raw HTTP request with `token` (None: none at all, anonymous).
pub async fn raw_as(
    sim: &SimCluster,
    token: Option<&str>,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    use http_body_util::{BodyExt, Full};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("{}{}", sim.url(), path))
        .header("content-type", content_type);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req.body(Full::new(bytes::Bytes::from(body))).unwrap();
    let resp = client.request(req).await.expect("the simulator answers");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
    (code, v)
}

/// A simulated cluster seeded from one of the shipped scenarios, settled.
pub async fn scenario(name: &str) -> SimCluster {
    scenario_with(name, SimConfig::default()).await
}

/// [`scenario`], on a simulator with these settings (e.g. a slower
/// disruption controller).
pub async fn scenario_with(name: &str, config: SimConfig) -> SimCluster {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(name);
    let scenario = maintd_sim::scenario::load(&path).expect("the scenario loads");
    let sim = SimCluster::start_with_scenario(config, &scenario)
        .await
        .expect("the cluster starts");
    sim.wait_settled(Duration::from_secs(60))
        .await
        .expect("the scenario settles");
    sim
}

/// Puts a taint on a node, or (value None) removes every taint with that
/// key, the way `kubectl taint` does: it reads the node and sends the whole
/// new list (taints are an atomic list).
pub async fn taint(client: &kube::Client, node: &str, key: &str, value: Option<&str>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let current = nodes.get(node).await.expect("node");
    let mut taints: Vec<Value> = current
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .filter(|t| t["key"] != key)
        .collect();
    if let Some(v) = value {
        taints.push(json!({"key": key, "value": v, "effect": "NoSchedule"}));
    }
    let list = if taints.is_empty() {
        Value::Null
    } else {
        Value::Array(taints)
    };
    nodes
        .patch(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(json!({"spec": {"taints": list}})),
        )
        .await
        .expect("taint patch");
}

/// Creates namespace `name` as an admin would; one already there is fine.
pub async fn create_namespace(sim: &SimCluster, name: &str) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let (code, body) = raw(
        sim,
        "POST",
        "/api/v1/namespaces",
        "application/json",
        serde_json::to_vec(&ns).unwrap(),
    )
    .await;
    assert!(code == 201 || code == 409, "{body}");
}

/// Creates a pod from raw JSON, as any client could send it (fields a typed
/// client does not know included); the API must accept it.
pub async fn post_pod(sim: &SimCluster, pod: &Value) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let (code, body) = raw(
        sim,
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        "application/json",
        serde_json::to_vec(pod).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

/// The path of the default namespace's PodDisruptionBudgets.
pub const DEFAULT_BUDGETS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";

/// A budget in `default` that never allows a disruption of the pods
/// labelled app=`name`: eviction alone never gets them off their node.
pub async fn unmovable_budget(sim: &SimCluster, name: &str) {
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "maxUnavailable": 0},
    });
    let (code, body) = raw(
        sim,
        "POST",
        DEFAULT_BUDGETS,
        "application/json",
        serde_json::to_vec(&pdb).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

/// Whether the node is cordoned (spec.unschedulable), as the API says now.
pub async fn is_cordoned(client: &kube::Client, node: &str) -> bool {
    let node = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("get node");
    node.spec.and_then(|s| s.unschedulable) == Some(true)
}

/// Pods on a node, as the API lists them.
pub async fn pods_on(client: &kube::Client, node: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::all(client.clone());
    pods.list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .expect("list pods")
        .items
}

pub fn is_mirror(p: &Pod) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

pub fn owner_kind(p: &Pod) -> Option<String> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.clone())
}

/// The regular files of a directory (not dotfiles) with their bytes, sorted
/// by name; empty if the directory is missing.
pub fn dir_files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_file() && !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| {
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        std::fs::read(e.path()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A StatefulSet of `replicas` pods labelled app=`name`, starting in
/// `startup` seconds and stopping in 0.2.
pub fn statefulset(name: &str, replicas: i32, policy: &str, startup: &str) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {
                    "sim.maintd.io/startup-seconds": startup,
                    "sim.maintd.io/shutdown-seconds": "0.2",
                }},
                "spec": {"containers": [{"name": "db", "image": "registry.example/db:1"}]},
            },
        },
    }))
    .unwrap()
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A simulated cluster with two Ready nodes, node-a and node-b.
pub async fn two_nodes() -> SimCluster {
    let sim = sim().await;
    for n in ["node-a", "node-b"] {
        create_node(&sim.client(), n).await;
    }
    sim
}

/// Runs the built `maintd` binary; returns (exit code, stdout, stderr).
pub async fn maintd(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args(args)
        .output()
        .await
        .expect("maintd runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Writes of `node`'s status (its conditions) by that node's agent that
/// the API server took, from the simulator's audit log.
pub fn node_status_writes(sim: &SimCluster, node: &str) -> usize {
    sim.state
        .audit
        .entries()
        .iter()
        .filter(|e| {
            e.user_agent.contains(node)
                && e.resource == "nodes"
                && e.subresource.as_deref() == Some("status")
                && e.code < 300
        })
        .count()
}

/// The answers to every write of `node`'s NodeDrain status, in order (their
/// HTTP codes), from the simulator's audit log.
pub fn nodedrain_status_writes(sim: &SimCluster, node: &str) -> Vec<u16> {
    sim.state
        .audit
        .entries()
        .iter()
        .filter(|e| {
            e.resource == "nodedrains.maintd.io"
                && e.name == node
                && e.subresource.as_deref() == Some("status")
        })
        .map(|e| e.code)
        .collect()
}

/// What `kubectl kustomize` makes of deploy/ with `deploy/<component>` on
/// top, as an operator's own kustomization would put it: its documents.
pub fn kustomize_with_component(component: &str) -> Vec<Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(format!("target/kustomize-{component}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!("resources:\n  - ../../deploy\ncomponents:\n  - ../../deploy/{component}\n"),
    )
    .unwrap();
    let out = std::process::Command::new("kubectl")
        .args(["kustomize"])
        .arg(&dir)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split("\n---\n")
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

/// What the agent's metrics endpoint exports, with one series in each
/// family that has none until the agent has a plan, an open connection or
/// a refused pod (such a family shows no line at all before).
pub fn exported_metrics() -> String {
    let metrics = maintd::metrics::Metrics::new();
    metrics
        .pods_remaining
        .get_or_create(&vec![("stage".into(), "1".into())])
        .set(1);
    metrics
        .http_connections
        .get_or_create(&vec![("listener".into(), "readonly".into())])
        .set(1);
    metrics
        .pods_blocked
        .get_or_create(&vec![
            ("namespace".into(), "shop".into()),
            ("budget".into(), "web".into()),
        ])
        .set(1);
    metrics.encode()
}

/// maintd's CRDs (NodeMaintenance, NodeDrain), as `deploy/` installs them:
/// without the NodeDrain's, the agent's status writes fail and back off.
pub async fn install_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    for crd in [
        maintd::api::crd().unwrap(),
        maintd::api::nodedrain_crd().unwrap(),
    ] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .unwrap();
    }
}
