//! Ownership edge cases: Update writes, server metadata, set lists,
//! creation by apply, idempotence, malformed requests.

use serde_json::{Value, json};

use super::apply::{API, T0, T1, T2, agent, body, created, entry, fields, main_apply, schema};
use crate::patch::{PatchError, apply, record_update};

#[test]
fn update_ownership_follows_what_changed() {
    let obj = created();
    assert_eq!(entry(&obj, "kubectl-create").unwrap()["time"], T0);
    // A write that changes nothing leaves ownership and time alone.
    let mut same = obj.clone();
    record_update(
        Some(&obj),
        &mut same,
        "other",
        "Update",
        None,
        &schema(),
        T2,
    );
    assert_eq!(
        same["metadata"]["managedFields"],
        obj["metadata"]["managedFields"]
    );
    // Removing a field removes it from its owner.
    let mut cleared = obj.clone();
    cleared["spec"] = json!({});
    record_update(
        Some(&obj),
        &mut cleared,
        "other",
        "Update",
        None,
        &schema(),
        T2,
    );
    assert_eq!(fields(&cleared, "kubectl-create"), Value::Null);
    assert_eq!(fields(&cleared, "other"), json!({"f:spec": {}}));
    // managedFields: [{}] clears ownership.
    let mut reset = obj.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    record_update(
        Some(&obj),
        &mut reset,
        "other",
        "Update",
        None,
        &schema(),
        T2,
    );
    assert_eq!(reset["metadata"].get("managedFields"), None);
}

#[test]
fn server_metadata_in_the_applied_body_is_ignored() {
    let live = created();
    let applied = body(json!({"metadata": {
        "name": "m", "uid": "forged", "resourceVersion": "999", "generation": 7,
        "creationTimestamp": "1999-01-01T00:00:00Z", "labels": {"team": "infra"},
        "managedFields": [{"manager": "forged", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
    }}));
    let obj = apply(Some(&live), &applied, "x", false, None, &schema(), T1).unwrap();
    assert_eq!(obj["metadata"]["uid"], "u-1");
    assert_eq!(obj["metadata"]["resourceVersion"], "1");
    assert_eq!(obj["metadata"]["creationTimestamp"], T0);
    assert_eq!(obj["metadata"].get("generation"), None);
    assert_eq!(entry(&obj, "forged"), None);
    assert_eq!(
        fields(&obj, "x"),
        json!({"f:metadata": {"f:labels": {"f:team": {}}}})
    );
}

#[test]
fn set_items_are_owned_one_by_one() {
    let obj = main_apply(
        &created(),
        "x",
        false,
        json!({"metadata": {"finalizers": ["maintd.io/x"]}}),
    )
    .unwrap();
    let obj = main_apply(
        &obj,
        "y",
        false,
        json!({"metadata": {"finalizers": ["maintd.io/y"]}}),
    )
    .unwrap();
    assert_eq!(
        obj["metadata"]["finalizers"],
        json!(["maintd.io/x", "maintd.io/y"])
    );
    assert_eq!(
        fields(&obj, "y"),
        json!({"f:metadata": {"f:finalizers": {"v:\"maintd.io/y\"": {}}}})
    );
    let obj = main_apply(&obj, "x", false, json!({})).unwrap();
    assert_eq!(obj["metadata"]["finalizers"], json!(["maintd.io/y"]));
}

#[test]
fn apply_creates_and_the_first_apply_respects_untracked_fields() {
    let created = apply(
        None,
        &body(json!({"spec": {"reason": "r"}})),
        "x",
        false,
        None,
        &schema(),
        T0,
    )
    .unwrap();
    assert_eq!(created["spec"], json!({"reason": "r"}));
    assert_eq!(entry(&created, "x").unwrap()["operation"], "Apply");

    // An object stored without managedFields: its fields are "before-first-apply"'s.
    let untracked = json!({"apiVersion": API, "kind": "NodeMaintenance", "metadata": {"name": "m"}, "spec": {"reason": "r"}});
    let err = main_apply(&untracked, "x", false, json!({"spec": {"reason": "s"}})).unwrap_err();
    assert!(
        err.to_string().contains(
            r#"conflict with "before-first-apply" using maintd.io/v1alpha1: .spec.reason"#
        ),
        "{err}"
    );
    let same = main_apply(&untracked, "x", false, json!({"spec": {"reason": "r"}})).unwrap();
    assert_eq!(
        fields(&same, "before-first-apply"),
        json!({"f:spec": {"f:reason": {}}})
    );
}

#[test]
fn an_unchanged_apply_keeps_its_time() {
    let obj = agent(&created(), "a", json!({"phase": "Draining"}), T1);
    let again = agent(&obj, "a", json!({"phase": "Draining"}), T2);
    assert_eq!(again, obj);
}

#[test]
fn malformed_apply_requests() {
    let live = created();
    let cases = [
        (
            apply(
                Some(&live),
                &body(json!({})),
                "",
                false,
                None,
                &schema(),
                T1,
            ),
            "fieldManager",
        ),
        (
            apply(
                Some(&live),
                &json!({"kind": "NodeMaintenance"}),
                "x",
                false,
                None,
                &schema(),
                T1,
            ),
            "apiVersion",
        ),
        (
            apply(Some(&live), &json!(["x"]), "x", false, None, &schema(), T1),
            "object",
        ),
    ];
    for (result, needle) in cases {
        assert!(
            matches!(&result, Err(PatchError::BadRequest(m)) if m.contains(needle)),
            "{result:?}"
        );
    }
    let keyless = body(json!({"status": {"nodes": [{"phase": "x"}]}}));
    let err = apply(
        Some(&live),
        &keyless,
        "x",
        false,
        Some("status"),
        &schema(),
        T1,
    )
    .unwrap_err();
    assert!(
        matches!(&err, PatchError::Invalid(m) if m.contains("nodeName")),
        "{err:?}"
    );
}

#[test]
fn new_keyed_items_go_before_the_next_shared_item() {
    let live = main_apply(
        &created(),
        "x",
        false,
        json!({"status": {"nodes": [{"nodeName": "a"}, {"nodeName": "c"}]}}),
    )
    .unwrap();
    let obj = main_apply(
        &live,
        "y",
        false,
        json!({"status": {"nodes": [{"nodeName": "b"}, {"nodeName": "c", "phase": "x"}]}}),
    )
    .unwrap();
    assert_eq!(
        obj["status"]["nodes"],
        json!([{"nodeName": "a"}, {"nodeName": "b"}, {"nodeName": "c", "phase": "x"}])
    );
}
