//! On the real control plane (Kubernetes 1.37, tests/common/real.rs), with
//! the rights deploy/ gives the agent: a drain taint drains the node in
//! priority order, the real disruption controller pacing the evictions
//! behind a PodDisruptionBudget; its lifecycle conditions are what kubectl
//! reads; the taint removed, the node is back in service.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::agent::RunningAgent;
use common::real::{PATIENCE, Real};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use maintd::config::Config;
use maintd::drain::progress::{EventKind, Phase};
use serde_json::{Value, json};

/// A Deployment of `replicas` pods of priority class `class`, kept on the
/// nodes labelled `test=<ns>`, each pod taking a second to become Ready.
pub fn deployment(ns: &str, name: &str, replicas: i32, class: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {"sim.maintd.io/startup-seconds": "1"},
                },
                "spec": {
                    "priorityClassName": class,
                    "nodeSelector": {"test": ns},
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                    "containers": [{"name": "app", "image": "registry.example/app:1"}],
                },
            },
        },
    })
}

/// Creates `obj` (any kind) as cluster-admin, through kubectl.
pub fn create(real: &Real, obj: &Value) {
    let (ok, _, err) = common::real::kubectl(
        &real.admin_kubeconfig(),
        &["apply", "--server-side", "-f", "-"],
        Some(&obj.to_string()),
    );
    assert!(ok, "creating {}: {err}", obj["metadata"]["name"]);
}

/// The test's priority classes (cluster-wide, so named after the test).
pub fn priority_classes(real: &Real, prefix: &str) {
    for (name, value) in [("low", 100), ("high", 1000)] {
        create(
            real,
            &json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": format!("{prefix}-{name}")},
                "value": value,
            }),
        );
    }
}

/// Ready pods of app `app` in `ns` now.
async fn ready_pods(client: &kube::Client, ns: &str, app: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| l.items.iter().filter(|p| common::is_ready(p)).count())
        .unwrap_or(0)
}

/// The fewest pods of app `app` a watch saw Ready at once from now on
/// (until the task is aborted).
fn least_ready(
    client: &kube::Client,
    ns: &str,
    app: &str,
) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let least = Arc::new(Mutex::new(usize::MAX));
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let cfg = watcher::Config::default().labels(&format!("app={app}"));
    let l = least.clone();
    let task = tokio::spawn(async move {
        let mut ready: BTreeMap<String, bool> = BTreeMap::new();
        let mut synced = false;
        let mut events = watcher(api, cfg).boxed();
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let gone = p.metadata.deletion_timestamp.is_some();
                    ready.insert(
                        p.metadata.name.clone().unwrap_or_default(),
                        !gone && common::is_ready(&p),
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
                let mut least = l.lock().unwrap();
                *least = (*least).min(now);
            }
        }
    });
    (least, task)
}

/// The node's conditions as `kubectl get node -o json` shows them: type →
/// (status, reason).
pub fn conditions(real: &Real, node: &str) -> BTreeMap<String, (String, String)> {
    let out = real.kubectl_ok(&["get", "node", node, "-o", "json"]);
    let node: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c["type"].as_str()?.to_string(),
                (
                    c["status"].as_str().unwrap_or_default().to_string(),
                    c["reason"].as_str().unwrap_or_default().to_string(),
                ),
            ))
        })
        .collect()
}

/// An agent for `node` on the real control plane, with its own token.
pub async fn agent(real: &Real, node: &str) -> (RunningAgent, tempfile::TempDir) {
    let manifests = tempfile::tempdir().expect("a static pod directory");
    let client = real.agent_client(node).await;
    let agent = RunningAgent::start_with(
        Config::for_node(node, manifests.path().to_path_buf()),
        client,
    );
    (agent, manifests)
}

/// Node a carries two Deployments: `web` (3 pods, low priority, a budget
/// of at least 2 available) and `api` (2 pods, high priority). Node b
/// takes what leaves a. A drain taint on a: every low-priority pod goes
/// before any high-priority one, the budget never breaks (the real
/// disruption controller refuses what would break it, and the agent asks
/// again), node a ends empty, cordoned, with maintd's taint and the
/// lifecycle conditions `kubectl get node` shows; without the taint, it is
/// back in service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_drains_a_real_node_in_priority_order_behind_its_budget() {
    let real = Real::get();
    let admin = real.admin().await;
    let ns = "real-drain";
    let (a, b) = ("real-drain-a".to_string(), "real-drain-b".to_string());
    real.namespace(&admin, ns).await;
    priority_classes(&real, ns);
    real.node(&admin, &a, json!({"test": ns})).await;
    create(&real, &deployment(ns, "web", 3, &format!("{ns}-low")));
    create(&real, &deployment(ns, "api", 2, &format!("{ns}-high")));
    create(
        &real,
        &json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        }),
    );
    let c = admin.clone();
    common::eventually_within("5 pods Ready on node a", PATIENCE, || {
        let c = c.clone();
        async move { ready_pods(&c, ns, "web").await == 3 && ready_pods(&c, ns, "api").await == 2 }
    })
    .await;
    // Room for what leaves a.
    real.node(&admin, &b, json!({"test": ns})).await;
    let (least, watching) = least_ready(&admin, ns, "web");

    let (agent, _manifests) = agent(&real, &a).await;
    let patch = json!({"spec": {"taints": [{"key": "maintd.io/drain", "value": "kernel", "effect": "NoSchedule"}]}});
    Api::<Node>::all(admin.clone())
        .patch(&a, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    agent
        .wait_for_within("node a drained", PATIENCE * 2, |_| {
            agent.progress.status().phase == Phase::Drained
        })
        .await;
    watching.abort();

    // Priority order: every web pod left before any api pod.
    let evicted: Vec<String> = agent
        .events()
        .iter()
        .filter(|e| e.event == EventKind::PodEvicted)
        .filter_map(|e| e.pod.clone())
        .collect();
    assert_eq!(evicted.len(), 5, "{evicted:?}");
    let first_api = evicted.iter().position(|p| p.starts_with("api-")).unwrap();
    assert!(
        evicted[..first_api].iter().all(|p| p.starts_with("web-")) && first_api == 3,
        "low priority first: {evicted:?}"
    );
    // The budget held: never fewer than 2 web pods Ready.
    let least = *least.lock().unwrap();
    assert!(
        (2..=3).contains(&least),
        "the budget broke: {least} Ready at once"
    );
    // The budget held pods back (the real disruption controller's status
    // allowed one at a time): they waited their turn, or were refused.
    let held = agent
        .events()
        .iter()
        .filter(|e| matches!(e.event, EventKind::PodBlocked | EventKind::PodQueued))
        .count();
    assert!(held >= 1, "a budget this tight holds some pods back");

    let pods_left: Vec<String> = common::pods_on(&admin, &a)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(pods_left.is_empty(), "{pods_left:?}");
    let node = Api::<Node>::all(admin.clone()).get(&a).await.unwrap();
    let spec = node.spec.clone().unwrap_or_default();
    assert_eq!(spec.unschedulable, Some(true));
    assert!(
        spec.taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "maintd.io/draining" && t.effect == "NoSchedule")
    );
    // The lifecycle conditions, as kubectl reads them.
    let real_ref = &real;
    let a_ref = a.clone();
    let shown = move |c: &BTreeMap<String, (String, String)>| {
        c.get("Drained")
            .is_some_and(|(s, r)| s == "True" && r == "DrainCompleted")
            && c.get("DrainInProgress").is_none_or(|(s, _)| s != "True")
            && c.get("MaintenanceInProgress")
                .is_some_and(|(s, _)| s == "True")
            && c.get("Ready").is_some_and(|(s, _)| s == "True")
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !shown(&conditions(real_ref, &a_ref)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubectl shows the node's conditions as {:?}; the agent says {:?}",
            conditions(real_ref, &a_ref),
            agent.progress.status().last_error
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // The maintenance ends: maintd's taint goes, the node is uncordoned.
    let patch = json!({"spec": {"taints": null}});
    let nodes: Api<Node> = Api::all(admin.clone());
    let current = nodes.get(&a).await.unwrap();
    let kept: Vec<Value> = current
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != "maintd.io/drain")
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    let mut untaint = patch;
    untaint["spec"]["taints"] = json!(kept);
    untaint["metadata"] = json!({"resourceVersion": current.metadata.resource_version});
    nodes
        .patch(&a, &PatchParams::default(), &Patch::Merge(untaint))
        .await
        .unwrap();
    let n = nodes.clone();
    let a_ref = a.clone();
    common::eventually_within("node a back in service", PATIENCE, || {
        let (n, a) = (n.clone(), a_ref.clone());
        async move {
            n.get(&a).await.is_ok_and(|node| {
                let spec = node.spec.unwrap_or_default();
                spec.unschedulable != Some(true)
                    && !spec
                        .taints
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.key.starts_with("maintd.io/"))
            })
        }
    })
    .await;
    agent.stop().await;
    real.remove_nodes(&admin, &[a, b]).await;
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .delete(ns, &Default::default())
        .await;
}
