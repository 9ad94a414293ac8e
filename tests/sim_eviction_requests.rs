//! The EvictionRequest API (KEP-4563, alpha in Kubernetes 1.37) in the
//! simulated cluster, asked of it as clients would (kube's DynamicObject,
//! raw HTTP, kubectl): served only behind its switch, validated, and, with
//! the simulator's evictionrequest-controller on, carried out by the
//! responders the simulator plays, with budgets held.

use crate::common;
use crate::eviction_request_support as support;

use common::kubectl::Kubectl;
use common::*;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::*;

use maintd_sim::lifecycle::{IMPERATIVE_EVICTOR, LIVE_MIGRATION};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_is_served_only_behind_its_switch() {
    let off = sim().await;
    let (_, groups) = raw(&off, "GET", "/apis", "application/json", vec![]).await;
    assert!(!groups.to_string().contains("lifecycle.k8s.io"), "{groups}");
    for path in [
        "/apis/lifecycle.k8s.io",
        "/apis/lifecycle.k8s.io/v1alpha1",
        REQUESTS,
    ] {
        let (code, _) = raw(&off, "GET", path, "application/json", vec![]).await;
        assert_eq!(code, 404, "{path}");
    }
    let (code, _) = raw(&off, "POST", REQUESTS, "application/json", b"{}".to_vec()).await;
    assert_eq!(code, 404);

    let on = served().await;
    let (_, group) = raw(
        &on,
        "GET",
        "/apis/lifecycle.k8s.io",
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(
        group["preferredVersion"]["groupVersion"], "lifecycle.k8s.io/v1alpha1",
        "{group}"
    );
    let (_, list) = raw(
        &on,
        "GET",
        "/apis/lifecycle.k8s.io/v1alpha1",
        "application/json",
        vec![],
    )
    .await;
    let names: Vec<(&str, &str, bool)> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["kind"].as_str().unwrap(),
                r["namespaced"] == true,
            )
        })
        .collect();
    for want in [
        ("evictionrequests", "EvictionRequest", true),
        ("evictionrequests/status", "EvictionRequest", true),
        ("evictions", "Eviction", true),
        ("evictions/status", "Eviction", true),
    ] {
        assert!(names.contains(&want), "{want:?} in {names:?}");
    }
    let (ok, out, err) = Kubectl::new(&on)
        .run(&[
            "api-resources",
            "--api-group=lifecycle.k8s.io",
            "-o",
            "name",
        ])
        .await;
    assert!(ok, "{err}");
    assert!(out.contains("evictionrequests.lifecycle.k8s.io"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_refused_and_target_and_requester_are_fixed() {
    let sim = served().await;
    let uid = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
    let body = |spec: Value| {
        serde_json::to_vec(&json!({"apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": "r"}, "spec": spec})).unwrap()
    };
    for (spec, field) in [
        (
            json!({"requester": "a.example.io/drain", "intent": "Eviction"}),
            "spec.target",
        ),
        (
            json!({"target": {"pod": {"name": "p", "uid": "not-a-uid"}}, "requester": "a.example.io/drain", "intent": "Eviction"}),
            "spec.target.pod.uid",
        ),
        (
            json!({"target": {"pod": {"name": "p", "uid": uid}}, "requester": "drain", "intent": "Eviction"}),
            "spec.requester",
        ),
        (
            json!({"target": {"pod": {"name": "p", "uid": uid}}, "requester": "drain.k8s.io/x", "intent": "Eviction"}),
            "spec.requester",
        ),
        (
            json!({"target": {"pod": {"name": "p", "uid": uid}}, "requester": "a.example.io/drain", "intent": "Please"}),
            "spec.intent",
        ),
    ] {
        let (code, status) = raw(
            &sim,
            "POST",
            REQUESTS,
            "application/json",
            body(spec.clone()),
        )
        .await;
        assert_eq!(
            (code, status["reason"].as_str()),
            (422, Some("Invalid")),
            "{spec}: {status}"
        );
        assert_eq!(status["details"]["kind"], "evictionrequests", "{status}");
        assert!(
            status["details"]["causes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["field"] == field),
            "{field}: {status}"
        );
    }

    // A request for a pod that is not there is accepted, then failed by
    // the controller.
    let spec = json!({"target": {"pod": {"name": "p", "uid": uid}}, "requester": "a.example.io/drain", "intent": "Eviction"});
    let (code, created) = raw(&sim, "POST", REQUESTS, "application/json", body(spec)).await;
    assert_eq!(code, 201, "{created}");
    assert!(
        created["status"].as_object().is_none_or(|s| s.is_empty()),
        "status starts empty: {created}"
    );
    wait_for(
        &sim,
        "the missing pod fails the request",
        "EvictionRequest",
        "r",
        |s| condition(s, "Failed") == "True/EvictionInvalid",
    )
    .await;

    let patch = |p: Value| serde_json::to_vec(&p).unwrap();
    for change in [
        json!({"spec": {"requester": "b.example.io/drain"}}),
        json!({"spec": {"target": {"pod": {"name": "q"}}}}),
    ] {
        let (code, status) = raw(
            &sim,
            "PATCH",
            &format!("{REQUESTS}/r"),
            "application/merge-patch+json",
            patch(change.clone()),
        )
        .await;
        assert_eq!(code, 422, "{change}: {status}");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("field is immutable"),
            "{status}"
        );
    }
    let (code, _) = raw(
        &sim,
        "PATCH",
        &format!("{REQUESTS}/r"),
        "application/merge-patch+json",
        patch(json!({"spec": {"intent": "Withdrawn"}})),
    )
    .await;
    assert_eq!(code, 200, "the intent may change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_imperative_evictor_waits_for_the_budget() {
    let sim = served().await;
    let uid = running_pod(&sim, "web", json!({})).await;
    unmovable_budget(&sim, "web").await;
    request_eviction(&sim, "drain", "web", &uid).await;

    let eviction = "pod-1-web";
    wait_for(&sim, "the evictor is refused by the budget", "Eviction", eviction, |s| {
        s["targetResponders"] == json!([{"name": IMPERATIVE_EVICTOR, "priority": 100, "state": "Active"}])
            && s["responders"][0]["message"].as_str().is_some_and(|m| {
                m.starts_with("Could not evict a pod due to failing eviction requests, number of retries: ")
            })
    })
    .await;
    let ev = api(&sim, "Eviction").get(eviction).await.unwrap();
    let labels = ev.metadata.labels.unwrap();
    assert_eq!(labels["drain.example.io/drain"], "requester");
    assert_eq!(labels[IMPERATIVE_EVICTOR], "responder");
    let st = status(&sim, "EvictionRequest", "drain").await;
    assert_eq!(condition(&st, "Failed"), "False/AwaitingEviction", "{st}");
    assert_eq!(
        condition(&st, "TargetEvicted"),
        "False/AwaitingEviction",
        "{st}"
    );
    assert!(pod_exists(&sim, "web").await, "the budget holds the pod");

    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::default_namespaced(sim.client());
    let loosen = json!({"spec": {"maxUnavailable": 1}});
    budgets
        .patch("web", &PatchParams::default(), &Patch::Merge(&loosen))
        .await
        .unwrap();
    wait_for(
        &sim,
        "the pod is evicted once the budget allows it",
        "EvictionRequest",
        "drain",
        |s| {
            condition(s, "TargetEvicted") == "True/PodDeleted"
                && condition(s, "Failed") == "False/Succeeded"
        },
    )
    .await;
    assert!(!pod_exists(&sim, "web").await);

    // The requester collects its request; the Eviction goes with it.
    api(&sim, "EvictionRequest")
        .delete("drain", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &sim,
        "the Eviction is collected",
        "Eviction",
        eviction,
        Value::is_null,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_migration_reports_progress_then_its_pod_goes() {
    let sim = served().await;
    let uid = running_pod(&sim, "vm", migrating("3")).await;
    unmovable_budget(&sim, "vm").await;
    request_eviction(&sim, "drain", "vm", &uid).await;

    wait_for(
        &sim,
        "the migration is in progress",
        "Eviction",
        "pod-1-vm",
        in_progress,
    )
    .await;
    let ev = api(&sim, "Eviction").get("pod-1-vm").await.unwrap();
    assert_eq!(ev.metadata.labels.unwrap()[LIVE_MIGRATION], "responder");
    assert!(pod_exists(&sim, "vm").await);

    // The migration source pod goes although its budget allows nothing: the
    // responder knows better than the budget, as the KEP lets it.
    wait_for(
        &sim,
        "the migration evicted the pod",
        "EvictionRequest",
        "drain",
        |s| condition(s, "TargetEvicted") == "True/PodDeleted",
    )
    .await;
    let st = status(&sim, "Eviction", "pod-1-vm").await;
    assert_eq!(st["targetResponders"][0]["state"], "Completed", "{st}");
    assert!(st["responders"][0]["completionTime"].is_string(), "{st}");
    assert!(!pod_exists(&sim, "vm").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawal_cancels_an_unfinished_migration_and_the_pod_stays() {
    let sim = served().await;
    let uid = running_pod(&sim, "vm", migrating("600")).await;
    request_eviction(&sim, "drain", "vm", &uid).await;
    request_eviction(&sim, "deschedule", "vm", &uid).await;
    wait_for(
        &sim,
        "the migration is in progress",
        "Eviction",
        "pod-1-vm",
        in_progress,
    )
    .await;

    let requests = api(&sim, "EvictionRequest");
    let withdraw = json!({"spec": {"intent": "Withdrawn"}});
    requests
        .patch("drain", &PatchParams::default(), &Patch::Merge(&withdraw))
        .await
        .unwrap();
    wait_for(
        &sim,
        "one requester withdrew",
        "Eviction",
        "pod-1-vm",
        |s| {
            s["requesters"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["intent"] == "Withdrawn"))
        },
    )
    .await;
    assert!(
        in_progress(&status(&sim, "Eviction", "pod-1-vm").await),
        "another requester still wants it"
    );

    // The other requester deletes its request: that withdraws it too.
    requests
        .delete("deschedule", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &sim,
        "the eviction is canceled",
        "EvictionRequest",
        "drain",
        |s| condition(s, "Failed") == "True/CanceledDueToNoRequesters",
    )
    .await;
    let st = status(&sim, "Eviction", "pod-1-vm").await;
    assert_eq!(st["targetResponders"][0]["state"], "Canceled", "{st}");
    assert_eq!(
        st["targetResponders"][1]["state"], "Inactive",
        "the evictor never runs: {st}"
    );
    assert_eq!(condition(&st, "TargetEvicted"), "False/AwaitingEviction");
    assert!(pod_exists(&sim, "vm").await);

    requests
        .delete("drain", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &sim,
        "the Eviction is collected",
        "Eviction",
        "pod-1-vm",
        Value::is_null,
    )
    .await;
    assert!(pod_exists(&sim, "vm").await, "the pod stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_can_grant_eviction_requests() {
    let sim = served().await;
    let post = |path: &str, obj: Value| {
        let sim = &sim;
        let path = path.to_string();
        async move {
            let (code, body) = raw(
                sim,
                "POST",
                &path,
                "application/json",
                serde_json::to_vec(&obj).unwrap(),
            )
            .await;
            assert_eq!(code, 201, "{body}");
        }
    };
    post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "drainer"}}),
    )
    .await;
    post("/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", json!({
        "metadata": {"name": "request-evictions"},
        "rules": [{"apiGroups": ["lifecycle.k8s.io"], "resources": ["evictionrequests"], "verbs": ["create", "get"]}],
    }))
    .await;
    post("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", json!({
        "metadata": {"name": "drainer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "request-evictions"},
        "subjects": [{"kind": "ServiceAccount", "name": "drainer", "namespace": "default"}],
    }))
    .await;
    let token = sim.service_account_token("default", "drainer", None);
    let er = json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest", "metadata": {"name": "r"},
        "spec": {"target": {"pod": {"name": "p", "uid": "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"}}, "requester": "drainer.example.io/drain", "intent": "Eviction"},
    });
    let t = Some(token.as_str());
    let json = "application/json";
    let (code, body) = raw_as(
        &sim,
        t,
        "POST",
        REQUESTS,
        json,
        serde_json::to_vec(&er).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let one = format!("{REQUESTS}/r");
    let (code, _) = raw_as(&sim, t, "GET", &one, json, vec![]).await;
    assert_eq!(code, 200);
    let (code, body) = raw_as(&sim, t, "DELETE", &one, json, vec![]).await;
    assert_eq!(code, 403, "{body}");
    let evictions = "/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictions";
    let (code, body) = raw_as(&sim, t, "GET", evictions, json, vec![]).await;
    assert_eq!(code, 403, "{body}");
}
