//! StatefulSets behave in the simulated cluster as on a real one, seen
//! through kube-rs: ordered or parallel, replaced under the same name,
//! rolled out from the highest ordinal down.

use crate::common;

use std::collections::HashMap;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::runtime::wait::await_condition;
use serde_json::json;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_statefulset_template_rolls_out_from_the_highest_ordinal_down() {
    let sim = two_nodes().await;
    let client = sim.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    sets.create(
        &PostParams::default(),
        &statefulset("db", 3, "OrderedReady", "0.1"),
    )
    .await
    .unwrap();
    let revisions_match = |sets: Api<StatefulSet>| async move {
        let st = sets.get("db").await.unwrap().status.unwrap_or_default();
        st.ready_replicas == Some(3)
            && st.updated_replicas == Some(3)
            && st.current_revision.is_some()
            && st.current_revision == st.update_revision
    };
    eventually("the set is up", || revisions_match(sets.clone())).await;
    let set = sets.get("db").await.unwrap();
    let spec = &set.spec;
    // The API server's defaults are there.
    assert_eq!(spec.pod_management_policy.as_deref(), Some("OrderedReady"));
    assert_eq!(
        spec.update_strategy
            .as_ref()
            .and_then(|u| u.type_.as_deref()),
        Some("RollingUpdate")
    );
    let old_revision = set.status.unwrap().update_revision.unwrap();
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    sets.patch(
        "db",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "db", "image": "registry.example/db:2"}]}}}}),
        ),
    )
    .await
    .unwrap();
    let events = record(&pods, "db", &rv, |evs| {
        evs.iter().filter(|(k, _)| k == "DELETED").count() == 3
    })
    .await;
    let deleted: Vec<&str> = events
        .iter()
        .filter(|(k, _)| k == "DELETED")
        .map(|(_, p)| name(p))
        .collect();
    assert_eq!(deleted, ["db-2", "db-1", "db-0"]);
    eventually("the new revision is current", || {
        revisions_match(sets.clone())
    })
    .await;
    let st = sets.get("db").await.unwrap().status.unwrap();
    assert_ne!(st.current_revision.as_deref(), Some(old_revision.as_str()));
    for p in pods
        .list(&ListParams::default().labels("app=db"))
        .await
        .unwrap()
        .items
    {
        assert_eq!(
            p.spec.unwrap().containers[0].image.as_deref(),
            Some("registry.example/db:2")
        );
    }
}
