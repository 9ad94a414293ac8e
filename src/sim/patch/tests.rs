use serde_json::{Value, json};

use super::*;

fn node_schema() -> ListSchema {
    ListSchema::builtin("", "Node")
}

#[test]
fn merge_patch_follows_rfc_7386() {
    let cases = [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": ["b"]}),
            json!({"a": ["c", "d"]}),
            json!({"a": ["c", "d"]}),
        ),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
    ];
    for (mut target, patch, want) in cases {
        merge_patch(&mut target, &patch).unwrap();
        assert_eq!(target, want, "{patch}");
    }
    assert!(matches!(
        merge_patch(&mut json!({}), &json!([1])),
        Err(PatchError::BadRequest(_))
    ));
}

#[test]
fn json_patch_applies_and_reports_failures() {
    let mut v = json!({"a": {"b": 1}, "l": [1, 2]});
    let ops = json!([
        {"op": "add", "path": "/a/c", "value": 2},
        {"op": "replace", "path": "/a/b", "value": 5},
        {"op": "remove", "path": "/l/0"},
        {"op": "copy", "from": "/a/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e"},
        {"op": "test", "path": "/e", "value": 2},
    ]);
    json_patch(&mut v, &ops).unwrap();
    assert_eq!(v, json!({"a": {"b": 5, "c": 2}, "l": [2], "e": 2}));
    assert!(matches!(
        json_patch(&mut v, &json!([{"op": "test", "path": "/e", "value": 3}])),
        Err(PatchError::Invalid(_))
    ));
    assert!(matches!(
        json_patch(&mut v, &json!([{"op": "remove", "path": "/nope"}])),
        Err(PatchError::Invalid(_))
    ));
    assert!(matches!(
        json_patch(&mut v, &json!({"op": "add"})),
        Err(PatchError::BadRequest(_))
    ));
    assert!(matches!(
        json_patch(&mut v, &json!([{"op": "frobnicate", "path": "/a"}])),
        Err(PatchError::BadRequest(_))
    ));
}

fn node_with(taints: Value) -> Value {
    json!({"metadata": {"name": "n", "finalizers": ["a"]}, "spec": {"taints": taints}, "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}})
}

#[test]
fn strategic_merge_handles_what_kubectl_sends() {
    let s = node_schema();
    let cases: Vec<(&str, Value, Value, Value)> = vec![
        (
            "cordon",
            json!([]),
            json!({"spec": {"unschedulable": true}}),
            json!([]),
        ),
        (
            "taint added",
            json!([{"key": "a", "effect": "NoSchedule"}]),
            json!({"spec": {"$setElementOrder/taints": [{"effect": "NoSchedule", "key": "a"}, {"effect": "NoExecute", "key": "b"}], "taints": [{"effect": "NoExecute", "key": "b", "value": "1"}]}}),
            json!([{"key": "a", "effect": "NoSchedule"}, {"effect": "NoExecute", "key": "b", "value": "1"}]),
        ),
        (
            "taint removed",
            json!([{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]),
            json!({"spec": {"$setElementOrder/taints": [{"effect": "NoSchedule", "key": "b"}], "taints": [{"$patch": "delete", "key": "a"}]}}),
            json!([{"key": "b", "effect": "NoSchedule"}]),
        ),
        (
            "taint value changed",
            json!([{"key": "a", "value": "1", "effect": "NoSchedule"}]),
            json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule", "value": "2"}]}}),
            json!([{"key": "a", "value": "2", "effect": "NoSchedule"}]),
        ),
        (
            "taint list replaced",
            json!([{"key": "a", "effect": "NoSchedule"}]),
            json!({"spec": {"taints": [{"key": "z", "effect": "NoExecute"}, {"$patch": "replace"}]}}),
            json!([{"key": "z", "effect": "NoExecute"}]),
        ),
        (
            "reordered",
            json!([{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]),
            json!({"spec": {"$setElementOrder/taints": [{"key": "b"}, {"key": "a"}]}}),
            json!([{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]),
        ),
    ];
    for (what, taints, patch, want) in cases {
        let mut n = node_with(taints);
        strategic_merge_patch(&mut n, &patch, &s).unwrap();
        assert_eq!(n["spec"]["taints"], want, "{what}");
        assert!(
            !n.to_string().contains('$'),
            "{what}: no directive is stored"
        );
    }
}

#[test]
fn strategic_merge_conditions_finalizers_and_directives() {
    let s = node_schema();
    let mut n = node_with(json!([]));
    strategic_merge_patch(
        &mut n,
        &json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        &s,
    )
    .unwrap();
    assert_eq!(
        n["status"]["conditions"],
        json!([{"type": "Ready", "status": "False"}, {"type": "DiskPressure", "status": "False"}])
    );
    strategic_merge_patch(&mut n, &json!({"metadata": {"finalizers": ["b", "a"]}}), &s).unwrap();
    assert_eq!(
        n["metadata"]["finalizers"],
        json!(["a", "b"]),
        "finalizers merge as a set"
    );
    strategic_merge_patch(
        &mut n,
        &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        &s,
    )
    .unwrap();
    assert_eq!(n["metadata"]["finalizers"], json!(["b"]));
    strategic_merge_patch(&mut n, &json!({"metadata": {"name": null}}), &s).unwrap();
    assert!(n["metadata"].get("name").is_none(), "null deletes");
    strategic_merge_patch(
        &mut n,
        &json!({"spec": {"$retainKeys": ["taints"], "podCIDR": "x", "taints": []}}),
        &s,
    )
    .unwrap();
    assert_eq!(n["spec"], json!({"taints": []}));
    strategic_merge_patch(
        &mut n,
        &json!({"status": {"$patch": "replace", "phase": "Running"}}),
        &s,
    )
    .unwrap();
    assert_eq!(n["status"], json!({"phase": "Running"}));
    for bad in [
        json!([1]),
        json!({"spec": {"$patch": "explode"}}),
        json!({"spec": {"$bogus": 1}}),
        json!({"spec": {"taints": [1]}}),
    ] {
        assert!(
            matches!(
                strategic_merge_patch(&mut n, &bad, &s),
                Err(PatchError::BadRequest(_))
            ),
            "{bad}"
        );
    }
}

fn crd_schema() -> ListSchema {
    ListSchema::from_openapi_v3(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}, "steps": {"type": "array"}}},
        "status": {"type": "object", "properties": {"nodes": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["nodeName"], "items": {"type": "object"}}}},
    }}))
}

fn status(node: &str, phase: &str) -> Value {
    json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"}, "status": {"nodes": [{"nodeName": node, "phase": phase}]}})
}

fn managers(v: &Value) -> Vec<String> {
    v["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["manager"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn from_openapi_reads_list_types() {
    let s = crd_schema();
    assert_eq!(
        s.list_kind("status.nodes"),
        ListKind::Map(vec!["nodeName".into()])
    );
    assert_eq!(s.list_kind("spec.tags"), ListKind::Set);
    assert_eq!(s.list_kind("spec.steps"), ListKind::Atomic);
    assert_eq!(s.list_kind("metadata.finalizers"), ListKind::Set);
}

#[test]
fn two_managers_apply_their_own_entries_of_one_list() {
    let s = crd_schema();
    let live = json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"stage": "Drain"}});
    let a = apply(
        Some(&live),
        &status("a", "Draining"),
        "maintd/a",
        false,
        Some("status"),
        &s,
        "t1",
    )
    .unwrap();
    let b = apply(
        Some(&a),
        &status("b", "Draining"),
        "maintd/b",
        false,
        Some("status"),
        &s,
        "t2",
    )
    .unwrap();
    let a2 = apply(
        Some(&b),
        &status("a", "Drained"),
        "maintd/a",
        false,
        Some("status"),
        &s,
        "t3",
    )
    .unwrap();
    assert_eq!(
        a2["status"]["nodes"],
        json!([{"nodeName": "a", "phase": "Drained"}, {"nodeName": "b", "phase": "Draining"}])
    );
    assert_eq!(a2["spec"], json!({"stage": "Drain"}));
    assert_eq!(managers(&a2), ["maintd/a", "maintd/b"]);
    let fields_a = &a2["metadata"]["managedFields"][0]["fieldsV1"];
    assert!(
        fields_a["f:status"]["f:nodes"]
            .get("k:{\"nodeName\":\"a\"}")
            .is_some()
    );
    assert!(
        fields_a["f:status"]["f:nodes"]
            .get("k:{\"nodeName\":\"b\"}")
            .is_none(),
        "a owns only its entry"
    );
    assert_eq!(a2["metadata"]["managedFields"][0]["subresource"], "status");
}

#[test]
fn a_field_a_manager_stops_applying_is_removed_unless_shared() {
    let s = crd_schema();
    let cfg = |labels: Value| json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w", "labels": labels}});
    let v = apply(
        None,
        &cfg(json!({"a": "1", "b": "2"})),
        "m1",
        false,
        None,
        &s,
        "t",
    )
    .unwrap();
    let v = apply(
        Some(&v),
        &cfg(json!({"b": "2"})),
        "m2",
        false,
        None,
        &s,
        "t",
    )
    .unwrap();
    let v = apply(Some(&v), &cfg(json!({})), "m1", false, None, &s, "t").unwrap();
    assert_eq!(
        v["metadata"]["labels"],
        json!({"b": "2"}),
        "a goes; b stays, m2 shares it"
    );
    let gone = apply(
        Some(&v),
        &status("a", "X"),
        "maintd/a",
        false,
        Some("status"),
        &s,
        "t",
    )
    .unwrap();
    let gone = apply(
        Some(&gone),
        &json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"}}),
        "maintd/a",
        false,
        Some("status"),
        &s,
        "t",
    )
    .unwrap();
    assert_eq!(
        gone["status"]["nodes"],
        json!([]),
        "a dropped entry is removed"
    );
}

#[test]
fn conflicts_are_reported_unless_forced_and_same_values_are_shared() {
    let s = crd_schema();
    let cfg = |v: &str| json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"stage": v}});
    let v = apply(None, &cfg("Drain"), "admin", false, None, &s, "t").unwrap();
    let shared = apply(Some(&v), &cfg("Drain"), "other", false, None, &s, "t").unwrap();
    assert_eq!(managers(&shared), ["admin", "other"]);
    match apply(Some(&v), &cfg("Idle"), "other", false, None, &s, "t") {
        Err(PatchError::Conflict { message, causes }) => {
            assert_eq!(
                message,
                "Apply failed with 1 conflict: conflict with \"admin\": .spec.stage"
            );
            assert_eq!(causes.len(), 1);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced = apply(Some(&v), &cfg("Idle"), "other", true, None, &s, "t").unwrap();
    assert_eq!(forced["spec"]["stage"], "Idle");
    assert_eq!(managers(&forced), ["other"], "force takes the field over");
}

#[test]
fn updates_take_ownership_of_what_they_change() {
    let s = crd_schema();
    let v = apply(None, &json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"stage": "Drain"}}), "admin", false, None, &s, "t").unwrap();
    let mut edited = v.clone();
    edited["spec"]["stage"] = json!("Complete");
    record_update(
        Some(&v),
        &mut edited,
        "kubectl-edit",
        "Update",
        None,
        &s,
        "t2",
    );
    assert_eq!(
        managers(&edited),
        ["kubectl-edit"],
        "the edit took spec.stage from admin"
    );
    // admin applying its old value now conflicts with the editor.
    assert!(matches!(
        apply(
            Some(&edited),
            &json!({"apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"stage": "Drain"}}),
            "admin",
            false,
            None,
            &s,
            "t"
        ),
        Err(PatchError::Conflict { .. })
    ));
}
