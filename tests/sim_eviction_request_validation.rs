//! The simulated cluster speaks the EvictionRequest API as Kubernetes
//! 1.37.2 merged it, not as the KEP's drafts wrote it: `spec.requester`
//! (a body with only the draft's `requesterName` loses that field and is
//! refused for the one it lacks; strict field validation names it), the
//! Pod's responders with their required priorities, and no controller
//! unless a test asks for the simulator's.

use crate::common;
use crate::eviction_request_support as support;

use common::*;
use serde_json::{Value, json};
use support::*;

use maintd_sim::lifecycle::LIVE_MIGRATION;

const UID: &str = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";

fn request_body(spec: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "r"}, "spec": spec,
    }))
    .unwrap()
}

fn causes(status: &Value) -> Vec<(String, String)> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_written_for_the_kep_draft_is_refused_as_kubernetes_1_37_refuses_it() {
    let sim = served_without_controller().await;
    let target = json!({"pod": {"name": "p", "uid": UID}});
    let draft =
        json!({"target": target, "requesterName": "a.example.io/drain", "intent": "Eviction"});

    // By default the unknown field is dropped; the required one is missing.
    let (code, status) = raw(
        &sim,
        "POST",
        REQUESTS,
        "application/json",
        request_body(draft.clone()),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (422, Some("Invalid")),
        "{status}"
    );
    assert_eq!(
        causes(&status),
        [("spec.requester".to_string(), "Required value".to_string())]
    );

    // Asked to be strict, the API server names the unknown field.
    let mut both = draft.clone();
    both["requester"] = json!("a.example.io/drain");
    let strict = format!("{REQUESTS}?fieldValidation=Strict");
    let (code, status) = raw(
        &sim,
        "POST",
        &strict,
        "application/json",
        request_body(both.clone()),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (400, Some("BadRequest")),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("strict decoding error: unknown field \"spec.requesterName\""),
        "{status}"
    );

    // Not strict: accepted without it.
    let (code, created) = raw(
        &sim,
        "POST",
        REQUESTS,
        "application/json",
        request_body(both),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["spec"],
        json!({"target": target, "requester": "a.example.io/drain", "intent": "Eviction"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_controller_a_request_is_accepted_and_nothing_acts_on_it() {
    let sim = served_without_controller().await;
    let uid = running_pod(&sim, "vm", migrating("1")).await;
    request_eviction(&sim, "drain", "vm", &uid).await;
    // What Kubernetes 1.37.2 does with it: nothing. (A second is many
    // passes of the simulator's controller, when it runs.)
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let st = status(&sim, "EvictionRequest", "drain").await;
    assert!(
        st.as_object().is_none_or(|s| s.is_empty()),
        "no status: {st}"
    );
    let evictions = api(&sim, "Eviction")
        .list(&Default::default())
        .await
        .unwrap();
    assert!(evictions.items.is_empty(), "no Eviction");
    assert!(pod_exists(&sim, "vm").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_responders_need_a_priority_are_fixed_and_go_without_the_gate() {
    let sim = served().await;
    let post = |name: &str, responders: Value| {
        let mut pod = pod_json("default", name, "node-a", json!({}));
        pod["spec"]["evictionResponders"] = responders;
        let sim = &sim;
        async move {
            raw(
                sim,
                "POST",
                "/api/v1/namespaces/default/pods",
                "application/json",
                serde_json::to_vec(&pod).unwrap(),
            )
            .await
        }
    };
    for (responders, field, message) in [
        (
            json!([{"name": LIVE_MIGRATION}]),
            "spec.evictionResponders[0].priority",
            "Required value",
        ),
        (
            json!([{"name": LIVE_MIGRATION, "priority": 500}]),
            "spec.evictionResponders[0].priority",
            "Invalid value: 500: priorities 0-999 are reserved for responders with *.k8s.io suffix",
        ),
        (
            json!([{"name": "evictor.k8s.io/mine", "priority": 5000}]),
            "spec.evictionResponders[0].name",
            "Invalid value: \"evictor.k8s.io/mine\": domain names *.k8s.io, *.kubernetes.io are reserved",
        ),
    ] {
        let (code, status) = post("bad", responders.clone()).await;
        assert_eq!(code, 422, "{responders}: {status}");
        assert!(
            causes(&status).contains(&(field.to_string(), message.to_string())),
            "{responders}: {status}"
        );
    }
    let (code, created) = post("vm", json!([{"name": LIVE_MIGRATION, "priority": 10000}])).await;
    assert_eq!(code, 201, "{created}");
    let change =
        json!({"spec": {"evictionResponders": [{"name": LIVE_MIGRATION, "priority": 20000}]}});
    let (code, status) = raw(
        &sim,
        "PATCH",
        "/api/v1/namespaces/default/pods/vm",
        "application/merge-patch+json",
        serde_json::to_vec(&change).unwrap(),
    )
    .await;
    assert_eq!(code, 422, "set at creation only: {status}");

    // Without the feature gate the field is dropped, as kube-apiserver
    // drops a disabled field on write.
    let off = sim_with(maintd_sim::SimConfig::default()).await;
    create_node(&off.client(), "node-a").await;
    let mut pod = pod_json("default", "vm", "node-a", json!({}));
    pod["spec"]["evictionResponders"] = json!([{"name": LIVE_MIGRATION, "priority": 10000}]);
    let (code, created) = raw(
        &off,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        serde_json::to_vec(&pod).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert!(created["spec"]["evictionResponders"].is_null(), "{created}");
}
