//! StatefulSets behave in the simulated cluster as on a real one, seen
//! through kube-rs (ordered, parallel, same-name replacement), and budgets
//! are counted from their pods' controllers' scale.

mod common;

use std::collections::HashMap;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::runtime::wait::await_condition;
use maintd::sim::SimCluster;
use serde_json::json;

fn statefulset(name: &str, replicas: i32, policy: &str, startup: &str) -> StatefulSet {
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

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every pod event of `app` from `rv` on, in order: (type, pod).
async fn record(
    pods: &Api<Pod>,
    app: &str,
    rv: &str,
    until: impl Fn(&[(String, Pod)]) -> bool,
) -> Vec<(String, Pod)> {
    let wp = kube::api::WatchParams::default().labels(&format!("app={app}"));
    let mut stream = pods.watch(&wp, rv).await.unwrap().boxed();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !until(&seen) {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .expect("timed out watching pods")
            .unwrap()
            .expect("the watch ended");
        match ev {
            WatchEvent::Added(p) => seen.push(("ADDED".into(), p)),
            WatchEvent::Modified(p) => seen.push(("MODIFIED".into(), p)),
            WatchEvent::Deleted(p) => seen.push(("DELETED".into(), p)),
            _ => {}
        }
    }
    seen
}

fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

async fn two_nodes() -> SimCluster {
    let sim = sim().await;
    for n in ["node-a", "node-b"] {
        create_node(&sim.client(), n).await;
    }
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_statefulset_pods_start_one_after_the_other_and_come_back_by_name() {
    let sim = two_nodes().await;
    let client = sim.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sets.create(
        &PostParams::default(),
        &statefulset("db", 3, "OrderedReady", "0.3"),
    )
    .await
    .unwrap();
    let all_ready = |evs: &[(String, Pod)]| {
        let mut last: HashMap<&str, &Pod> = HashMap::new();
        for (_, p) in evs {
            last.insert(name(p), p);
        }
        last.len() == 3 && last.values().all(|p| is_ready(p))
    };
    let events = record(&pods, "db", &rv, all_ready).await;
    // Each pod is made only once the one before it is Running and Ready.
    let mut ready: HashMap<String, bool> = HashMap::new();
    let mut created = Vec::new();
    for (kind, p) in &events {
        if kind == "ADDED" {
            let ord: usize = name(p).trim_start_matches("db-").parse().unwrap();
            if ord > 0 {
                assert_eq!(
                    ready.get(&format!("db-{}", ord - 1)),
                    Some(&true),
                    "{} was made before db-{} was ready",
                    name(p),
                    ord - 1
                );
            }
            created.push(name(p).to_string());
        }
        ready.insert(name(p).to_string(), is_ready(p));
    }
    assert_eq!(created, ["db-0", "db-1", "db-2"]);
    let pod = pods.get("db-1").await.unwrap();
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "db-1");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "1");
    assert_eq!(pod.spec.as_ref().unwrap().hostname.as_deref(), Some("db-1"));
    assert_eq!(owner_kind(&pod).as_deref(), Some("StatefulSet"));
    let set_ready = await_condition(sets.clone(), "db", |s: Option<&StatefulSet>| {
        s.and_then(|s| s.status.as_ref())
            .is_some_and(|st| st.ready_replicas == Some(3) && st.current_replicas == Some(3))
    });
    tokio::time::timeout(PATIENCE, set_ready)
        .await
        .unwrap()
        .unwrap();

    // A deleted pod comes back under its name, as a new pod.
    let old_uid = pod.metadata.uid.clone().unwrap();
    pods.delete("db-1", &Default::default()).await.unwrap();
    eventually("db-1 is back as a new, ready pod", || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move {
            pods.get_opt("db-1")
                .await
                .unwrap()
                .is_some_and(|p| p.metadata.uid.as_deref() != Some(&old_uid) && is_ready(&p))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_statefulset_pods_are_made_at_once_and_scaled_down_from_the_top() {
    let sim = two_nodes().await;
    let client = sim.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // Slow to start: with OrderedReady only db-0 would exist for 5 s.
    sets.create(
        &PostParams::default(),
        &statefulset("db", 3, "Parallel", "5"),
    )
    .await
    .unwrap();
    let events = record(&pods, "db", &rv, |evs| {
        evs.iter().filter(|(k, _)| k == "ADDED").count() == 3
    })
    .await;
    assert!(
        events.iter().all(|(_, p)| !is_ready(p)),
        "all three are made before any is ready"
    );
    sets.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    eventually("only db-0 is left", || {
        let pods = pods.clone();
        async move {
            let left: Vec<String> = pods
                .list(&ListParams::default().labels("app=db"))
                .await
                .unwrap()
                .items
                .iter()
                .map(|p| name(p).to_string())
                .collect();
            left == ["db-0"]
        }
    })
    .await;
}

/// The example: three pods of a StatefulSet under maxUnavailable 1.
/// After one eviction the API server counts the evicted (terminating) pod as
/// unhealthy but still expected, so no further disruption is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_budget_counts_its_scale_not_the_pods_left() {
    let sim = two_nodes().await;
    let client = sim.client_with(false);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let mut sts = statefulset("db", 3, "Parallel", "0");
    // The evicted pod stays terminating for the whole test (30 s grace).
    let tpl = sts
        .spec
        .as_mut()
        .unwrap()
        .template
        .metadata
        .as_mut()
        .unwrap();
    tpl.annotations
        .as_mut()
        .unwrap()
        .insert("sim.maintd.io/shutdown-seconds".into(), "600".into());
    sets.create(&PostParams::default(), &sts).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let status = |pdbs: Api<PodDisruptionBudget>| async move {
        pdbs.get("db").await.unwrap().status.unwrap_or_default()
    };
    eventually("the budget allows one disruption of three", || {
        let pdbs = pdbs.clone();
        async move {
            let st = status(pdbs).await;
            (st.expected_pods, st.current_healthy, st.disruptions_allowed) == (3, 3, 1)
        }
    })
    .await;

    pods.evict("db-1", &EvictParams::default()).await.unwrap();
    // Once the disruption controller has seen the pod go (it is no longer
    // a recorded disruption but a terminating pod), it still expects three.
    eventually("the budget has recounted after the eviction", || {
        let pdbs = pdbs.clone();
        async move {
            let st = status(pdbs).await;
            st.current_healthy == 2 && st.disrupted_pods.unwrap_or_default().is_empty()
        }
    })
    .await;
    let st = status(pdbs.clone()).await;
    assert_eq!(
        (st.expected_pods, st.desired_healthy, st.disruptions_allowed),
        (3, 2, 0),
        "{st:?}"
    );
    let refused = pods
        .evict("db-2", &EvictParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 429),
        "{refused:?}"
    );
}

/// DaemonSets have no scale: upstream's disruption controller cannot count
/// a maxUnavailable budget over their pods and fails safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_over_pods_of_a_controller_without_scale_allows_nothing() {
    let sim = two_nodes().await;
    let client = sim.client_with(false);
    let (code, body) = raw(
        &sim,
        "POST",
        "/apis/apps/v1/namespaces/default/daemonsets",
        "application/json",
        serde_json::to_vec(&json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "registry.example/agent:1"}]},
            }},
        }))
        .unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "agent"}}},
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    eventually("both DaemonSet pods run", || {
        let pods = pods.clone();
        async move {
            let items = pods
                .list(&ListParams::default().labels("app=agent"))
                .await
                .unwrap()
                .items;
            items.len() == 2 && items.iter().all(is_ready)
        }
    })
    .await;
    eventually("the budget says it cannot be counted", || {
        let pdbs = pdbs.clone();
        async move {
            let st = pdbs.get("agent").await.unwrap().status.unwrap_or_default();
            st.conditions.unwrap_or_default().iter().any(|c| {
                c.type_ == "DisruptionAllowed"
                    && c.status == "False"
                    && c.reason == "SyncFailed"
                    && c.message == "daemonsets.apps does not implement the scale subresource"
            }) && st.disruptions_allowed == 0
        }
    })
    .await;
    let victim = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap()
        .items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let refused = pods
        .evict(&victim, &EvictParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, kube::Error::Api(ref s) if s.code == 429),
        "{refused:?}"
    );
}
