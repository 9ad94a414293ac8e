//! Server-side apply and Update ownership, on the shape maintd uses: many
//! agents, one NodeMaintenance, one `status.nodes[nodeName=X]` entry each.

use serde_json::{Value, json};

use crate::patch::{ListSchema, PatchError, apply, record_update};

pub(super) const API: &str = "maintd.io/v1alpha1";
pub(super) const T0: &str = "2025-01-01T00:00:00Z";
pub(super) const T1: &str = "2025-01-01T00:01:00Z";
pub(super) const T2: &str = "2025-01-01T00:02:00Z";

pub(super) fn schema() -> ListSchema {
    ListSchema::from_openapi_v3(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "stages": {"type": "array", "items": {"type": "string"}},
        }},
        "status": {"type": "object", "properties": {
            "nodes": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["nodeName"], "items": {"type": "object"}},
        }},
    }}))
}

/// A NodeMaintenance as the store holds it after `kubectl create`.
pub(super) fn created() -> Value {
    let mut obj = json!({
        "apiVersion": API, "kind": "NodeMaintenance",
        "metadata": {"name": "m", "uid": "u-1", "resourceVersion": "1", "creationTimestamp": T0},
        "spec": {"nodeSelector": {"pool": "a"}},
    });
    record_update(
        None,
        &mut obj,
        "kubectl-create",
        "Update",
        None,
        &schema(),
        T0,
    );
    obj
}

pub(super) fn body(rest: Value) -> Value {
    let mut obj = json!({"apiVersion": API, "kind": "NodeMaintenance", "metadata": {"name": "m"}});
    if let (Value::Object(obj), Value::Object(rest)) = (&mut obj, rest) {
        obj.extend(rest);
    }
    obj
}

pub(super) fn node_status(name: &str, fields: Value) -> Value {
    let mut entry = json!({"nodeName": name});
    if let (Value::Object(entry), Value::Object(fields)) = (&mut entry, fields) {
        entry.extend(fields);
    }
    body(json!({"status": {"nodes": [entry]}}))
}

/// An agent's status apply: manager `maintd/<node>`, status subresource.
pub(super) fn agent(live: &Value, node: &str, fields: Value, now: &str) -> Value {
    let manager = format!("maintd/{node}");
    apply(
        Some(live),
        &node_status(node, fields),
        &manager,
        true,
        Some("status"),
        &schema(),
        now,
    )
    .unwrap()
}

pub(super) fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

pub(super) fn fields(obj: &Value, manager: &str) -> Value {
    entry(obj, manager).map_or(Value::Null, |e| e["fieldsV1"].clone())
}

pub(super) fn main_apply(
    live: &Value,
    manager: &str,
    force: bool,
    rest: Value,
) -> Result<Value, PatchError> {
    apply(Some(live), &body(rest), manager, force, None, &schema(), T1)
}

#[test]
fn two_agents_own_their_own_status_entries() {
    let obj = agent(&created(), "a", json!({"phase": "Draining"}), T1);
    let obj = agent(&obj, "b", json!({"phase": "Pending"}), T2);
    assert_eq!(
        obj["status"]["nodes"],
        json!([
            {"nodeName": "a", "phase": "Draining"},
            {"nodeName": "b", "phase": "Pending"},
        ])
    );
    assert_eq!(
        entry(&obj, "maintd/a").unwrap(),
        &json!({
            "manager": "maintd/a", "operation": "Apply", "apiVersion": API, "time": T1,
            "fieldsType": "FieldsV1", "subresource": "status",
            "fieldsV1": {"f:status": {"f:nodes": {"k:{\"nodeName\":\"a\"}": {".": {}, "f:nodeName": {}, "f:phase": {}}}}},
        })
    );
    assert_eq!(
        fields(&obj, "maintd/b"),
        json!(
            {"f:status": {"f:nodes": {"k:{\"nodeName\":\"b\"}": {".": {}, "f:nodeName": {}, "f:phase": {}}}}}
        )
    );
    // The creator still owns the spec, and nothing else.
    assert_eq!(
        fields(&obj, "kubectl-create"),
        json!({"f:spec": {"f:nodeSelector": {"f:pool": {}}}})
    );

    // a moves on; b's entry and ownership are untouched.
    let obj = agent(&obj, "a", json!({"phase": "Drained"}), T2);
    assert_eq!(
        obj["status"]["nodes"],
        json!([
            {"nodeName": "a", "phase": "Drained"},
            {"nodeName": "b", "phase": "Pending"},
        ])
    );
    assert_eq!(entry(&obj, "maintd/b").unwrap()["time"], T2);
    assert_eq!(obj["metadata"]["uid"], "u-1");
    assert_eq!(obj["spec"], json!({"nodeSelector": {"pool": "a"}}));
}

#[test]
fn a_field_the_manager_stops_applying_is_removed() {
    let obj = agent(
        &created(),
        "a",
        json!({"phase": "Draining", "message": "evicting 3 pods"}),
        T1,
    );
    let obj = agent(&obj, "b", json!({"phase": "Pending"}), T1);
    let obj = agent(&obj, "a", json!({"phase": "Drained"}), T2);
    assert_eq!(
        obj["status"]["nodes"][0],
        json!({"nodeName": "a", "phase": "Drained"})
    );
    // An apply without the entry removes the entry, and only it.
    let empty = body(json!({}));
    let obj = apply(
        Some(&obj),
        &empty,
        "maintd/a",
        true,
        Some("status"),
        &schema(),
        T2,
    )
    .unwrap();
    assert_eq!(
        obj["status"]["nodes"],
        json!([{"nodeName": "b", "phase": "Pending"}])
    );
    assert_eq!(entry(&obj, "maintd/a"), None);
}

#[test]
fn the_same_value_is_shared_not_a_conflict() {
    let obj = main_apply(
        &created(),
        "x",
        false,
        json!({"spec": {"reason": "kernel"}}),
    )
    .unwrap();
    let obj = main_apply(&obj, "y", false, json!({"spec": {"reason": "kernel"}})).unwrap();
    let owned = json!({"f:spec": {"f:reason": {}}});
    assert_eq!(
        (fields(&obj, "x"), fields(&obj, "y")),
        (owned.clone(), owned)
    );
    // x lets go: y still holds it. Then y lets go: it is gone.
    let obj = main_apply(&obj, "x", false, json!({"spec": {}})).unwrap();
    assert_eq!(obj["spec"]["reason"], "kernel");
    let obj = main_apply(&obj, "y", false, json!({"spec": {}})).unwrap();
    assert_eq!(obj["spec"].get("reason"), None);
}

#[test]
fn a_different_value_conflicts_with_kubernetes_wording() {
    let obj = main_apply(
        &created(),
        "x",
        false,
        json!({"spec": {"reason": "kernel"}}),
    )
    .unwrap();
    let err = main_apply(&obj, "y", false, json!({"spec": {"reason": "firmware"}})).unwrap_err();
    assert_eq!(
        err,
        PatchError::Conflict {
            message: r#"Apply failed with 1 conflict: conflict with "x": .spec.reason"#.to_string(),
            causes: vec![(
                ".spec.reason".to_string(),
                r#"conflict with "x""#.to_string()
            )],
        }
    );
    // Against an Update manager and a keyed status entry.
    let err = main_apply(
        &created(),
        "y",
        false,
        json!({"spec": {"nodeSelector": {"pool": "b"}}}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            r#"Apply failed with 1 conflict: conflict with "kubectl-create" using {API}: .spec.nodeSelector.pool"#
        )
    );
    let obj = agent(&created(), "a", json!({"phase": "Draining"}), T1);
    let err = apply(
        Some(&obj),
        &node_status("a", json!({"phase": "Failed"})),
        "intruder",
        false,
        Some("status"),
        &schema(),
        T2,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"Apply failed with 1 conflict: conflict with "maintd/a" with subresource "status": .status.nodes[nodeName="a"].phase"#
    );
    // Several conflicts: grouped by manager.
    let obj = main_apply(
        &obj,
        "x",
        false,
        json!({"spec": {"reason": "kernel", "stages": ["a"]}}),
    )
    .unwrap();
    let err = main_apply(
        &obj,
        "y",
        false,
        json!({"spec": {"reason": "fw", "stages": ["b"]}}),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"x\":\n- .spec.reason\n- .spec.stages"
    );
}

#[test]
fn force_takes_ownership() {
    let obj = main_apply(
        &created(),
        "x",
        false,
        json!({"spec": {"reason": "kernel", "stages": ["drain"]}}),
    )
    .unwrap();
    let obj = main_apply(&obj, "y", true, json!({"spec": {"reason": "firmware"}})).unwrap();
    assert_eq!(obj["spec"]["reason"], "firmware");
    assert_eq!(fields(&obj, "y"), json!({"f:spec": {"f:reason": {}}}));
    // The atomic list is owned whole.
    assert_eq!(fields(&obj, "x"), json!({"f:spec": {"f:stages": {}}}));
    // x no longer owns reason: dropping it from x's config leaves it alone.
    let obj = main_apply(&obj, "x", false, json!({"spec": {"stages": ["drain"]}})).unwrap();
    assert_eq!(obj["spec"]["reason"], "firmware");
}

#[test]
fn an_update_after_apply_moves_ownership() {
    let obj = main_apply(
        &created(),
        "x",
        false,
        json!({"spec": {"reason": "kernel", "stages": ["drain"]}}),
    )
    .unwrap();
    let mut edited = obj.clone();
    edited["spec"]["reason"] = json!("edited");
    record_update(
        Some(&obj),
        &mut edited,
        "kubectl-edit",
        "Update",
        None,
        &schema(),
        T2,
    );
    assert_eq!(
        entry(&edited, "kubectl-edit").unwrap(),
        &json!({
            "manager": "kubectl-edit", "operation": "Update", "apiVersion": API, "time": T2,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:reason": {}}},
        })
    );
    assert_eq!(fields(&edited, "x"), json!({"f:spec": {"f:stages": {}}}));
    let err = main_apply(
        &edited,
        "x",
        false,
        json!({"spec": {"reason": "kernel", "stages": ["drain"]}}),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains(r#"conflict with "kubectl-edit" using maintd.io/v1alpha1: .spec.reason"#),
        "{err}"
    );
}

#[test]
fn an_entry_someone_else_also_wrote_keeps_their_fields() {
    let obj = agent(&created(), "a", json!({"phase": "Draining"}), T1);
    // An admin adds a note to a's entry with kubectl edit (an Update).
    let mut edited = obj.clone();
    edited["status"]["nodes"][0]["note"] = json!("watch this one");
    record_update(
        Some(&obj),
        &mut edited,
        "kubectl-edit",
        "Update",
        Some("status"),
        &schema(),
        T2,
    );
    // a drops its entry: its own fields go, the item and the note stay.
    let obj = apply(
        Some(&edited),
        &body(json!({})),
        "maintd/a",
        true,
        Some("status"),
        &schema(),
        T2,
    )
    .unwrap();
    assert_eq!(
        obj["status"]["nodes"],
        json!([{"nodeName": "a", "note": "watch this one"}])
    );
}

#[test]
fn many_agents_share_one_status() {
    let mut obj = created();
    for i in 0..300 {
        obj = agent(
            &obj,
            &format!("node-{i:03}"),
            json!({"phase": "Draining"}),
            T1,
        );
    }
    for i in (0..300).step_by(3) {
        obj = agent(
            &obj,
            &format!("node-{i:03}"),
            json!({"phase": "Drained"}),
            T2,
        );
    }
    let nodes = obj["status"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 300);
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(node["nodeName"], format!("node-{i:03}"));
        assert_eq!(
            node["phase"],
            if i % 3 == 0 { "Drained" } else { "Draining" }
        );
    }
    // One creator entry plus one Apply entry per agent.
    assert_eq!(
        obj["metadata"]["managedFields"].as_array().unwrap().len(),
        301
    );
}
