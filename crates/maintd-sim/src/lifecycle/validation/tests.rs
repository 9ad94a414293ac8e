//! Admission of EvictionRequests, Evictions and a Pod's responders, as
//! plain data.

use serde_json::{Value, json};

use super::{check, check_update};
use crate::lifecycle::{IMPERATIVE_EVICTOR, LIVE_MIGRATION, resources, status};
use crate::resources::ResourceDef;

const UID: &str = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";

fn def(kind: &str) -> ResourceDef {
    resources()
        .into_iter()
        .find(|d| d.kind == kind)
        .expect("served")
}

fn request(spec: Value) -> Value {
    json!({"metadata": {"name": "r", "namespace": "default"}, "spec": spec})
}

fn refusals(kind: &str, obj: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    check(&def(kind), obj, &mut causes);
    causes
        .into_iter()
        .map(|(f, m)| format!("{f}: {m}"))
        .collect()
}

#[test]
fn admission_refuses_what_kubernetes_1_37_refuses() {
    let pod = json!({"pod": {"name": "web-1", "uid": UID}});
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"target": pod, "requester": "maintd.io/drain", "intent": "Eviction"}),
            "",
        ),
        (
            json!({"target": pod, "requester": "maintd.io/drain", "intent": "Withdrawn"}),
            "",
        ),
        (
            json!({"requester": "maintd.io/drain", "intent": "Eviction"}),
            "spec.target: Invalid value: \"\": must specify one of: `pod`",
        ),
        (
            json!({"target": {"pod": {"uid": UID}}, "requester": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.name: Required value",
        ),
        (
            json!({"target": {"pod": {"name": "Web_1", "uid": UID}}, "requester": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.name: Invalid value",
        ),
        (
            json!({"target": {"pod": {"name": "w"}}, "requester": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.uid: Required value",
        ),
        (
            json!({"target": {"pod": {"name": "w", "uid": "ABC"}}, "requester": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.uid: Invalid value",
        ),
        (
            json!({"target": pod, "intent": "Eviction"}),
            "spec.requester: Required value",
        ),
        (
            // The KEP draft's field is no field of the merged API.
            json!({"target": pod, "requesterName": "maintd.io/drain", "intent": "Eviction"}),
            "spec.requester: Required value",
        ),
        (
            json!({"target": pod, "requester": "drain", "intent": "Eviction"}),
            "spec.requester: Invalid value: \"drain\": must include a prefix (e.g. 'example.com/key')",
        ),
        (
            json!({"target": pod, "requester": "Acme.io/drain", "intent": "Eviction"}),
            "prefix part a lowercase RFC 1123 subdomain must consist of",
        ),
        (
            json!({"target": pod, "requester": "acme.io/", "intent": "Eviction"}),
            "spec.requester: Invalid value: \"acme.io/\": name part must be non-empty",
        ),
        (
            json!({"target": pod, "requester": "nodes.k8s.io/drain", "intent": "Eviction"}),
            "domain names *.k8s.io, *.kubernetes.io are reserved",
        ),
        (
            json!({"target": pod, "requester": "kubernetes.io/drain", "intent": "Eviction"}),
            "are reserved",
        ),
        (
            json!({"target": pod, "requester": "a.io/b"}),
            "spec.intent: Required value",
        ),
        (
            json!({"target": pod, "requester": "a.io/b", "intent": "Evict"}),
            "spec.intent: Unsupported value: \"Evict\"",
        ),
    ];
    for (spec, want) in cases {
        let got = refusals("EvictionRequest", &request(spec.clone()));
        if want.is_empty() {
            assert!(got.is_empty(), "{spec}: {got:?}");
        } else {
            assert!(
                got.iter().any(|g| g.contains(want)),
                "{spec}: want {want:?}, got {got:?}"
            );
        }
    }
    let eviction = json!({"metadata": {"name": "e"}, "spec": {"target": {}}});
    assert_eq!(
        refusals("Eviction", &eviction),
        ["spec.target: Invalid value: \"\": must specify one of: `pod`"]
    );
}

#[test]
fn target_and_requester_are_immutable() {
    let old = request(
        json!({"target": {"pod": {"name": "a", "uid": UID}}, "requester": "a.io/b", "intent": "Eviction"}),
    );
    let mut withdrawn = old.clone();
    withdrawn["spec"]["intent"] = json!("Withdrawn");
    assert!(check_update(&def("EvictionRequest"), &old, &withdrawn).is_ok());
    for (field, value) in [
        ("target", json!({"pod": {"name": "b", "uid": UID}})),
        ("requester", json!("c.io/d")),
    ] {
        let mut new = old.clone();
        new["spec"][field] = value;
        let err = check_update(&def("EvictionRequest"), &old, &new).expect_err(field);
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("field is immutable"),
            "{}",
            err.message
        );
    }
}

#[test]
fn target_responders_cannot_be_added_or_removed() {
    let pod =
        json!({"spec": {"evictionResponders": [{"name": LIVE_MIGRATION, "priority": 10000}]}});
    let old =
        json!({"metadata": {"name": "e"}, "spec": {}, "status": status::initial(&pod, &[], "t0")});
    let mut new = old.clone();
    new["status"]["targetResponders"] =
        json!([{"name": IMPERATIVE_EVICTOR, "priority": 100, "state": "Active"}]);
    assert!(check_update(&def("Eviction"), &old, &new).is_err());
    let mut new = old.clone();
    new["status"]["targetResponders"][0]["state"] = json!("Completed");
    assert!(check_update(&def("Eviction"), &old, &new).is_ok());
}

#[test]
fn a_pods_responders_are_validated_as_kubernetes_1_37_does() {
    let pod = |responders: Value, extra: Value| {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "evictionResponders": responders,
        }});
        json_patch::merge(&mut p, &extra);
        p
    };
    let ok = |n: &str, p: i64| json!({"name": n, "priority": p});
    let cases: Vec<(Value, Value, &str)> = vec![
        (json!([ok(LIVE_MIGRATION, 10000)]), json!({}), ""),
        (
            json!([ok("a.io/b", 1000), ok("c.io/d", 100000)]),
            json!({}),
            "",
        ),
        (json!([]), json!({}), ""),
        (
            json!([{"name": LIVE_MIGRATION}]),
            json!({}),
            "spec.evictionResponders[0].priority: Required value",
        ),
        (
            json!([ok(LIVE_MIGRATION, 999)]),
            json!({}),
            "spec.evictionResponders[0].priority: Invalid value: 999: priorities 0-999 are reserved for responders with *.k8s.io suffix",
        ),
        (
            json!([ok(LIVE_MIGRATION, 100001)]),
            json!({}),
            "spec.evictionResponders[0].priority: Invalid value: 100001: must be less than or equal to 100000",
        ),
        (
            json!([ok(LIVE_MIGRATION, -1)]),
            json!({}),
            "spec.evictionResponders[0].priority: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            json!([{"priority": 5000}]),
            json!({}),
            "spec.evictionResponders[0].name: Required value",
        ),
        (
            json!([ok("migrator", 5000)]),
            json!({}),
            "must include a prefix (e.g. 'example.com/key')",
        ),
        (
            json!([ok("evict.k8s.io/x", 5000)]),
            json!({}),
            "domain names *.k8s.io, *.kubernetes.io are reserved",
        ),
        (
            json!([ok("a.io/b", 5000), ok("a.io/b", 6000)]),
            json!({}),
            "spec.evictionResponders[1]: Duplicate value: {\"name\":\"a.io/b\",\"priority\":6000}",
        ),
        (
            json!(
                (0..11)
                    .map(|i| ok(&format!("r{i}.io/x"), 5000))
                    .collect::<Vec<_>>()
            ),
            json!({}),
            "spec.evictionResponders: Too many: 11: must have at most 10 items",
        ),
        (
            json!([ok(LIVE_MIGRATION, 10000)]),
            json!({"spec": {"schedulingGroup": {"podGroupName": "g"}}}),
            "spec.schedulingGroup: Forbidden: may not be set when evictionResponders is set",
        ),
    ];
    let pods = crate::resources::builtins()
        .into_iter()
        .find(|d| d.kind == "Pod")
        .unwrap();
    for (responders, extra, want) in cases {
        let obj = pod(responders.clone(), extra);
        let got = match crate::validate::check(&pods, &obj) {
            Ok(()) => String::new(),
            Err(e) => e.message,
        };
        if want.is_empty() {
            assert!(got.is_empty(), "{responders}: {got}");
        } else {
            assert!(got.contains(want), "{responders}: want {want:?}, got {got}");
        }
    }
    let old = pod(json!([ok(LIVE_MIGRATION, 10000)]), json!({}));
    let mut new = old.clone();
    new["spec"]["evictionResponders"][0]["priority"] = json!(20000);
    let err = check_update(&pods, &old, &new).expect_err("immutable");
    assert!(
        err.message.contains("field is immutable"),
        "{}",
        err.message
    );
    assert!(check_update(&pods, &old, &old.clone()).is_ok());
}

#[test]
fn an_evictions_target_responders_are_validated() {
    let eviction = |responders: Value| {
        json!({"metadata": {"name": "e"}, "spec": {"target": {"pod": {"name": "p", "uid": UID}}},
               "status": {"targetResponders": responders}})
    };
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([{"name": IMPERATIVE_EVICTOR, "priority": 100, "state": "Active"}]),
            "",
        ),
        (
            json!([{"name": IMPERATIVE_EVICTOR, "priority": 200, "state": "Active"}]),
            "core k8s responder is expected to have priority: 100",
        ),
        (
            json!([{"name": LIVE_MIGRATION, "state": "Active"}]),
            "status.targetResponders[0].priority: Required value",
        ),
        (
            json!([{"name": LIVE_MIGRATION, "priority": 10000, "state": "Running"}]),
            "status.targetResponders[0].state: Unsupported value: \"Running\"",
        ),
    ];
    for (responders, want) in cases {
        let got = refusals("Eviction", &eviction(responders.clone()));
        if want.is_empty() {
            assert!(got.is_empty(), "{responders}: {got:?}");
        } else {
            assert!(
                got.iter().any(|g| g.contains(want)),
                "{responders}: want {want:?}, got {got:?}"
            );
        }
    }
}
