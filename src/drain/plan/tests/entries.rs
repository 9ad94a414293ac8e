//! KEP-4212 plan entries: ceilings, "not already selected", selectors,
//! empty stages, and validation.

use serde_json::json;

use super::*;
use PodType::{DaemonSet, Default, Static};

#[test]
fn entries_table() {
    run(vec![
        Case {
            name: "ceiling is inclusive; pods above it and of other types are not in the plan",
            pods: vec![
                pod("low"),
                pod("at").prio(1000),
                pod("above").prio(1001),
                pod("ds").ds(),
            ],
            entries: Some(vec![entry(Default, 1000)]),
            want: &[
                "Default ≤ 1000: at low",
                "skip above: NotInPlan",
                "skip ds: NotInPlan",
            ],
        },
        Case {
            name: "a later entry takes only what earlier ones did not",
            pods: vec![pod("a").prio(50), pod("b").prio(500), pod("c").prio(100)],
            entries: Some(vec![entry(Default, 100), entry(Default, 1000)]),
            want: &["Default ≤ 100: a c", "Default ≤ 1000: b"],
        },
        Case {
            name: "same ceiling split by a selector: selected pods first",
            pods: vec![
                pod("db").label("app", "db"),
                pod("web").label("app", "web"),
                pod("x"),
            ],
            entries: Some(vec![
                entry_sel(Default, 1000, json!({"matchLabels": {"app": "db"}})),
                entry(Default, 1000),
            ]),
            want: &["Default ≤ 1000, app=db: db", "Default ≤ 1000: web x"],
        },
        Case {
            name: "entries may order selectors against the default priority order",
            pods: vec![
                pod("cache").prio(10).label("tier", "cache"),
                pod("api").prio(5),
            ],
            entries: Some(vec![
                entry_sel(
                    Default,
                    100,
                    json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["cache"]}]}),
                ),
                entry(Default, 100),
            ]),
            want: &[
                "Default ≤ 100, tier in (cache): cache",
                "Default ≤ 100: api",
            ],
        },
        Case {
            name: "all three types, each under its own entries",
            pods: vec![
                pod("web"),
                pod("proxy").ds().prio(SYSTEM_NODE_CRITICAL),
                pod("etcd").mirror().prio(SYSTEM_CLUSTER_CRITICAL),
            ],
            entries: Some(vec![
                entry(Default, 0),
                entry(DaemonSet, i32::MAX),
                entry(Static, i32::MAX),
            ]),
            want: &[
                "Default ≤ 0: web",
                "DaemonSet ≤ 2147483647: proxy",
                "Static ≤ 2147483647: etcd",
            ],
        },
        Case {
            name: "empty stages are dropped",
            pods: vec![pod("a").prio(10)],
            entries: Some(vec![
                entry(Default, 0),
                entry(Default, 10),
                entry(DaemonSet, 10),
            ]),
            want: &["Default ≤ 10: a"],
        },
        Case {
            name: "an empty entry list drains nothing but still deletes completed pods",
            pods: vec![pod("a"), pod("done").phase("Succeeded")],
            entries: Some(vec![]),
            want: &["completed: done", "skip a: NotInPlan"],
        },
        Case {
            name: "terminating pods keep their entry's stage",
            pods: vec![pod("a").deleting(), pod("b").prio(9).deleting()],
            entries: Some(vec![entry(Default, 5)]),
            want: &["Default ≤ 5: a(wait)", "skip b: NotInPlan"],
        },
        Case {
            name: "an empty selector selects every pod of the type",
            pods: vec![pod("a").label("x", "y"), pod("b")],
            entries: Some(vec![entry_sel(Default, 0, json!({}))]),
            want: &["Default ≤ 0, all labels: a b"],
        },
        Case {
            name: "negative ceilings",
            pods: vec![pod("neg").prio(-100), pod("zero")],
            entries: Some(vec![entry(Default, -1)]),
            want: &["Default ≤ -1: neg", "skip zero: NotInPlan"],
        },
        Case {
            name: "an entry with a malformed selector selects nothing, later entries still apply",
            pods: vec![pod("a"), pod("b").prio(5)],
            entries: Some(vec![
                entry_sel(
                    Default,
                    0,
                    json!({"matchExpressions": [{"key": "k", "operator": "Near"}]}),
                ),
                entry(Default, 5),
            ]),
            want: &["Default ≤ 5: a b"],
        },
        Case {
            name: "out-of-order entries are followed as given",
            pods: vec![pod("ds").ds(), pod("web")],
            entries: Some(vec![entry(DaemonSet, 0), entry(Default, 0)]),
            want: &["DaemonSet ≤ 0: ds", "Default ≤ 0: web"],
        },
    ]);
}

#[test]
fn stages_remember_their_entry_when_empty_ones_are_dropped() {
    let plan = build_plan(
        &[pod("a").ds()],
        Some(&[entry(Default, 0), entry(DaemonSet, 0)]),
        &opts(),
    );
    assert_eq!(plan.stages.len(), 1);
    assert_eq!((plan.stages[0].index, plan.stages[0].entry), (0, Some(1)));
}

#[test]
fn invalid_entries_are_reported_in_the_plan() {
    let bad_selector = [entry_sel(
        Default,
        0,
        json!({"matchExpressions": [{"key": "k", "operator": "Near"}]}),
    )];
    let plan = build_plan(&[pod("a")], Some(&bad_selector), &opts());
    assert_eq!(plan.warnings.len(), 2, "{:?}", plan.warnings);
    assert!(
        plan.warnings[0].contains("entry 0") && plan.warnings[0].contains("Near"),
        "{:?}",
        plan.warnings
    );
    assert!(
        plan.warnings[1].contains("entry 0 selects no pods"),
        "{:?}",
        plan.warnings
    );

    let out_of_order = [entry(Static, 0), entry(Default, 0)];
    let plan = build_plan(&[], Some(&out_of_order), &opts());
    assert_eq!(plan.warnings.len(), 1);
    assert!(
        plan.warnings[0].contains("entry 1 (podType Default) comes after entry 0 (podType Static)")
    );
}

#[test]
fn validate_entries_table() {
    let sel = |v: serde_json::Value| entry_sel(Default, 10, v);
    let cases: Vec<(&str, Vec<PlanEntry>, Option<&str>)> = vec![
        ("empty plan", vec![], None),
        (
            "KEP example order",
            vec![
                entry(Default, 0),
                entry(Default, 1000),
                entry(DaemonSet, 0),
                entry(Static, 0),
            ],
            None,
        ),
        (
            "equal ceilings are fine",
            vec![sel(json!({"matchLabels": {"a": "b"}})), entry(Default, 10)],
            None,
        ),
        (
            "lower type after higher",
            vec![entry(Default, 0), entry(Static, 0), entry(DaemonSet, 0)],
            Some(
                "drain plan entry 2 (podType DaemonSet) comes after entry 1 (podType Static); order the entries Default, then DaemonSet, then Static",
            ),
        ),
        (
            "priority going down",
            vec![
                entry(DaemonSet, 0),
                entry(DaemonSet, 100),
                entry(DaemonSet, 99),
            ],
            Some(
                "drain plan entry 2 (podType DaemonSet) has podPriority 99, lower than 100 in entry 1; list each type's priorities in ascending order",
            ),
        ),
        (
            "priority may restart with a new type",
            vec![entry(Default, 1000), entry(DaemonSet, 0)],
            None,
        ),
        (
            "unknown operator",
            vec![
                entry(Default, 0),
                sel(
                    json!({"matchExpressions": [{"key": "app", "operator": "Equals", "values": ["x"]}]}),
                ),
            ],
            Some(
                "drain plan entry 1: podSelector matchExpressions[0] (key \"app\") has operator \"Equals\"; use In, NotIn, Exists or DoesNotExist",
            ),
        ),
        (
            "In with no values",
            vec![sel(
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}),
            )],
            Some(
                "drain plan entry 0: podSelector matchExpressions[0] (key \"app\", operator In) has no values; give at least one",
            ),
        ),
        (
            "NotIn with values missing",
            vec![sel(
                json!({"matchExpressions": [{"key": "app", "operator": "Exists"}, {"key": "b", "operator": "NotIn"}]}),
            )],
            Some(
                "drain plan entry 0: podSelector matchExpressions[1] (key \"b\", operator NotIn) has no values; give at least one",
            ),
        ),
        (
            "Exists with values",
            vec![sel(
                json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}),
            )],
            Some(
                "drain plan entry 0: podSelector matchExpressions[0] (key \"app\", operator Exists) has values; remove them",
            ),
        ),
        (
            "empty key",
            vec![sel(json!({"matchLabels": {"": "x"}}))],
            Some(
                "drain plan entry 0: podSelector matchLabels has an empty key; name the label to match",
            ),
        ),
    ];
    let mut failures = Vec::new();
    for (name, entries, want) in &cases {
        let got = validate_entries(entries).err().map(|e| e.to_string());
        if got.as_deref() != *want {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn entries_deserialize_from_a_node_maintenance_spec() {
    let spec = json!([
        {"podType": "Default", "podPriority": 1000},
        {"podType": "DaemonSet", "podPriority": 2000001000, "podSelector": {"matchLabels": {"app": "x"}}},
        {"podType": "Static", "podPriority": 0}
    ]);
    let entries: Vec<PlanEntry> = serde_json::from_value(spec.clone()).unwrap();
    assert_eq!(entries[1].pod_type, DaemonSet);
    assert_eq!(entries[1].pod_priority, SYSTEM_NODE_CRITICAL);
    assert!(entries[1].pod_selector.is_some());
    assert_eq!(serde_json::to_value(&entries).unwrap(), spec);
    assert!(
        serde_json::from_value::<PlanEntry>(json!({"podType": "Batch", "podPriority": 0})).is_err()
    );
}
