//! The default plan: order across and within pod types, completed and
//! terminating pods, and notes on drained pods.

use super::*;

#[test]
fn default_plan_table() {
    run(vec![
        Case {
            name: "no pods, no stages",
            pods: vec![],
            entries: None,
            want: &[],
        },
        Case {
            name: "one pod, one stage",
            pods: vec![pod("a")],
            entries: None,
            want: &["Default ≤ 0: a"],
        },
        Case {
            name: "one stage per distinct priority, lowest first",
            pods: vec![
                pod("a").prio(1000),
                pod("b").prio(-5),
                pod("c"),
                pod("d").prio(1000),
            ],
            entries: None,
            want: &["Default ≤ -5: b", "Default ≤ 0: c", "Default ≤ 1000: a d"],
        },
        Case {
            name: "system-cluster-critical then system-node-critical last",
            pods: vec![
                pod("node").prio(SYSTEM_NODE_CRITICAL),
                pod("cluster").prio(SYSTEM_CLUSTER_CRITICAL),
                pod("user").prio(1_000_000_000),
            ],
            entries: None,
            want: &[
                "Default ≤ 1000000000: user",
                "Default ≤ 2000000000 (system-cluster-critical): cluster",
                "Default ≤ 2000001000 (system-node-critical): node",
            ],
        },
        Case {
            name: "type order wins over priority: Default, DaemonSet, Static",
            pods: vec![
                pod("static").mirror().prio(-10),
                pod("ds").ds().prio(-10),
                pod("web").prio(SYSTEM_NODE_CRITICAL),
            ],
            entries: None,
            want: &[
                "Default ≤ 2000001000 (system-node-critical): web",
                "DaemonSet ≤ -10: ds",
                "Static ≤ -10: static",
            ],
        },
        Case {
            name: "priority order inside DaemonSet and Static types too",
            pods: vec![
                pod("kube-proxy").ds().prio(SYSTEM_NODE_CRITICAL),
                pod("fluentd").ds().prio(100),
                pod("apiserver").mirror().prio(SYSTEM_NODE_CRITICAL),
                pod("etcd").mirror().prio(SYSTEM_CLUSTER_CRITICAL),
            ],
            entries: None,
            want: &[
                "DaemonSet ≤ 100: fluentd",
                "DaemonSet ≤ 2000001000 (system-node-critical): kube-proxy",
                "Static ≤ 2000000000 (system-cluster-critical): etcd",
                "Static ≤ 2000001000 (system-node-critical): apiserver",
            ],
        },
        Case {
            name: "extreme priorities order correctly",
            pods: vec![
                pod("max").prio(i32::MAX),
                pod("min").prio(i32::MIN),
                pod("zero"),
            ],
            entries: None,
            want: &[
                "Default ≤ -2147483648: min",
                "Default ≤ 0: zero",
                "Default ≤ 2147483647: max",
            ],
        },
        Case {
            name: "inside a stage: by namespace, then name",
            pods: vec![
                pod("b").ns("zz"),
                pod("z").ns("aa"),
                pod("a").ns("zz"),
                pod("m").ns("aa"),
            ],
            entries: None,
            want: &["Default ≤ 0: aa/m aa/z zz/a zz/b"],
        },
        Case {
            name: "static by mirror annotation alone, or by Node owner alone",
            pods: vec![
                pod("by-annotation").annot(MIRROR_ANNOTATION, "x").bare(),
                pod("by-owner").owned("Node", true),
            ],
            entries: None,
            want: &["Static ≤ 0: by-annotation by-owner"],
        },
        Case {
            name: "a DaemonSet owner that is not the controller makes a Default pod",
            pods: vec![
                pod("adopted").owned("DaemonSet", false),
                pod("job").owned("Job", true),
            ],
            entries: None,
            want: &["Default ≤ 0: adopted job"],
        },
        Case {
            name: "completed pods are deleted up front, not staged",
            pods: vec![
                pod("ok").phase("Succeeded"),
                pod("bad").phase("Failed").prio(5000),
                pod("ds-failed").ds().phase("Failed"),
                pod("run"),
            ],
            entries: None,
            want: &["Default ≤ 0: run", "completed: bad ds-failed ok"],
        },
        Case {
            name: "a completed static pod still goes through its stage",
            pods: vec![pod("static-job").mirror().phase("Succeeded")],
            entries: None,
            want: &["Static ≤ 0: static-job"],
        },
        Case {
            name: "terminating pods stay in their stage, only waited for",
            pods: vec![
                pod("a").deleting(),
                pod("b"),
                pod("c").ds().deleting().prio(7),
            ],
            entries: None,
            want: &["Default ≤ 0: a(wait) b", "DaemonSet ≤ 7: c(wait)"],
        },
        Case {
            name: "pending and unknown-phase pods are drained like running ones",
            pods: vec![
                pod("p").phase("Pending"),
                pod("u").phase(""),
                pod("x").phase("Unknown"),
            ],
            entries: None,
            want: &["Default ≤ 0: p u x"],
        },
    ]);
}

#[test]
fn bare_pods_and_empty_dir_are_drained_with_a_note() {
    let pods = [
        pod("bare").bare(),
        pod("cache").empty_dir(),
        pod("ds").ds().empty_dir(),
        pod("st").mirror().bare(),
    ];
    let plan = build_plan(&pods, None, &opts());
    let notes = |name: &str| {
        plan.pods()
            .find(|p| p.name == name)
            .map(|p| p.notes.clone())
            .unwrap()
    };
    assert_eq!(notes("bare"), vec![PodNote::NoController]);
    assert_eq!(notes("cache"), vec![PodNote::EmptyDir]);
    // DaemonSet and static pods come back by other means: no NoController note.
    assert_eq!(notes("ds"), vec![PodNote::EmptyDir]);
    assert_eq!(notes("st"), vec![]);
    assert!(plan.pods().all(|p| p.action == PodAction::Evict));
}

#[test]
fn planned_pods_carry_what_the_executor_needs() {
    let pods = [
        pod("slow").grace(120).prio(3),
        pod("fast").grace(0).prio(3),
        pod("done").phase("Failed"),
    ];
    let plan = build_plan(&pods, None, &opts());
    let stage = &plan.stages[0];
    assert_eq!(
        (stage.pod_type, stage.priority, stage.entry),
        (PodType::Default, 3, None)
    );
    assert_eq!(stage.slowest_grace_seconds(), 120);
    let slow = &stage.pods[1];
    assert_eq!(
        (slow.name.as_str(), slow.uid.as_str(), slow.grace_seconds),
        ("slow", "uid-slow", 120)
    );
    assert_eq!(plan.completed[0].action, PodAction::Delete);
}

#[test]
fn plan_is_the_same_whatever_the_input_order() {
    let pods = vec![
        pod("c").prio(2),
        pod("a").ds(),
        pod("b").prio(2).ns("x"),
        pod("d").mirror(),
        pod("e").phase("Succeeded"),
    ];
    let mut reversed = pods.clone();
    reversed.reverse();
    assert_eq!(
        build_plan(&pods, None, &opts()),
        build_plan(&reversed, None, &opts())
    );
}

#[test]
fn plan_serializes_for_the_status_endpoint() {
    let pods = [
        pod("a").bare(),
        pod("me").ns("maintd").edit(|p| p.name = "maintd-x1".into()),
    ];
    let json = serde_json::to_value(build_plan(&pods, None, &opts())).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "stages": [{
                "index": 0, "podType": "Default", "priority": 0, "label": "Default ≤ 0", "entry": null,
                "pods": [{
                    "namespace": "ns", "name": "a", "uid": "uid-a", "podType": "Default", "priority": 0,
                    "action": "Evict", "notes": [{"kind": "NoController"}], "graceSeconds": 30
                }]
            }],
            "completed": [],
            "skipped": [{
                "namespace": "maintd", "name": "maintd-x1", "uid": "uid-me", "podType": "Default",
                "reason": {"kind": "OwnPod"}
            }],
            "warnings": []
        })
    );
}
