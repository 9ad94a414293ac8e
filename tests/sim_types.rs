//! Built-in objects are decoded into their types as the API server decodes
//! them: a field of the wrong JSON type is refused with the API server's
//! code and words, whichever verb brings it; unknown fields are not.

use crate::common;

use common::*;
use serde_json::{Value, json};

fn pod(name: &str, spec_extra: Value) -> Value {
    let mut p = pod_json("default", name, "n1", json!({}));
    json_patch::merge(&mut p["spec"], &spec_extra);
    p
}

async fn send(
    sim: &maintd_sim::SimCluster,
    method: &str,
    path: &str,
    ct: &str,
    body: &Value,
) -> (u16, Value) {
    raw(sim, method, path, ct, serde_json::to_vec(body).unwrap()).await
}

#[tokio::test]
async fn a_pod_with_a_non_integer_priority_is_refused_with_the_api_servers_message() {
    let sim = sim().await;
    create_node(&sim.client(), "n1").await;
    let (code, status) = send(
        &sim,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        &pod("high", json!({"priority": "high"})),
    )
    .await;
    assert_eq!(
        (code, &status["reason"]),
        (400, &json!("BadRequest")),
        "{status}"
    );
    assert_eq!(status["code"], 400);
    assert_eq!(
        status["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field PodSpec.spec.priority of type int32"
    );
    // Nothing was stored.
    let (code, _) = send(
        &sim,
        "GET",
        "/api/v1/namespaces/default/pods/high",
        "",
        &Value::Null,
    )
    .await;
    assert_eq!(code, 404);

    // A list where an object list belongs, through PUT: the same answer.
    let (code, created) = send(
        &sim,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        &pod("p", json!({})),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let mut bad = created.clone();
    bad["metadata"]["ownerReferences"] = json!("not-a-list");
    let (code, status) = send(
        &sim,
        "PUT",
        "/api/v1/namespaces/default/pods/p",
        "application/json",
        &bad,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field ObjectMeta.metadata.ownerReferences of type []v1.OwnerReference"
    );
}

#[tokio::test]
async fn a_patch_that_breaks_the_type_is_refused_on_the_field_patch() {
    let sim = sim().await;
    create_node(&sim.client(), "n1").await;
    let (code, _) = send(
        &sim,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        &pod("p", json!({})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, status) = send(
        &sim,
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        "application/merge-patch+json",
        &json!({"spec": {"priority": "high"}}),
    )
    .await;
    assert_eq!(
        (code, &status["reason"]),
        (422, &json!("Invalid")),
        "{status}"
    );
    let cause = &status["details"]["causes"][0];
    assert_eq!(cause["field"], "patch");
    let message = cause["message"].as_str().unwrap();
    assert!(message.starts_with("Invalid value: \"{"), "{message}");
    assert!(
        message.ends_with("\": json: cannot unmarshal string into Go struct field PodSpec.spec.priority of type int32"),
        "{message}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with(" \"\" is invalid: patch: Invalid value: "),
        "{status}"
    );

    // Server-side apply types its patch first; that failure is a 500.
    let (code, status) = send(
        &sim,
        "PATCH",
        "/api/v1/namespaces/default/pods/p?fieldManager=test",
        "application/apply-patch+yaml",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"priority": "high"}}),
    )
    .await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status["message"],
        "failed to create typed patch object (default/p; /v1, Kind=Pod): .spec.priority: expected numeric (int or float), got string"
    );
}

#[tokio::test]
async fn unknown_fields_and_numbers_for_quantities_are_accepted() {
    let sim = sim().await;
    create_node(&sim.client(), "n1").await;
    let mut p = pod(
        "p",
        json!({"containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": 1}}}]}),
    );
    p["spec"]["futureField"] = json!({"x": 1});
    let (code, created) = send(
        &sim,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        &p,
    )
    .await;
    assert_eq!(code, 201, "{created}");
}
