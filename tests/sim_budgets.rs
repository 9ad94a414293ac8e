//! A budget given as maxUnavailable (or a percentage) expects as many pods
//! as its pods' controllers want, as upstream's disruption controller
//! counts them, and allows nothing when it cannot tell.

use crate::common;

use common::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, PostParams};
use serde_json::json;

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
    let tpl = sts.spec.template.metadata.as_mut().unwrap();
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
            (st.expected_pods, st.current_healthy, st.disruptions_allowed)
                == (Some(3), Some(3), Some(1))
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
            st.current_healthy == Some(2) && st.disrupted_pods.unwrap_or_default().is_empty()
        }
    })
    .await;
    let st = status(pdbs.clone()).await;
    assert_eq!(
        (st.expected_pods, st.desired_healthy, st.disruptions_allowed),
        (Some(3), Some(2), Some(0)),
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
            }) && st.disruptions_allowed == Some(0)
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
