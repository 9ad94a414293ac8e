//! Strategic merge patch. The kubectl patches below were captured from
//! kubectl v1.32.4 talking to a recording server, byte for byte.

use serde_json::{Value, json};

use super::directive_keys;
use crate::patch::{ListKind, ListSchema, PatchError, strategic_merge_patch};

fn node(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": spec})
}

fn smp(kind: &str, mut target: Value, patch: Value) -> Value {
    let schema = ListSchema::builtin("", kind);
    strategic_merge_patch(&mut target, &patch, &schema).unwrap();
    assert_eq!(
        directive_keys(&target),
        Vec::<String>::new(),
        "directives stored by {patch}"
    );
    target
}

const A1: &str = r#"{"effect":"NoSchedule","key":"a","value":"1"}"#;

fn taint(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

#[test]
fn kubectl_taint_patches_add_modify_and_remove_taints() {
    let b = json!({"effect": "NoSchedule", "key": "b"});
    let cases = [
        // kubectl taint nodes n1 a=1:NoSchedule
        (
            json!({}),
            r#"{"spec":{"taints":[{"effect":"NoSchedule","key":"a","value":"1"}]}}"#,
            Some(json!([taint(A1)])),
        ),
        // kubectl taint nodes n1 b=2:NoExecute (kubectl puts the new taint first)
        (
            json!({"taints": [taint(A1)]}),
            r#"{"spec":{"taints":[{"effect":"NoExecute","key":"b","value":"2"},{"effect":"NoSchedule","key":"a","value":"1"}]}}"#,
            Some(json!([{"effect": "NoExecute", "key": "b", "value": "2"}, taint(A1)])),
        ),
        // kubectl taint nodes n1 a- (b stays)
        (
            json!({"taints": [taint(A1), b.clone()]}),
            r#"{"spec":{"taints":[{"effect":"NoSchedule","key":"b"}]}}"#,
            Some(json!([b])),
        ),
        // kubectl taint nodes n1 a=2:NoSchedule --overwrite
        (
            json!({"taints": [taint(A1)]}),
            r#"{"spec":{"taints":[{"effect":"NoSchedule","key":"a","value":"2"}]}}"#,
            Some(json!([{"effect": "NoSchedule", "key": "a", "value": "2"}])),
        ),
        // kubectl taint nodes n1 a:NoSchedule- (the last taint)
        (
            json!({"taints": [taint(A1)]}),
            r#"{"spec":{"taints":null}}"#,
            None,
        ),
    ];
    for (spec, patch, want) in cases {
        let patch: Value = serde_json::from_str(patch).unwrap();
        let out = smp("Node", node(spec), patch.clone());
        assert_eq!(out["spec"].get("taints"), want.as_ref(), "{patch}");
    }
}

#[test]
fn kubectl_cordon_and_uncordon() {
    let cordoned = smp(
        "Node",
        node(json!({"podCIDR": "10.0.0.0/24"})),
        json!({"spec": {"unschedulable": true}}),
    );
    assert_eq!(
        cordoned["spec"],
        json!({"podCIDR": "10.0.0.0/24", "unschedulable": true})
    );
    let uncordoned = smp("Node", cordoned, json!({"spec": {"unschedulable": null}}));
    assert_eq!(uncordoned["spec"], json!({"podCIDR": "10.0.0.0/24"}));
}

/// The two-way patches a client computing taints as a merge list by "key"
/// would send; Kubernetes declares taints atomic, so these need a schema
/// that says otherwise.
#[test]
fn set_element_order_and_delete_directives_on_a_keyed_taint_list() {
    let schema = ListSchema::builtin("", "Node")
        .with(&["spec", "taints"], ListKind::Map(vec!["key".into()]));
    let b = json!({"effect": "NoSchedule", "key": "b"});
    let cases = [
        (
            json!({"taints": [{"effect": "NoSchedule", "key": "a"}]}),
            r#"{"spec":{"$setElementOrder/taints":[{"effect":"NoSchedule","key":"a"}],"taints":[{"effect":"NoSchedule","key":"a","value":"1"}]}}"#,
            json!([taint(A1)]),
        ),
        (
            json!({"taints": [taint(A1), b.clone()]}),
            r#"{"spec":{"$setElementOrder/taints":[{"effect":"NoSchedule","key":"b"}],"taints":[{"$patch":"delete","key":"a"}]}}"#,
            json!([b.clone()]),
        ),
        (
            json!({"taints": [taint(A1)]}),
            r#"{"spec":{"$setElementOrder/taints":[{"key":"b"},{"key":"a"}],"taints":[{"effect":"NoSchedule","key":"b"}]}}"#,
            json!([b, taint(A1)]),
        ),
    ];
    for (spec, patch, want) in cases {
        let patch: Value = serde_json::from_str(patch).unwrap();
        let mut target = node(spec);
        strategic_merge_patch(&mut target, &patch, &schema).unwrap();
        assert_eq!(target["spec"]["taints"], want, "{patch}");
        assert!(directive_keys(&target).is_empty(), "{target}");
    }
}

#[test]
fn a_delete_directive_inside_an_atomic_list_is_invalid() {
    let mut target = node(json!({"taints": [taint(A1)]}));
    let before = target.clone();
    let patch = json!({"spec": {"taints": [{"$patch": "delete", "key": "a"}]}});
    let err =
        strategic_merge_patch(&mut target, &patch, &ListSchema::builtin("", "Node")).unwrap_err();
    assert!(
        matches!(&err, PatchError::Invalid(m) if m.contains("spec.taints")),
        "{err:?}"
    );
    assert_eq!(target, before);
}

#[test]
fn node_conditions_merge_by_type() {
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "MemoryPressure", "status": "False"},
    ]}});
    // A new condition, with kubectl's full order.
    let out = smp(
        "Node",
        status.clone(),
        json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}, {"type": "MaintdDraining"}],
            "conditions": [{"type": "MaintdDraining", "status": "True"}],
        }}),
    );
    let types: Vec<&str> = out["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Ready", "MemoryPressure", "MaintdDraining"]);
    // One field of one condition; the rest of it and the others stay.
    let out = smp(
        "Node",
        status,
        json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    assert_eq!(
        out["status"]["conditions"],
        json!([
            {"type": "Ready", "status": "False", "reason": "KubeletReady"},
            {"type": "MemoryPressure", "status": "False"},
        ])
    );
}

#[test]
fn pod_containers_and_env_merge_by_name() {
    let pod = json!({"spec": {"containers": [
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
        {"name": "b", "image": "b:1", "ports": [{"containerPort": 80}]},
    ]}});
    let out = smp(
        "Pod",
        pod,
        json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [
                {"name": "a", "$setElementOrder/env": [{"name": "X"}, {"name": "Y"}], "env": [{"name": "Y", "value": "3"}]},
                {"name": "b", "image": "b:2", "ports": [{"containerPort": 443}]},
            ],
        }}),
    );
    assert_eq!(
        out["spec"]["containers"],
        json!([
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}]},
            // Without $setElementOrder a new item goes before the live ones, as
            // in Kubernetes' normalizeElementOrder.
            {"name": "b", "image": "b:2", "ports": [{"containerPort": 443}, {"containerPort": 80}]},
        ])
    );
}

#[test]
fn finalizers_merge_as_a_set() {
    let obj = json!({"metadata": {"finalizers": ["a", "b"]}});
    let cases = [
        (
            json!({"metadata": {"$setElementOrder/finalizers": ["a", "b", "c"], "finalizers": ["c"]}}),
            json!(["a", "b", "c"]),
        ),
        (
            json!({"metadata": {"finalizers": ["b"]}}),
            json!(["a", "b"]),
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "$setElementOrder/finalizers": ["b"]}}),
            json!(["b"]),
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["zz"]}}),
            json!(["a", "b"]),
        ),
    ];
    for (patch, want) in cases {
        let out = smp("Pod", obj.clone(), patch.clone());
        assert_eq!(out["metadata"]["finalizers"], want, "{patch}");
    }
}

#[test]
fn null_deletes_and_unknown_lists_replace() {
    let obj = json!({"metadata": {"labels": {"x": "1", "y": "2"}}, "spec": {"args": ["a", "b"]}});
    let out = smp(
        "Pod",
        obj,
        json!({"metadata": {"labels": {"x": null, "z": "3"}, "absent": null}, "spec": {"args": ["c"]}}),
    );
    assert_eq!(
        out,
        json!({"metadata": {"labels": {"y": "2", "z": "3"}}, "spec": {"args": ["c"]}})
    );
}

#[test]
fn patch_replace_and_delete_directives() {
    let pod = json!({"metadata": {"labels": {"x": "1"}}, "spec": {
        "containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}],
        "securityContext": {"runAsUser": 1},
    }});
    let out = smp(
        "Pod",
        pod,
        json!({
            "metadata": {"labels": {"$patch": "replace", "only": "this"}},
            "spec": {
                "containers": [{"name": "c", "image": "c"}, {"$patch": "replace"}],
                "securityContext": {"$patch": "delete"},
            },
        }),
    );
    assert_eq!(
        out,
        json!({"metadata": {"labels": {"only": "this"}}, "spec": {
            "containers": [{"name": "c", "image": "c"}],
            "securityContext": {},
        }})
    );
}

#[test]
fn retain_keys_clears_fields_not_listed() {
    // kubectl's patch when a volume changes source (hostPath → emptyDir).
    let pod = json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}});
    let out = smp(
        "Pod",
        pod,
        json!({"spec": {"volumes": [
            {"$retainKeys": ["emptyDir", "name"], "emptyDir": {}, "name": "v"},
        ]}}),
    );
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "v", "emptyDir": {}}])
    );
}

#[test]
fn directives_in_a_new_list_are_consumed() {
    let out = smp(
        "Node",
        node(json!({})),
        json!({"status": {"conditions": [
            {"type": "A", "status": "True"},
            {"$patch": "delete", "type": "B"},
        ]}}),
    );
    assert_eq!(
        out["status"],
        json!({"conditions": [{"type": "A", "status": "True"}]})
    );
}

#[test]
fn malformed_patches_are_bad_requests_and_change_nothing() {
    let obj = json!({"metadata": {"finalizers": ["a"], "labels": {"x": "1"}}, "status": {"conditions": [{"type": "Ready"}]}});
    let cases = [
        json!(["not", "an", "object"]),
        json!({"metadata": {"labels": {"$patch": "bogus"}}}),
        json!({"metadata": {"labels": {"$patch": "merge"}}}),
        json!({"metadata": {"$setElementOrder/finalizers": "a"}}),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
        json!({"metadata": {"labels": {"$retainKeys": "x"}}}),
        json!({"metadata": {"labels": {"$retainKeys": ["x"], "y": "2"}}}),
        json!({"metadata": {"$frobnicate": 1}}),
        json!({"metadata": {"finalizers": [{"name": "a"}]}}),
        json!({"status": {"conditions": [{"status": "True"}]}}),
        json!({"status": {"conditions": ["Ready"]}}),
        json!({"status": {"conditions": [{"$patch": "delete"}]}}),
        json!({"status": {"conditions": [{"$patch": "explode", "type": "Ready"}]}}),
        json!({"status": {"$setElementOrder/conditions": [{"status": "x"}], "conditions": []}}),
    ];
    for patch in cases {
        let mut target = obj.clone();
        let err = strategic_merge_patch(&mut target, &patch, &ListSchema::builtin("", "Node"))
            .unwrap_err();
        assert!(matches!(err, PatchError::BadRequest(_)), "{patch}: {err:?}");
        assert_eq!(target, obj, "{patch} changed the object");
    }
}
