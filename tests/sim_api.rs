//! The simulated apiserver, driven by kube-rs as the agent drives a real
//! one: selectors, watches, every patch type, server-side apply with two
//! managers, conflicts, evictions with PodDisruptionBudgets, and bad input.

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
    Preconditions, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use maintd_sim::SimConfig;
use serde_json::{Value, json};

async fn next_event<K>(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("a watch event arrives")
        .expect("the watch is still open")
        .expect("the event decodes")
}

fn name_of(ev: &WatchEvent<Pod>) -> (String, String) {
    match ev {
        WatchEvent::Added(p) => ("ADDED".into(), p.metadata.name.clone().unwrap()),
        WatchEvent::Modified(p) => ("MODIFIED".into(), p.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(p) => ("DELETED".into(), p.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(_) => ("BOOKMARK".into(), String::new()),
        WatchEvent::Error(e) => ("ERROR".into(), e.code.to_string()),
    }
}

#[tokio::test]
async fn field_selected_list_and_watch_see_only_their_node() {
    let sim = sim().await;
    let c = sim.client();
    create_node(&c, "n1").await;
    create_node(&c, "n2").await;
    create_pod(&c, "default", "a1", "n1", json!({})).await;
    create_pod(&c, "default", "b1", "n2", json!({})).await;
    let pods: Api<Pod> = Api::all(c.clone());
    let list = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a1"]);

    let rv = list.metadata.resource_version.unwrap();
    let wp = WatchParams::default().fields("spec.nodeName=n1");
    let mut stream = pods.watch(&wp, &rv).await.unwrap().boxed();
    create_pod(&c, "default", "b2", "n2", json!({})).await;
    create_pod(&c, "default", "a2", "n1", json!({})).await;
    let first = next_event(&mut stream).await;
    assert_eq!(
        name_of(&first),
        ("ADDED".into(), "a2".into()),
        "the n2 pod is not seen"
    );

    let labelled = pods
        .list(&ListParams::default().labels("missing"))
        .await
        .unwrap();
    assert!(labelled.items.is_empty());
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_and_reports_410_when_too_old() {
    let sim = sim_with(SimConfig {
        history: 30,
        ..SimConfig::default()
    })
    .await;
    let c = sim.client();
    create_node(&c, "n1").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let p = create_pod(&c, "default", "p", "n1", json!({})).await;
    let rv0 = p.metadata.resource_version.clone().unwrap();
    for i in 0..3 {
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"step": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    // Resuming from rv0 replays the three label changes, in order (the
    // simulated kubelet's status updates come in between).
    let mut stream = pods
        .watch(&WatchParams::default(), &rv0)
        .await
        .unwrap()
        .boxed();
    let mut steps: Vec<String> = Vec::new();
    while steps.len() < 3 {
        match next_event(&mut stream).await {
            WatchEvent::Modified(p) => {
                let step = p.metadata.labels.unwrap_or_default().get("step").cloned();
                if let Some(step) = step
                    && steps.last() != Some(&step)
                {
                    steps.push(step);
                }
            }
            other => panic!("expected MODIFIED, got {other:?}"),
        }
    }
    assert_eq!(steps, ["0", "1", "2"]);
    drop(stream);
    for i in 0..40 {
        create_pod(&c, "default", &format!("filler-{i}"), "n1", json!({})).await;
    }
    let mut stream = pods
        .watch(&WatchParams::default(), &rv0)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut stream).await {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_sends_bookmarks_and_honours_its_timeout() {
    let sim = sim_with(SimConfig {
        bookmark_interval: Duration::from_millis(100),
        ..SimConfig::default()
    })
    .await;
    let c = sim.client();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut stream).await {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // The server closes the watch when its timeout passes.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while stream.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the watch ends after timeoutSeconds");
}

#[tokio::test]
async fn every_patch_type_applies() {
    let sim = sim().await;
    let c = sim.client();
    create_node(&c, "n1").await;
    let nodes: Api<Node> = Api::all(c.clone());
    // JSON merge patch.
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"zone": "a"}}})),
        )
        .await
        .unwrap();
    // Strategic merge patch, as `kubectl taint` sends it: the whole list
    // (taints are atomic), and null for the last one removed.
    for taints in [
        json!([{"key": "a", "value": "1", "effect": "NoSchedule"}]),
        json!([{"key": "a", "value": "1", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]),
    ] {
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"taints": taints}})),
            )
            .await
            .unwrap();
    }
    let n = nodes.get("n1").await.unwrap();
    let keys: Vec<_> = n
        .spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(keys, ["a", "b"]);
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}})),
        )
        .await
        .unwrap();
    // A merge-key directive in an atomic list is refused, as by the apiserver.
    let directive = json!({"spec": {"taints": [{"$patch": "delete", "key": "b"}]}});
    let err = nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(directive))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    // JSON patch, with a test that holds and one that fails (422).
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/zone", "value": "a"},
        {"op": "replace", "path": "/metadata/labels/zone", "value": "b"},
    ]))
    .unwrap();
    nodes
        .patch("n1", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    let failing: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/metadata/labels/zone", "value": "zzz"}]),
    )
    .unwrap();
    let err = nodes
        .patch("n1", &PatchParams::default(), &Patch::<()>::Json(failing))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    // Server-side apply.
    let applied = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {"owner": "test"}}});
    nodes
        .patch("n1", &PatchParams::apply("tester"), &Patch::Apply(applied))
        .await
        .unwrap();

    let n = nodes.get("n1").await.unwrap();
    let labels = n.metadata.labels.unwrap();
    assert_eq!(labels["zone"], "b");
    assert_eq!(n.metadata.annotations.unwrap()["owner"], "test");
    let keys: Vec<_> = n
        .spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(keys, ["b"]);
    let managers: Vec<_> = n
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.contains(&"tester".to_string()), "{managers:?}");
}

#[tokio::test]
async fn a_patch_with_a_stale_resource_version_conflicts() {
    let sim = sim().await;
    let c = sim.client();
    create_node(&c, "n1").await;
    let nodes: Api<Node> = Api::all(c.clone());
    let old = nodes.get("n1").await.unwrap();
    let stale_rv = old.metadata.resource_version.clone().unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    let guarded = json!({"metadata": {"resourceVersion": stale_rv}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
    let err = nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(guarded))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_update_with_a_stale_resource_version_gets_409() {
    let sim = sim().await;
    let c = sim.client();
    create_node(&c, "n1").await;
    let nodes: Api<Node> = Api::all(c.clone());
    let mut first = nodes.get("n1").await.unwrap();
    let mut second = first.clone();
    first
        .metadata
        .labels
        .get_or_insert_default()
        .insert("by".into(), "first".into());
    nodes
        .replace("n1", &PostParams::default(), &first)
        .await
        .unwrap();
    second
        .metadata
        .labels
        .get_or_insert_default()
        .insert("by".into(), "second".into());
    let err = nodes
        .replace("n1", &PostParams::default(), &second)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert!(
                s.message.contains("the object has been modified"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 409, got {other:?}"),
    }
    assert_eq!(
        nodes.get("n1").await.unwrap().metadata.labels.unwrap()["by"],
        "first"
    );
}

#[tokio::test]
async fn delete_honours_preconditions() {
    let sim = sim().await;
    let c = sim.client();
    create_node(&c, "n1").await;
    let nodes: Api<Node> = Api::all(c.clone());
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let err = nodes.delete("n1", &dp).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    let err = nodes.get("n1").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"));
}

fn test_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.io"},
        "spec": {
            "group": "example.io", "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Stage", "type": "string", "jsonPath": ".spec.stage"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"stage": {"type": "string"}}},
                    "status": {"type": "object", "properties": {"nodes": {
                        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["nodeName"],
                        "items": {"type": "object", "properties": {"nodeName": {"type": "string"}, "phase": {"type": "string"}}},
                    }}},
                }}},
            }],
        },
    })
}

async fn widgets(sim: &maintd_sim::SimCluster) -> Api<DynamicObject> {
    let crds: Api<DynamicObject> = Api::all_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(test_crd()).unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    Api::all_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.io", "v1", "Widget"),
            "widgets",
        ),
    )
}

#[tokio::test]
async fn server_side_apply_by_two_managers_keeps_both_list_entries() {
    let sim = sim().await;
    let api = widgets(&sim).await;
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"stage": "Drain"}})).unwrap();
    api.create(&PostParams::default(), &w).await.unwrap();
    for node in ["a", "b"] {
        let status = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"nodes": [{"nodeName": node, "phase": "Draining"}]}});
        api.patch_status(
            "w",
            &PatchParams::apply(&format!("maintd/{node}")).force(),
            &Patch::Apply(status),
        )
        .await
        .unwrap();
    }
    // Manager a moves on; b's entry must stay as it was.
    let status = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"nodes": [{"nodeName": "a", "phase": "Drained"}]}});
    api.patch_status(
        "w",
        &PatchParams::apply("maintd/a").force(),
        &Patch::Apply(status),
    )
    .await
    .unwrap();
    let w = api.get("w").await.unwrap();
    let nodes = &w.data["status"]["nodes"];
    let phases: Vec<(String, String)> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["nodeName"].as_str().unwrap().into(),
                n["phase"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(phases.len(), 2, "{nodes}");
    assert!(phases.contains(&("a".into(), "Drained".into())));
    assert!(phases.contains(&("b".into(), "Draining".into())));
    assert_eq!(
        w.data["spec"]["stage"], "Drain",
        "a status apply leaves spec alone"
    );
    let managers: Vec<_> = w
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"maintd/a".to_string()) && managers.contains(&"maintd/b".to_string()),
        "{managers:?}"
    );
}

#[tokio::test]
async fn custom_resources_print_their_columns_in_tables() {
    let sim = sim().await;
    let api = widgets(&sim).await;
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"stage": "Cordon"}})).unwrap();
    api.create(&PostParams::default(), &w).await.unwrap();
    let req = http::Request::get("/apis/example.io/v1/widgets")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: Value = sim.client().request(req).await.unwrap();
    assert_eq!(table["kind"], "Table");
    let cols: Vec<_> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(cols, ["Name", "Stage"]);
    assert_eq!(table["rows"][0]["cells"], json!(["w", "Cordon"]));
}

async fn ready_pod(c: &kube::Client, name: &str, labels: Value) {
    create_pod(c, "default", name, "n1", labels).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

async fn pdb(c: &kube::Client, name: &str, spec: Value) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    api.create(&PostParams::default(), &pdb).await.unwrap();
}

#[tokio::test]
async fn evictions_answer_201_429_and_500_like_the_apiserver() {
    let sim = sim().await;
    let c = sim.client_with(false);
    create_node(&c, "n1").await;
    for i in 0..2 {
        ready_pod(&c, &format!("web-{i}"), json!({"app": "web"})).await;
    }
    ready_pod(&c, "db-0", json!({"app": "db"})).await;
    ready_pod(&c, "free", json!({"app": "free"})).await;
    pdb(
        &c,
        "web-pdb",
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
    )
    .await;
    pdb(
        &c,
        "db-a",
        json!({"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "db"}}}),
    )
    .await;
    pdb(
        &c,
        "db-b",
        json!({"minAvailable": 0, "selector": {"matchLabels": {"app": "db"}}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    // Evictions are decided from a budget's status: wait for the disruption
    // controller to have processed the new budget, as a client on a real
    // cluster would get 429 "still being processed" until then.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    eventually("the disruption controller has processed web-pdb", || {
        let pdbs = pdbs.clone();
        async move {
            pdbs.get("web-pdb")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.observed_generation == Some(1))
        }
    })
    .await;

    pods.evict("free", &EvictParams::default())
        .await
        .expect("no budget: 201");
    let evicted = pods.get_opt("free").await.unwrap();
    assert!(
        evicted.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the evicted pod is going"
    );

    match pods
        .evict("web-0", &EvictParams::default())
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 429);
            assert_eq!(s.reason, "TooManyRequests");
            assert_eq!(
                s.message,
                "Cannot evict pod as it would violate the pod's disruption budget."
            );
            let details = s.details.expect("details");
            assert_eq!(details.causes[0].reason, "DisruptionBudget");
            assert_eq!(
                details.causes[0].message,
                "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
            );
        }
        other => panic!("expected 429, got {other:?}"),
    }
    match pods
        .evict("db-0", &EvictParams::default())
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 500);
            assert!(
                s.message.contains("more than one PodDisruptionBudget"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 500, got {other:?}"),
    }
    let err = pods
        .evict("nope", &EvictParams::default())
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404));
    // The audit log saw every eviction with its code.
    let codes: Vec<(String, u16)> = sim
        .state
        .audit
        .entries()
        .into_iter()
        .filter(|e| e.verb == "evict")
        .map(|e| (e.name, e.code))
        .collect();
    assert_eq!(
        codes,
        [
            ("free".into(), 201),
            ("web-0".into(), 429),
            ("db-0".into(), 500),
            ("nope".into(), 404)
        ]
    );
}

#[tokio::test]
async fn lists_page_with_limit_and_continue() {
    let sim = sim().await;
    let c = sim.client();
    create_node(&c, "n1").await;
    for i in 0..5 {
        create_pod(&c, "default", &format!("p{i}"), "n1", json!({})).await;
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(2);
    loop {
        let page = pods.list(&lp).await.unwrap();
        seen.extend(page.items.iter().map(|p| p.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
    // kube-rs's own paging stream reaches the same result.
    let all: Vec<Pod> = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 5);
}

/// A protobuf body: the `k8s\0` magic and a runtime.Unknown with only the
/// type.
fn protobuf_envelope(api_version: &str, kind: &str) -> Vec<u8> {
    let mut type_meta = vec![0x0a, api_version.len() as u8];
    type_meta.extend(api_version.as_bytes());
    type_meta.extend([0x12, kind.len() as u8]);
    type_meta.extend(kind.as_bytes());
    let mut out = b"k8s\0\x0a".to_vec();
    out.push(type_meta.len() as u8);
    out.extend(type_meta);
    out
}

#[tokio::test]
async fn bad_input_gets_status_errors_and_the_server_keeps_serving() {
    let sim = sim_with(SimConfig {
        max_body: 64 * 1024,
        ..SimConfig::default()
    })
    .await;
    let cases: Vec<(&str, &str, &str, Vec<u8>, u16)> = vec![
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            b"{not json".to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            b"[1,2,3]".to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/yaml",
            b"a: [b".to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            vec![b' '; 100 * 1024],
            413,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"metadata":{"name":"UPPER"},"spec":{"containers":[{"name":"c"}]}}"#.to_vec(),
            422,
        ),
        (
            "POST",
            "/api/v1/namespaces/nowhere/pods",
            "application/json",
            br#"{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}"#.to_vec(),
            404,
        ),
        ("GET", "/api/v1/foos", "", vec![], 404),
        ("GET", "/apis/nope.io/v1/things", "", vec![], 404),
        (
            "GET",
            "/api/v1/namespaces/default/pods/x/y/z/w",
            "",
            vec![],
            404,
        ),
        ("GET", "/%%%/..", "", vec![], 404),
        ("GET", "/api/v1/pods?labelSelector=a+in+(", "", vec![], 400),
        (
            "GET",
            "/api/v1/pods?fieldSelector=spec.bogus%3D1",
            "",
            vec![],
            400,
        ),
        ("GET", "/api/v1/pods?limit=abc", "", vec![], 400),
        ("GET", "/api/v1/pods?continue=zz", "", vec![], 400),
        (
            "GET",
            "/api/v1/pods?watch=1&resourceVersion=abc",
            "",
            vec![],
            400,
        ),
        (
            "GET",
            "/api/v1/pods?watch=1&timeoutSeconds=-x",
            "",
            vec![],
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default",
            "application/merge-patch+json",
            b"{{".to_vec(),
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default",
            "text/plain",
            b"{}".to_vec(),
            415,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default?fieldManager=x",
            "application/apply-patch+yaml",
            b"- not: an object".to_vec(),
            400,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default",
            "application/json-patch+json",
            br#"{"op":"add"}"#.to_vec(),
            400,
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods/missing",
            "",
            vec![],
            404,
        ),
        (
            "DELETE",
            "/api/v1/namespaces/kube-system",
            "application/json",
            b"{\"gracePeriodSeconds\":\"soon\"}".to_vec(),
            400,
        ),
        (
            "PUT",
            "/api/v1/namespaces/default",
            "application/json",
            br#"{"metadata":{"name":"other"}}"#.to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods/missing/eviction",
            "application/json",
            b"\"evict\"".to_vec(),
            400,
        ),
        ("POST", "/version", "application/json", b"{}".to_vec(), 405),
        // Protobuf: not the Kubernetes envelope, a truncated one, and a
        // kind the simulator has no protobuf layout for.
        (
            "POST",
            "/api/v1/namespaces",
            "application/vnd.kubernetes.protobuf",
            br#"{"kind":"Namespace"}"#.to_vec(),
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces",
            "application/vnd.kubernetes.protobuf",
            b"k8s\0\x0a\x05\x0a".to_vec(),
            400,
        ),
        (
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/vnd.kubernetes.protobuf",
            protobuf_envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            415,
        ),
    ];
    for (method, path, ct, body, want) in cases {
        let (code, status) = raw(&sim, method, path, ct, body).await;
        assert_eq!(code, want, "{method} {path}: {status}");
        if code != 405 || status.is_object() {
            assert_eq!(status["kind"], "Status", "{method} {path}: {status}");
            assert_eq!(status["code"], want, "{method} {path}");
        }
    }
    let (code, version) = raw(&sim, "GET", "/version", "", vec![]).await;
    assert_eq!(code, 200);
    assert_eq!(version["major"], "1");
}
