use serde_json::json;

use crate::patch::{ListKind, ListSchema};

fn map(keys: &[&str]) -> ListKind {
    ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
}

#[test]
fn builtin_list_kinds_follow_kubernetes_tags() {
    let cases: &[(&str, &str, &[&str], ListKind)] = &[
        ("", "Node", &["metadata", "ownerReferences"], map(&["uid"])),
        ("", "Node", &["metadata", "finalizers"], ListKind::Set),
        ("", "Node", &["spec", "taints"], ListKind::Atomic),
        ("", "Node", &["status", "conditions"], map(&["type"])),
        ("", "Node", &["status", "addresses"], map(&["type"])),
        ("", "Pod", &["status", "conditions"], map(&["type"])),
        ("", "Pod", &["spec", "containers"], map(&["name"])),
        ("", "Pod", &["spec", "initContainers"], map(&["name"])),
        ("", "Pod", &["spec", "containers", "env"], map(&["name"])),
        (
            "",
            "Pod",
            &["spec", "containers", "ports"],
            map(&["containerPort"]),
        ),
        ("", "Pod", &["spec", "volumes"], map(&["name"])),
        ("", "Pod", &["spec", "tolerations"], ListKind::Atomic),
        ("", "Pod", &["spec", "containers", "args"], ListKind::Atomic),
        (
            "apps",
            "DaemonSet",
            &["spec", "template", "spec", "containers"],
            map(&["name"]),
        ),
        (
            "apps",
            "DaemonSet",
            &["spec", "template", "spec", "tolerations"],
            ListKind::Atomic,
        ),
        (
            "maintd.io",
            "NodeMaintenance",
            &["metadata", "finalizers"],
            ListKind::Set,
        ),
        (
            "maintd.io",
            "NodeMaintenance",
            &["status", "nodes"],
            ListKind::Atomic,
        ),
    ];
    for (group, kind, path, want) in cases {
        assert_eq!(
            ListSchema::builtin(group, kind).list_kind(path),
            *want,
            "{group}/{kind} {path:?}"
        );
    }
}

#[test]
fn from_openapi_v3_reads_list_types_of_a_crd_schema() {
    let crd_version_schema = json!({"openAPIV3Schema": {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
                "drainPlan": {"type": "array", "items": {"type": "object", "properties": {
                    "podTypes": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                }}},
                "pools": {"type": "object", "additionalProperties": {
                    "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                    "items": {"type": "object"},
                }},
            }},
            "status": {"type": "object", "properties": {
                "nodes": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["nodeName"],
                    "items": {"type": "object", "properties": {
                        "nodeName": {"type": "string"},
                        "blockers": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["namespace", "name"], "items": {"type": "object"}},
                        "stages": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}},
                    }},
                },
                "conditions": {"allOf": [{"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}}]},
            }},
        },
    }});
    let schema = ListSchema::from_openapi_v3(&crd_version_schema);
    let cases: &[(&[&str], ListKind)] = &[
        (&["status", "nodes"], map(&["nodeName"])),
        (
            &["status", "nodes", "blockers"],
            map(&["namespace", "name"]),
        ),
        (&["status", "nodes", "stages"], ListKind::Atomic),
        (&["status", "conditions"], map(&["type"])),
        (&["spec", "drainPlan"], ListKind::Atomic),
        (&["spec", "drainPlan", "podTypes"], ListKind::Set),
        (&["spec", "pools", "any-pool"], map(&["id"])),
        (&["metadata", "finalizers"], ListKind::Set),
        (&["metadata", "ownerReferences"], map(&["uid"])),
        (&["spec", "unknown"], ListKind::Atomic),
    ];
    for (path, want) in cases {
        assert_eq!(schema.list_kind(path), *want, "{path:?}");
    }
    // The bare openAPIV3Schema reads the same.
    assert_eq!(
        ListSchema::from_openapi_v3(&crd_version_schema["openAPIV3Schema"]),
        schema
    );
}

#[test]
fn an_apply_names_only_fields_the_crd_declares() {
    let schema = ListSchema::from_openapi_v3(&json!({"openAPIV3Schema": {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "status": {"type": "object", "properties": {
                "phase": {"type": "string"},
                "pods": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
        },
    }}));
    let ok = json!({
        "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "labels": {"k": "v"}},
        "spec": {"anything": {"goes": 1}},
        "status": {"phase": "Running", "pods": [{"name": "p"}], "labels": {"free": "form"}},
    });
    assert_eq!(schema.undeclared(&ok), None);
    let cases = [
        (
            json!({"status": {"pendingPodsRefs": []}}),
            ".status.pendingPodsRefs",
        ),
        (
            json!({"status": {"pods": [{"name": "p"}, {"uid": "u"}]}}),
            ".status.pods[1].uid",
        ),
        (json!({"extra": 1}), ".extra"),
    ];
    for (obj, field) in cases {
        assert_eq!(schema.undeclared(&obj).as_deref(), Some(field), "{obj}");
    }
    // Built-in kinds are checked by their types, not here.
    assert_eq!(ListSchema::default().undeclared(&json!({"extra": 1})), None);
}
