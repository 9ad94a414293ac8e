//! A custom resource is checked against its CRD's schema on every write, as
//! the API server checks it: maintd's NodeMaintenance beyond any bound of
//! deploy/base/crd.yaml is refused with 422 Invalid in the API server's
//! words, whichever verb brings it, its status through the status
//! subresource too; one at the bounds is accepted; and an object a CRD
//! tightened since no longer admits can still be changed elsewhere.
//!
//! Each expected message is what Kubernetes 1.37.2's validation
//! (k8s.io/apiextensions-apiserver v0.37.2) answers for the same CRD and
//! object.

use crate::common;

use common::*;
use serde_json::{Value, json};

const NMS: &str = "/apis/maintd.io/v1alpha1/nodemaintenances";

/// What the API server adds to a refusal that kept it from running the
/// CRD's CEL rule (spec's "exactly one of nodeName and nodeSelector").
const RULES_NOT_CHECKED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// Several errors, as the API server joins them.
fn both(first: &str) -> String {
    format!("[{first}, {RULES_NOT_CHECKED}]")
}

fn nm(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
           "metadata": {"name": name}, "spec": spec})
}

/// node-a, to drain, with `extra` in the spec.
fn on_a(extra: Value) -> Value {
    let mut spec = json!({"nodeName": "node-a", "stage": "Drain"});
    json_patch::merge(&mut spec, &extra);
    spec
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

async fn with_crds() -> maintd_sim::SimCluster {
    let sim = sim().await;
    install_crds(&sim.client()).await;
    sim
}

/// (extra spec, what the API server says after `NodeMaintenance.maintd.io "x" is invalid: `)
fn beyond_the_bounds() -> Vec<(Value, String)> {
    let plan = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"podType": "Default", "podPriority": i}))
            .collect()
    };
    vec![
        (json!({"maxConcurrentDrains": 100_001}), "spec.maxConcurrentDrains: Invalid value: 100001: spec.maxConcurrentDrains in body should be less than or equal to 100000".into()),
        (json!({"maxConcurrentDrains": 0}), "spec.maxConcurrentDrains: Invalid value: 0: spec.maxConcurrentDrains in body should be greater than or equal to 1".into()),
        (json!({"stageTimeoutSeconds": 604_801}), "spec.stageTimeoutSeconds: Invalid value: 604801: spec.stageTimeoutSeconds in body should be less than or equal to 604800".into()),
        (json!({"cordonAhead": -1}), "spec.cordonAhead: Invalid value: -1: spec.cordonAhead in body should be greater than or equal to 0".into()),
        (json!({"waitForReboot": {"timeoutSeconds": 4}}), "spec.waitForReboot.timeoutSeconds: Invalid value: 4: spec.waitForReboot.timeoutSeconds in body should be greater than or equal to 5".into()),
        (json!({"reason": "x".repeat(1025)}), both("spec.reason: Too long: may not be more than 1024 bytes")),
        (json!({"nodeName": ""}), "spec.nodeName: Invalid value: \"\": spec.nodeName in body should be at least 1 chars long".into()),
        (json!({"nodeName": "n".repeat(254)}), both("spec.nodeName: Too long: may not be more than 253 bytes")),
        (json!({"stage": "Evacuate"}), both("spec.stage: Unsupported value: \"Evacuate\": supported values: \"Idle\", \"Cordon\", \"Drain\", \"Complete\"")),
        (json!({"waitForReboot": {"onTimeout": "Retry"}}), both("spec.waitForReboot.onTimeout: Unsupported value: \"Retry\": supported values: \"Hold\", \"Release\"")),
        (json!({"drainPlan": plan(1001)}), both("spec.drainPlan: Too many: 1001: must have at most 1000 items")),
        (json!({"drainPlan": [{"podType": "Deployment", "podPriority": 0}]}), both("spec.drainPlan[0].podType: Unsupported value: \"Deployment\": supported values: \"Default\", \"DaemonSet\", \"Static\"")),
        (json!({"drainPlan": [{"podType": "Default"}]}), both("spec.drainPlan[0].podPriority: Required value")),
        (json!({"nodeSelector": {"matchExpressions": [{"key": "a"}]}}), both("spec.nodeSelector.matchExpressions[0].operator: Required value")),
        (json!({"maxConcurrentDrains": "two"}), both("spec.maxConcurrentDrains: Invalid value: \"string\": spec.maxConcurrentDrains in body must be of type integer: \"string\"")),
        (json!({"planned": "yes"}), both("spec.planned: Invalid value: \"string\": spec.planned in body must be of type boolean: \"string\"")),
        // Beyond int32 (the field's format) as well as beyond the maximum.
        (json!({"maxConcurrentDrains": i64::MAX}), "[<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.maxConcurrentDrains, spec.maxConcurrentDrains: Invalid value: 9223372036854775807: spec.maxConcurrentDrains in body should be less than or equal to 100000]".into()),
    ]
}

#[tokio::test]
async fn a_node_maintenance_beyond_any_bound_is_refused_in_the_api_servers_words() {
    let sim = with_crds().await;
    for (extra, words) in beyond_the_bounds() {
        let (code, status) = send(
            &sim,
            "POST",
            NMS,
            "application/json",
            &nm("x", on_a(extra.clone())),
        )
        .await;
        let what = extra.to_string().chars().take(80).collect::<String>();
        assert_eq!(
            (code, status["reason"].as_str()),
            (422, Some("Invalid")),
            "{what}: {status}"
        );
        assert_eq!(
            status["message"].as_str().unwrap_or_default(),
            format!("NodeMaintenance.maintd.io \"x\" is invalid: {words}"),
            "{what}"
        );
        let (code, _) = send(&sim, "GET", &format!("{NMS}/x"), "", &Value::Null).await;
        assert_eq!(code, 404, "{what}: nothing was stored");
    }
    // Without a spec at all.
    let (code, status) = send(&sim, "POST", NMS, "application/json", &json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance", "metadata": {"name": "x"}})).await;
    assert_eq!(
        (code, status["message"].as_str()),
        (
            422,
            Some(
                format!(
                    "NodeMaintenance.maintd.io \"x\" is invalid: {}",
                    both("spec: Required value")
                )
                .as_str()
            )
        )
    );
}

/// What a client reads besides the message: the kind and one cause per
/// field, each with its own reason, and the note that the CRD's CEL rule
/// was not run.
#[tokio::test]
async fn the_status_names_the_kind_and_gives_a_cause_per_field() {
    let sim = with_crds().await;
    let bad =
        on_a(json!({"maxConcurrentDrains": 0, "reason": "x".repeat(1025), "stage": "Evacuate"}));
    let (_, status) = send(&sim, "POST", NMS, "application/json", &nm("x", bad)).await;
    assert_eq!(status["code"], 422);
    let details = &status["details"];
    assert_eq!(
        (
            details["group"].as_str(),
            details["kind"].as_str(),
            details["name"].as_str()
        ),
        (Some("maintd.io"), Some("NodeMaintenance"), Some("x"))
    );
    let causes: Vec<(&str, &str, &str)> = details["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap(),
                c["field"].as_str().unwrap(),
                c["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        causes,
        [
            (
                "FieldValueInvalid",
                "spec.maxConcurrentDrains",
                "Invalid value: 0: spec.maxConcurrentDrains in body should be greater than or equal to 1"
            ),
            (
                "FieldValueTooLong",
                "spec.reason",
                "Too long: may not be more than 1024 bytes"
            ),
            (
                "FieldValueNotSupported",
                "spec.stage",
                "Unsupported value: \"Evacuate\": supported values: \"Idle\", \"Cordon\", \"Drain\", \"Complete\""
            ),
            (
                "FieldValueInvalid",
                "<nil>",
                "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
            ),
        ]
    );
}

/// PUT, each kind of patch and the status subresource are checked as a
/// create is; a status write is named from the status.
#[tokio::test]
async fn every_verb_and_the_status_subresource_are_checked() {
    let sim = with_crds().await;
    let (code, created) = send(
        &sim,
        "POST",
        NMS,
        "application/json",
        &nm("x", on_a(json!({}))),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let too_many = "NodeMaintenance.maintd.io \"x\" is invalid: spec.maxConcurrentDrains: Invalid value: 100001: spec.maxConcurrentDrains in body should be less than or equal to 100000";
    let mut replaced = created.clone();
    replaced["spec"]["maxConcurrentDrains"] = json!(100_001);
    let apply = json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance", "metadata": {"name": "x"}, "spec": {"maxConcurrentDrains": 100_001}});
    for (method, path, ct, body) in [
        ("PUT", format!("{NMS}/x"), "application/json", replaced),
        (
            "PATCH",
            format!("{NMS}/x"),
            "application/merge-patch+json",
            json!({"spec": {"maxConcurrentDrains": 100_001}}),
        ),
        (
            "PATCH",
            format!("{NMS}/x"),
            "application/json-patch+json",
            json!([{"op": "add", "path": "/spec/maxConcurrentDrains", "value": 100_001}]),
        ),
        (
            "PATCH",
            format!("{NMS}/x?fieldManager=ops&force=true"),
            "application/apply-patch+yaml",
            apply,
        ),
    ] {
        let (code, status) = send(&sim, method, &path, ct, &body).await;
        assert_eq!(
            (code, status["message"].as_str()),
            (422, Some(too_many)),
            "{method} {ct}"
        );
    }
    let status_of = |status: Value| json!({"status": status});
    for (status, words) in [
        (
            json!({"selectedNodes": "three"}),
            both(
                "status.selectedNodes: Invalid value: \"string\": selectedNodes in body must be of type integer: \"string\"",
            ),
        ),
        (
            json!({"attention": (0..51).map(|i| json!({"nodeName": format!("n{i}"), "phase": "Blocked"})).collect::<Vec<_>>()}),
            both("status.attention: Too many: 51: must have at most 50 items"),
        ),
        (
            json!({"conditions": [{"type": "Valid", "status": "True"}]}),
            format!(
                "[status.conditions[0].lastTransitionTime: Required value, status.conditions[0].message: Required value, status.conditions[0].reason: Required value, {RULES_NOT_CHECKED}]"
            ),
        ),
    ] {
        let (code, st) = send(
            &sim,
            "PATCH",
            &format!("{NMS}/x/status"),
            "application/merge-patch+json",
            &status_of(status),
        )
        .await;
        assert_eq!(
            (code, st["message"].as_str().unwrap_or_default()),
            (
                422,
                format!("NodeMaintenance.maintd.io \"x\" is invalid: {words}").as_str()
            )
        );
    }
    let (code, st) = send(
        &sim,
        "PATCH",
        &format!("{NMS}/x/status"),
        "application/merge-patch+json",
        &status_of(json!({"selectedNodes": 3})),
    )
    .await;
    assert_eq!(code, 200, "{st}");
}

/// The largest and smallest values each bound allows are accepted, and an
/// object written under a looser CRD can still be changed where it fits:
/// only what a write changes has to fit the CRD of today (ratcheting).
#[tokio::test]
async fn objects_at_the_bounds_are_accepted_and_old_values_ratchet() {
    let sim = with_crds().await;
    let at_the_bounds = on_a(json!({
        "maxConcurrentDrains": maintd::api::MAX_CONCURRENT_DRAINS,
        "stageTimeoutSeconds": maintd::api::MAX_STAGE_TIMEOUT_SECONDS,
        "cordonAhead": 1000,
        "reason": "x".repeat(1024),
        "nodeName": "n".repeat(253),
        "waitForReboot": {"timeoutSeconds": 5, "onTimeout": "Release"},
        "drainPlan": (0..1000).map(|i| json!({"podType": "Default", "podPriority": i})).collect::<Vec<_>>(),
    }));
    let (code, st) = send(
        &sim,
        "POST",
        NMS,
        "application/json",
        &nm("edges", at_the_bounds),
    )
    .await;
    assert_eq!(code, 201, "{st}");
    let (code, st) = send(&sim, "POST", NMS, "application/json", &nm("least", on_a(json!({"maxConcurrentDrains": 1, "stageTimeoutSeconds": 1, "cordonAhead": 0, "nodeName": "n"})))).await;
    assert_eq!(code, 201, "{st}");

    // Written when the CRD had no lower bound, as if by an older maintd.
    let crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodemaintenances.maintd.io";
    let (_, old) = send(&sim, "GET", crd, "", &Value::Null).await;
    let mut loose = old.clone();
    loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["maxConcurrentDrains"]
        .as_object_mut()
        .unwrap()
        .remove("minimum");
    let (code, st) = send(&sim, "PUT", crd, "application/json", &loose).await;
    assert_eq!(code, 200, "{st}");
    let (code, st) = send(
        &sim,
        "POST",
        NMS,
        "application/json",
        &nm("old", on_a(json!({"maxConcurrentDrains": 0}))),
    )
    .await;
    assert_eq!(code, 201, "{st}");
    // Bounded again, as today's maintd installs it.
    let (_, loosened) = send(&sim, "GET", crd, "", &Value::Null).await;
    let mut tight = old.clone();
    tight["metadata"]["resourceVersion"] = loosened["metadata"]["resourceVersion"].clone();
    let (code, st) = send(&sim, "PUT", crd, "application/json", &tight).await;
    assert_eq!(code, 200, "{st}");

    let patch = |spec: Value| json!({"spec": spec});
    let (code, st) = send(
        &sim,
        "PATCH",
        &format!("{NMS}/old"),
        "application/merge-patch+json",
        &patch(json!({"stage": "Cordon"})),
    )
    .await;
    assert_eq!(code, 200, "the old value, left alone, passes: {st}");
    let (code, st) = send(
        &sim,
        "PATCH",
        &format!("{NMS}/old"),
        "application/merge-patch+json",
        &patch(json!({"maxConcurrentDrains": -1})),
    )
    .await;
    assert_eq!(
        (code, st["message"].as_str()),
        (
            422,
            Some(
                "NodeMaintenance.maintd.io \"old\" is invalid: spec.maxConcurrentDrains: Invalid value: -1: spec.maxConcurrentDrains in body should be greater than or equal to 1"
            )
        )
    );
}
