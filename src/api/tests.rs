use serde_json::{Value, json};

use super::*;

fn nm(name: &str, created: &str, spec: Value) -> NodeMaintenance {
    parse(&json!({
        "apiVersion": "maintd.io/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name, "uid": name, "creationTimestamp": created},
        "spec": spec,
    }))
    .expect("decodes")
}

fn node(name: &str, labels: Value) -> Value {
    json!({"metadata": {"name": name, "labels": labels}})
}

#[test]
fn validate_names_every_problem() {
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"podType": "Default", "podPriority": i}))
        .collect();
    let cases: Vec<(Value, &[&str])> = vec![
        (json!({"nodeName": "a", "stage": "Drain"}), &[]),
        (
            json!({"nodeSelector": {"matchLabels": {"pool": "x"}}, "stage": "Cordon"}),
            &[],
        ),
        (json!({"nodeName": "a"}), &[]), // stage defaults to Idle
        (
            json!({"nodeName": "a", "stage": "Evacuate"}),
            &["spec.stage \"Evacuate\" is not a stage; use one of Idle, Cordon, Drain, Complete"],
        ),
        (
            json!({"nodeName": "a", "nodeSelector": {}, "stage": "Drain"}),
            &["spec sets both nodeName and nodeSelector; set exactly one"],
        ),
        (
            json!({"stage": "Drain"}),
            &["spec sets neither nodeName nor nodeSelector; set exactly one"],
        ),
        (json!({"nodeName": ""}), &["spec.nodeName is empty"]),
        (
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Matches", "values": ["x"]}]}}),
            &["spec.nodeSelector: matchExpressions[0] (key \"pool\") has operator \"Matches\""],
        ),
        (
            json!({"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]}}),
            &["spec.nodeSelector: matchExpressions[0] (key \"pool\", operator In) has no values"],
        ),
        (
            json!({"nodeName": "a", "drainPlan": [
                {"podType": "DaemonSet", "podPriority": 0},
                {"podType": "Default", "podPriority": 0}]}),
            &[
                "spec.drainPlan: drain plan entry 1 (podType Default) comes after entry 0 (podType DaemonSet)",
            ],
        ),
        (
            json!({"nodeName": "a", "drainPlan": [
                {"podType": "Default", "podPriority": 1000},
                {"podType": "Default", "podPriority": 10}]}),
            &[
                "spec.drainPlan: drain plan entry 1 (podType Default) has podPriority 10, lower than 1000",
            ],
        ),
        (
            json!({"nodeName": "a", "drainPlan": many}),
            &["spec.drainPlan has 1001 entries; at most 1000 are allowed"],
        ),
        (
            json!({"nodeName": "a", "reason": "x".repeat(2000)}),
            &["spec.reason is 2000 bytes long; at most 1024"],
        ),
        (
            json!({"nodeName": "a", "stageTimeoutSeconds": 0}),
            &["spec.stageTimeoutSeconds is 0; give 1 to 604800 seconds"],
        ),
        (
            json!({"nodeName": "a", "stageTimeoutSeconds": i64::MAX}),
            &["spec.stageTimeoutSeconds is 9223372036854775807; give 1 to 604800 seconds"],
        ),
        (
            json!({"nodeName": "a", "maxConcurrentDrains": i32::MAX}),
            &["spec.maxConcurrentDrains is 2147483647; give 1 to 100000"],
        ),
        (
            json!({"nodeName": "a", "waitForReboot": {}}),
            &["spec.waitForReboot needs spec.maxConcurrentDrains"],
        ),
        (
            json!({"nodeName": "a", "cordonAhead": 1}),
            &["spec.cordonAhead needs spec.maxConcurrentDrains"],
        ),
        (
            json!({"nodeName": "a", "maxConcurrentDrains": 2, "cordonAhead": -1}),
            &["spec.cordonAhead is -1; give 0 to 1000"],
        ),
        (
            json!({"nodeName": "a", "maxConcurrentDrains": 2, "cordonAhead": 1001}),
            &["spec.cordonAhead is 1001; give 0 to 1000"],
        ),
        (
            json!({"nodeName": "a", "maxConcurrentDrains": 2, "cordonAhead": 1000}),
            &[],
        ),
        (
            json!({"nodeName": "a", "maxConcurrentDrains": 2, "waitForReboot": {"timeoutSeconds": 1}}),
            &["spec.waitForReboot.timeoutSeconds is 1; give 5 to 604800 seconds"],
        ),
        (
            json!({"nodeName": "a", "maxConcurrentDrains": 2, "waitForReboot": {"timeoutSeconds": 60, "onTimeout": "Release"}}),
            &[],
        ),
        (
            json!({"nodeName": "n".repeat(254)}),
            &["spec.nodeName is 254 bytes long; a node name has at most 253"],
        ),
        (
            json!({"stage": "Later", "nodeName": "a", "nodeSelector": {}}),
            &[
                "spec.stage \"Later\"",
                "spec sets both nodeName and nodeSelector",
            ],
        ),
    ];
    for (spec, want) in cases {
        let got = validate(&nm("m", "2026-01-01T00:00:00Z", spec.clone()));
        match (got, want.is_empty()) {
            (Ok(()), true) => {}
            (Ok(()), false) => panic!("{spec}: valid, want {want:?}"),
            (Err(p), true) => panic!("{spec}: want valid, got {p:?}"),
            (Err(p), false) => {
                assert_eq!(p.len(), want.len(), "{spec}: {p:?}");
                for (p, w) in p.iter().zip(want) {
                    assert!(p.starts_with(w), "{spec}: {p:?} should start with {w:?}");
                }
            }
        }
    }
}

#[test]
fn what_does_not_decode_is_reported_with_the_object_name() {
    let bad = json!({
        "metadata": {"name": "typo"},
        "spec": {"nodeName": "a", "drainPlan": [{"podType": "Deployment", "podPriority": 0}]},
    });
    let err = parse(&bad).unwrap_err();
    assert!(
        err[0].starts_with("NodeMaintenance \"typo\" does not decode"),
        "{err:?}"
    );
    assert!(err[0].contains("Deployment"), "{err:?}");
}

#[test]
fn selects_by_name_or_labels_and_never_when_malformed() {
    let n = node("node-a", json!({"pool": "gpu", "zone": "z1"}));
    let cases = [
        (json!({"nodeName": "node-a"}), true),
        (json!({"nodeName": "node-b"}), false),
        (
            json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}}),
            true,
        ),
        (
            json!({"nodeSelector": {"matchLabels": {"pool": "cpu"}}}),
            false,
        ),
        (json!({"nodeSelector": {}}), true),
        (
            json!({"nodeSelector": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}}),
            true,
        ),
        (
            json!({"nodeSelector": {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}}),
            false,
        ),
        (
            json!({"nodeSelector": {"matchExpressions": [{"key": "zone", "operator": "Bogus"}]}}),
            false,
        ),
        (json!({"nodeName": "node-a", "nodeSelector": {}}), false),
        (json!({}), false),
    ];
    for (spec, want) in cases {
        assert_eq!(
            selects(&nm("m", "2026-01-01T00:00:00Z", spec.clone()), &n),
            want,
            "{spec}"
        );
    }
}

fn plan(prio: i32) -> Value {
    json!([{"podType": "Default", "podPriority": prio}])
}

#[test]
fn furthest_stage_wins_and_the_oldest_object_at_it_gives_the_plan() {
    let a = node("node-a", json!({"pool": "gpu"}));
    let old = "2026-01-01T00:00:00Z";
    let new = "2026-02-01T00:00:00Z";
    // (objects, want: None or (stage, plan ceiling, from))
    type Want = Option<(&'static str, Option<i32>, &'static [&'static str])>;
    let cases: Vec<(Vec<NodeMaintenance>, Want)> = vec![
        (vec![], None),
        (
            vec![nm(
                "other",
                old,
                json!({"nodeName": "node-b", "stage": "Drain"}),
            )],
            None,
        ),
        (
            vec![nm("idle", old, json!({"nodeName": "node-a"}))],
            Some(("Idle", None, &["idle"])),
        ),
        (
            vec![
                nm(
                    "cordon",
                    old,
                    json!({"nodeName": "node-a", "stage": "Cordon"}),
                ),
                nm(
                    "drain",
                    new,
                    json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "stage": "Drain", "drainPlan": plan(7)}),
                ),
            ],
            Some(("Drain", Some(7), &["drain"])),
        ),
        (
            vec![
                nm(
                    "young",
                    new,
                    json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": plan(2)}),
                ),
                nm(
                    "elder",
                    old,
                    json!({"nodeSelector": {}, "stage": "Drain", "drainPlan": plan(1)}),
                ),
            ],
            Some(("Drain", Some(1), &["elder", "young"])),
        ),
        (
            // Same age: the name decides.
            vec![
                nm(
                    "b",
                    old,
                    json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": plan(2)}),
                ),
                nm("a", old, json!({"nodeName": "node-a", "stage": "Drain"})),
            ],
            Some(("Drain", None, &["a", "b"])),
        ),
        (
            // Complete is done: it neither wins nor keeps the node cordoned.
            vec![
                nm(
                    "done",
                    old,
                    json!({"nodeName": "node-a", "stage": "Complete"}),
                ),
                nm(
                    "cordon",
                    new,
                    json!({"nodeName": "node-a", "stage": "Cordon"}),
                ),
            ],
            Some(("Cordon", None, &["cordon"])),
        ),
        (
            vec![nm(
                "done",
                old,
                json!({"nodeName": "node-a", "stage": "Complete"}),
            )],
            None,
        ),
        (
            // Invalid objects ask nothing, even at a further stage.
            vec![
                nm(
                    "bad",
                    old,
                    json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": [
                    {"podType": "Static", "podPriority": 0}, {"podType": "Default", "podPriority": 0}]}),
                ),
                nm(
                    "unknown",
                    old,
                    json!({"nodeName": "node-a", "stage": "Evacuate"}),
                ),
                nm("ok", new, json!({"nodeName": "node-a", "stage": "Cordon"})),
            ],
            Some(("Cordon", None, &["ok"])),
        ),
    ];
    for (objs, want) in cases {
        let names: Vec<_> = objs.iter().map(|o| o.metadata.name.clone()).collect();
        let got = effective(&objs, &a);
        let got = got.as_ref().map(|e| {
            (
                e.stage.as_str().to_string(),
                e.entries.as_ref().map(|p| p[0].pod_priority),
                e.from.clone(),
            )
        });
        let want = want.map(|(s, p, f)| {
            (
                s.to_string(),
                p,
                f.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        });
        assert_eq!(got, want, "{names:?}");
    }
}

#[test]
fn effective_says_what_to_do_and_where_it_comes_from() {
    let a = node("node-a", json!({}));
    let objs = [
        nm(
            "kernel",
            "2026-01-01T00:00:00Z",
            json!({"nodeName": "node-a", "stage": "Drain", "reason": "kernel 6.9"}),
        ),
        nm(
            "rack",
            "2026-01-02T00:00:00Z",
            json!({"nodeSelector": {}, "stage": "Drain"}),
        ),
    ];
    let e = effective(&objs, &a).unwrap();
    assert!(e.active() && e.evict());
    assert_eq!(e.reason, "kernel 6.9");
    assert_eq!(
        e.describe(),
        "NodeMaintenance kernel (stage Drain; also: rack)"
    );
    let cordon = [nm(
        "c",
        "2026-01-01T00:00:00Z",
        json!({"nodeName": "node-a", "stage": "Cordon"}),
    )];
    let e = effective(&cordon, &a).unwrap();
    assert!(e.active() && !e.evict());
    assert_eq!(e.describe(), "NodeMaintenance c (stage Cordon)");
}

#[test]
fn crd_schema_carries_the_rules_the_derive_cannot() {
    let crd = serde_json::to_value(crd().unwrap()).unwrap();
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["group"], "maintd.io");
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert!(v["subresources"]["status"].is_object());
    let s = &v["schema"]["openAPIV3Schema"]["properties"];
    assert_eq!(
        s["spec"]["x-kubernetes-validations"][0]["rule"],
        "has(self.nodeName) != has(self.nodeSelector)"
    );
    assert_eq!(
        s["spec"]["properties"]["stage"]["enum"],
        json!(["Idle", "Cordon", "Drain", "Complete"])
    );
    let entry = &s["spec"]["properties"]["drainPlan"];
    assert_eq!(entry["maxItems"], 1000);
    assert_eq!(
        entry["items"]["properties"]["podType"]["enum"],
        json!(["Default", "DaemonSet", "Static"])
    );
    let attention = &s["status"]["properties"]["attention"];
    assert_eq!(attention["x-kubernetes-list-type"], "map");
    assert_eq!(attention["x-kubernetes-list-map-keys"], json!(["nodeName"]));
    assert_eq!(attention["maxItems"], 50);
    let cols: Vec<_> = v["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        cols,
        [
            "Stage", "Selected", "Drained", "Blocked", "Order", "Reason", "Age"
        ]
    );
    let nd = serde_json::to_value(crate::api::nodedrain_crd().unwrap()).unwrap();
    assert_eq!(nd["spec"]["scope"], "Cluster");
    assert_eq!(nd["metadata"]["name"], "nodedrains.maintd.io");
    let v = &nd["spec"]["versions"][0];
    assert!(v["subresources"]["status"].is_object());
    assert_eq!(
        v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["blockers"]["maxItems"],
        10
    );
}
