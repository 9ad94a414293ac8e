//! `PodInfo::from_json`: every malformed field becomes a default and a
//! warning, never a panic, and the rest of the node still drains.
//!
//! A real API server refuses most of these bodies (it decodes pods into
//! their Go types), so the agent should never see them; reading them
//! leniently anyway is cheap insurance against a proxy, a cache or a
//! future field that does not look as expected.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;

/// A well-formed pod JSON with `patch` merged over its sections.
fn pod_json(patch: Value) -> Value {
    let mut v = json!({
        "metadata": {
            "namespace": "ns", "name": "p", "uid": "u1",
            "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r1", "controller": true}]
        },
        "spec": {"nodeName": "n1", "priority": 100, "containers": []},
        "status": {"phase": "Running"}
    });
    json_patch::merge(&mut v, &patch);
    v
}

#[test]
fn well_formed_pod_reads_without_warnings() {
    let p = PodInfo::from_json(&pod_json(json!({
        "metadata": {"annotations": {"a": "b"}, "deletionTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {
            "priorityClassName": "high", "terminationGracePeriodSeconds": 90,
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "volumes": [{"name": "c", "configMap": {"name": "x"}}, {"name": "s", "emptyDir": {}}]
        }
    })));
    assert_eq!(p.warnings, Vec::<String>::new());
    assert_eq!(
        (
            p.namespace.as_str(),
            p.name.as_str(),
            p.uid.as_str(),
            p.node_name.as_str()
        ),
        ("ns", "p", "u1", "n1")
    );
    assert_eq!(
        (p.priority, p.priority_class.as_deref(), p.phase.as_str()),
        (100, Some("high"), "Running")
    );
    assert_eq!(
        p.owner,
        Some(OwnerRef {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "rs".into(),
            uid: "r1".into(),
            controller: true
        })
    );
    assert_eq!(p.labels["app"], "web");
    assert_eq!(p.annotations["a"], "b");
    assert!(p.deleting && p.has_empty_dir);
    assert_eq!(p.termination_grace_seconds, 90);
    assert_eq!(
        p.tolerations,
        vec![Toleration {
            key: "k".into(),
            operator: "Exists".into(),
            value: String::new(),
            effect: "NoSchedule".into()
        }]
    );
}

#[test]
fn defaults_for_missing_fields() {
    let p = PodInfo::from_json(&json!({"metadata": {"name": "p"}}));
    assert_eq!(p.warnings, Vec::<String>::new());
    assert_eq!(
        (
            p.priority,
            p.termination_grace_seconds,
            p.deleting,
            p.has_empty_dir
        ),
        (0, 30, false, false)
    );
    assert_eq!(p.owner, None);
    assert_eq!(classify(&p), PodType::Default);
}

#[test]
fn malformed_fields_table() {
    // (case, patch, check on the result, text the one warning must contain)
    type Check = fn(&PodInfo) -> bool;
    let cases: Vec<(&str, Value, Check, &str)> = vec![
        (
            "priority as a word",
            json!({"spec": {"priority": "high"}}),
            |p| p.priority == 0,
            "spec.priority: expected an integer, found the string \"high\"; no priorityClassName; using 0",
        ),
        (
            "priority as a word, well-known class",
            json!({"spec": {"priority": "x", "priorityClassName": "system-cluster-critical"}}),
            |p| p.priority == SYSTEM_CLUSTER_CRITICAL,
            "using 2000000000 from priorityClassName system-cluster-critical",
        ),
        (
            "priority fractional",
            json!({"spec": {"priority": 1.5}}),
            |p| p.priority == 0,
            "found the number 1.5",
        ),
        (
            "priority above i32",
            json!({"spec": {"priority": 3_000_000_000u64}}),
            |p| p.priority == i32::MAX,
            "outside the 32-bit range; using 2147483647",
        ),
        (
            "priority far above i64",
            json!({"spec": {"priority": u64::MAX}}),
            |p| p.priority == i32::MAX,
            "outside the 32-bit range",
        ),
        (
            "priority below i32",
            json!({"spec": {"priority": -3_000_000_000i64}}),
            |p| p.priority == i32::MIN,
            "using -2147483648",
        ),
        (
            "missing priority, unknown class",
            json!({"spec": {"priority": null, "priorityClassName": "gold"}}),
            |p| p.priority == 0,
            "priorityClassName gold is not a built-in class; using 0",
        ),
        (
            "class not a string",
            json!({"spec": {"priorityClassName": 7}}),
            |p| p.priority_class.is_none() && p.priority == 100,
            "spec.priorityClassName: expected a string, found the number 7",
        ),
        (
            "ownerReferences not a list",
            json!({"metadata": {"ownerReferences": {"kind": "DaemonSet"}}}),
            |p| p.owner.is_none(),
            "metadata.ownerReferences: expected a list, found an object",
        ),
        (
            "owner entry not an object",
            json!({"metadata": {"ownerReferences": ["DaemonSet", {"kind": "DaemonSet", "controller": true}]}}),
            |p| classify(p) == PodType::DaemonSet,
            "metadata.ownerReferences[0]: expected an object",
        ),
        (
            "owner without kind",
            json!({"metadata": {"ownerReferences": [{"name": "x", "controller": true}]}}),
            |p| p.owner.is_none(),
            "metadata.ownerReferences[0]: has no kind",
        ),
        (
            "controller not a bool",
            json!({"metadata": {"ownerReferences": [{"kind": "DaemonSet", "controller": "yes"}]}}),
            |p| classify(p) == PodType::Default,
            "metadata.ownerReferences[0].controller: expected true or false, found the string \"yes\"; using false",
        ),
        (
            "label value not a string",
            json!({"metadata": {"labels": {"app": "web", "n": 3}}}),
            |p| p.labels.len() == 1,
            "metadata.labels[\"n\"]: expected a string, found the number 3",
        ),
        (
            "labels not an object",
            json!({"metadata": {"labels": ["a"]}}),
            |p| p.labels.is_empty(),
            "metadata.labels: expected an object, found a list",
        ),
        (
            "annotation value not a string",
            json!({"metadata": {"annotations": {"maintd.io/drain": true}}}),
            |p| p.annotations.is_empty(),
            "metadata.annotations[\"maintd.io/drain\"]",
        ),
        (
            "name not a string",
            json!({"metadata": {"name": ["p"]}}),
            |p| p.name.is_empty(),
            "metadata.name: expected a string",
        ),
        (
            "spec not an object",
            json!({"spec": "broken"}),
            |p| p.priority == 0 && p.node_name.is_empty(),
            "spec: expected an object, found the string \"broken\"",
        ),
        (
            "tolerations not a list",
            json!({"spec": {"tolerations": "all"}}),
            |p| p.tolerations.is_empty(),
            "spec.tolerations: expected a list",
        ),
        (
            "toleration not an object",
            json!({"spec": {"tolerations": [1, {"operator": "Exists"}]}}),
            |p| p.tolerations.len() == 1,
            "spec.tolerations[0]: expected an object",
        ),
        (
            "toleration field not a string",
            json!({"spec": {"tolerations": [{"operator": "Exists", "effect": 1}]}}),
            |p| p.tolerations[0].effect.is_empty(),
            "spec.tolerations[0].effect",
        ),
        (
            "grace as a string",
            json!({"spec": {"terminationGracePeriodSeconds": "30s"}}),
            |p| p.termination_grace_seconds == 30,
            "spec.terminationGracePeriodSeconds: expected a whole number of seconds",
        ),
        (
            "grace negative",
            json!({"spec": {"terminationGracePeriodSeconds": -5}}),
            |p| p.termination_grace_seconds == 0,
            "-5 is negative; using 0",
        ),
        (
            "volumes not a list",
            json!({"spec": {"volumes": {"emptyDir": {}}}}),
            |p| !p.has_empty_dir,
            "spec.volumes: expected a list",
        ),
        (
            "phase not a string",
            json!({"status": {"phase": 2}}),
            |p| p.phase.is_empty(),
            "status.phase",
        ),
    ];
    let mut failures = Vec::new();
    for (name, patch, check, want) in &cases {
        let p = PodInfo::from_json(&pod_json(patch.clone()));
        if !check(&p) || p.warnings.len() != 1 || !p.warnings[0].contains(want) {
            failures.push(format!("{name}: warnings {:?}, pod {p:?}", p.warnings));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn not_an_object_at_all() {
    for v in [json!(null), json!("pod"), json!([1, 2])] {
        let p = PodInfo::from_json(&v);
        assert_eq!(p.warnings.len(), 1, "{v}: {:?}", p.warnings);
        assert!(p.warnings[0].starts_with("pod: expected an object"));
    }
}

#[test]
fn long_strings_are_cut_in_warnings() {
    let p = PodInfo::from_json(&pod_json(json!({"spec": {"priority": "x".repeat(500)}})));
    assert!(p.warnings[0].len() < 200, "{}", p.warnings[0]);
    // Up to 40 characters are shown whole; more are cut at 40 and marked.
    let said = |s: &str| PodInfo::from_json(&pod_json(json!({"spec": {"priority": s}}))).warnings;
    let forty = "y".repeat(40);
    let w = &said(&forty)[0];
    assert!(w.contains(&format!("found the string {forty:?};")), "{w}");
    let w = &said(&"y".repeat(41))[0];
    assert!(w.contains(&format!("the string {forty:?}…;")), "{w}");
}

#[test]
fn from_pod_reads_like_from_json() {
    let v = pod_json(
        json!({"spec": {"tolerations": [{"operator": "Exists"}], "volumes": [{"name": "s", "emptyDir": {}}]}}),
    );
    let typed: Pod = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(PodInfo::from_pod(&typed), PodInfo::from_json(&v));
    assert_eq!(
        PodInfo::from_pod(&Pod::default()).warnings,
        Vec::<String>::new()
    );
}

#[test]
fn malformed_pod_is_reported_and_the_rest_still_drains() {
    let bad = PodInfo::from_json(&pod_json(json!({
        "metadata": {"name": "bad", "ownerReferences": "oops"},
        "spec": {"priority": "high"}
    })));
    let pods = [bad, pod("good").prio(100), pod("ds").ds()];
    let plan = build_plan(&pods, None, &opts());
    assert_eq!(
        render(&plan),
        [
            "Default ≤ 0: bad",
            "Default ≤ 100: good",
            "DaemonSet ≤ 0: ds"
        ]
    );
    assert_eq!(plan.warnings.len(), 2);
    assert!(
        plan.warnings.iter().all(|w| w.starts_with("pod ns/bad: ")),
        "{:?}",
        plan.warnings
    );
    let notes = &plan.stages[0].pods[0].notes;
    assert_eq!(notes[0], PodNote::NoController);
    assert!(matches!(&notes[1], PodNote::MalformedField(w) if w.contains("ownerReferences")));
    assert!(matches!(&notes[2], PodNote::MalformedField(w) if w.contains("spec.priority")));
}

/// An owner reference without a kind reads the same through the typed Pod
/// (which writes the missing kind as "") as through its JSON: ignored, with
/// a warning. Found by the `pod` fuzz target.
#[test]
fn an_owner_without_a_kind_reads_alike_both_ways() {
    let raw = pod_json(json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1"}]}}));
    let typed: Pod = serde_json::from_value(raw.clone()).unwrap();
    let from_json = PodInfo::from_json(&raw);
    assert_eq!(PodInfo::from_pod(&typed), from_json);
    assert_eq!(from_json.owner, None);
    assert_eq!(
        from_json.warnings,
        vec!["metadata.ownerReferences[0]: has no kind; ignoring this owner".to_string()]
    );
}
