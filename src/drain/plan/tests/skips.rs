//! Pods that are never drained, and why the plan says so.

use super::*;

const KEY: &str = "maintd.io/draining";

#[test]
fn skip_rules_table() {
    run(vec![
        Case {
            name: "the agent's own pod, and only in its own namespace",
            pods: vec![pod("maintd-x1").ns("maintd"), pod("maintd-x1").ns("other")],
            entries: None,
            want: &[
                "Default ≤ 0: other/maintd-x1",
                "skip maintd/maintd-x1: OwnPod",
            ],
        },
        Case {
            name: "opt-out by label maintd.io/drain=skip",
            pods: vec![pod("a").label("maintd.io/drain", "skip"), pod("b")],
            entries: None,
            want: &[
                "Default ≤ 0: b",
                "skip a: OptOut(label maintd.io/drain=skip)",
            ],
        },
        Case {
            name: "opt-out by annotation maintd.io/drain=skip",
            pods: vec![pod("a").annot("maintd.io/drain", "skip").ds()],
            entries: None,
            want: &["skip a: OptOut(annotation maintd.io/drain=skip)"],
        },
        Case {
            name: "opt-out by Cluster API label",
            pods: vec![pod("a").label("cluster.x-k8s.io/drain", "skip").mirror()],
            entries: None,
            want: &["skip a: OptOut(label cluster.x-k8s.io/drain=skip)"],
        },
        Case {
            name: "other values, and the Cluster API key as an annotation, do not opt out",
            pods: vec![
                pod("a").label("maintd.io/drain", "Skip"),
                pod("b").annot("maintd.io/drain", "true"),
                pod("c").annot("cluster.x-k8s.io/drain", "skip"),
                pod("d").label("maintd.io/drain-other", "skip"),
            ],
            entries: None,
            want: &["Default ≤ 0: a b c d"],
        },
        Case {
            name: "an opted-out completed pod is left alone too",
            pods: vec![pod("a").phase("Succeeded").label("maintd.io/drain", "skip")],
            entries: None,
            want: &["skip a: OptOut(label maintd.io/drain=skip)"],
        },
        Case {
            name: "an opted-out pod is skipped even when an entry would select it",
            pods: vec![pod("a").label("maintd.io/drain", "skip")],
            entries: Some(vec![entry(PodType::Default, 0)]),
            want: &["skip a: OptOut(label maintd.io/drain=skip)"],
        },
        Case {
            name: "DaemonSet pod tolerating the drain taint by key (Exists)",
            pods: vec![pod("ds").ds().tol(KEY, "Exists", "", "NoSchedule")],
            entries: None,
            want: &["skip ds: ToleratesDrainTaint"],
        },
        Case {
            name: "DaemonSet pod tolerating everything (Exists, empty key, empty effect)",
            pods: vec![pod("ds").ds().tol("", "Exists", "", "")],
            entries: None,
            want: &["skip ds: ToleratesDrainTaint"],
        },
        Case {
            name: "Equal with the taint's empty value tolerates; with another value it does not",
            pods: vec![
                pod("equal").ds().tol(KEY, "Equal", "", "NoSchedule"),
                pod("default-op").ds().tol(KEY, "", "", ""),
                pod("other-value")
                    .ds()
                    .tol(KEY, "Equal", "yes", "NoSchedule"),
            ],
            entries: None,
            want: &[
                "DaemonSet ≤ 0: other-value",
                "skip default-op: ToleratesDrainTaint",
                "skip equal: ToleratesDrainTaint",
            ],
        },
        Case {
            name: "a toleration for another effect, another key, or an unknown operator does not count",
            pods: vec![
                pod("effect").ds().tol(KEY, "Exists", "", "NoExecute"),
                pod("key").ds().tol(
                    "node.kubernetes.io/unschedulable",
                    "Exists",
                    "",
                    "NoSchedule",
                ),
                pod("op").ds().tol(KEY, "Gt", "", "NoSchedule"),
            ],
            entries: None,
            want: &["DaemonSet ≤ 0: effect key op"],
        },
        Case {
            name: "only DaemonSet pods are kept for tolerating the taint",
            pods: vec![
                pod("web").tol("", "Exists", "", ""),
                pod("st").mirror().tol("", "Exists", "", ""),
            ],
            entries: None,
            want: &["Default ≤ 0: web", "Static ≤ 0: st"],
        },
    ]);
}

#[test]
fn taint_key_and_effect_come_from_the_options() {
    let pods = [pod("ds")
        .ds()
        .tol("example.com/drain", "Exists", "", "NoExecute")];
    let custom = PlanOptions {
        drain_taint_key: "example.com/drain".into(),
        drain_taint_effect: "NoExecute".into(),
        ..opts()
    };
    assert_eq!(
        render(&build_plan(&pods, None, &custom)),
        ["skip ds: ToleratesDrainTaint"]
    );
    assert_eq!(
        render(&build_plan(&pods, None, &opts())),
        ["DaemonSet ≤ 0: ds"]
    );
}

#[test]
fn tolerates_follows_kubernetes() {
    let t = |key: &str, operator: &str, value: &str, effect: &str| Toleration {
        key: key.into(),
        operator: operator.into(),
        value: value.into(),
        effect: effect.into(),
    };
    let cases = [
        (
            t("k", "Equal", "v", "NoSchedule"),
            ("k", "v", "NoSchedule"),
            true,
        ),
        (
            t("k", "Equal", "v", "NoSchedule"),
            ("k", "w", "NoSchedule"),
            false,
        ),
        (t("k", "", "v", ""), ("k", "v", "NoExecute"), true),
        (
            t("k", "Exists", "", ""),
            ("k", "anything", "PreferNoSchedule"),
            true,
        ),
        (
            t("", "Exists", "", "NoSchedule"),
            ("any", "", "NoSchedule"),
            true,
        ),
        (
            t("", "Exists", "", "NoSchedule"),
            ("any", "", "NoExecute"),
            false,
        ),
        (t("other", "Exists", "", ""), ("k", "", "NoSchedule"), false),
        (t("k", "exists", "", ""), ("k", "", "NoSchedule"), false),
    ];
    for (tol, (key, value, effect), want) in cases {
        assert_eq!(
            tolerates(&tol, key, value, effect),
            want,
            "{tol:?} vs {key}={value}:{effect}"
        );
    }
}

#[test]
fn an_opt_out_key_with_another_value_is_drained_with_a_warning() {
    let pods = vec![
        pod("a").label("maintd.io/drain", "Skip"),
        pod("b").annot("maintd.io/drain", "true"),
        pod("c").label("cluster.x-k8s.io/drain", "no"),
        pod("d").label("maintd.io/drain", "skip"),
        pod("e"),
    ];
    let plan = build_plan(&pods, None, &PlanOptions::default());
    assert_eq!(
        plan.warnings,
        [
            "pod ns/a: label maintd.io/drain=\"Skip\" does not opt out (only \"skip\" does; \"wait-completed\" waits for it to finish); the pod is drained",
            "pod ns/b: annotation maintd.io/drain=\"true\" does not opt out (only \"skip\" does; \"wait-completed\" waits for it to finish); the pod is drained",
            "pod ns/c: label cluster.x-k8s.io/drain=\"no\" does not opt out (only \"skip\" does; \"wait-completed\" waits for it to finish); the pod is drained",
        ]
    );
    let drained: Vec<&str> = plan
        .stages
        .iter()
        .flat_map(|s| s.pods.iter().map(|p| p.name.as_str()))
        .collect();
    assert_eq!(drained, ["a", "b", "c", "e"]);
}

#[test]
fn wait_completed_pods_stay_in_their_stage_to_be_waited_for_not_evicted() {
    let pods = vec![
        pod("a").label("maintd.io/drain", "wait-completed"),
        pod("b").annot("maintd.io/drain", "wait-completed"),
        pod("c").label("cluster.x-k8s.io/drain", "wait-completed"),
        // An annotation under Cluster API's key is not its rule (a label).
        pod("d").annot("cluster.x-k8s.io/drain", "wait-completed"),
        // Finished already: deleted as any completed pod.
        pod("e")
            .label("maintd.io/drain", "wait-completed")
            .phase("Succeeded"),
    ];
    let plan = build_plan(&pods, None, &PlanOptions::default());
    let actions: Vec<(&str, PodAction)> =
        plan.pods().map(|p| (p.name.as_str(), p.action)).collect();
    assert_eq!(
        actions,
        [
            ("e", PodAction::Delete),
            ("a", PodAction::WaitCompleted),
            ("b", PodAction::WaitCompleted),
            ("c", PodAction::WaitCompleted),
            ("d", PodAction::Evict),
        ]
    );
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
}
