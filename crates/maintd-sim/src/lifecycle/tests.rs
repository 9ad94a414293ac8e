//! Admission of EvictionRequests and Evictions, and the controller's
//! status transitions, as plain data.

use serde_json::{Value, json};

use super::status::{self, FAILED, TARGET_EVICTED, Target};
use super::*;

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
fn admission_refuses_what_the_kep_refuses() {
    let pod = json!({"pod": {"name": "web-1", "uid": UID}});
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"target": pod, "requesterName": "maintd.io/drain", "intent": "Eviction"}),
            "",
        ),
        (
            json!({"target": pod, "requesterName": "maintd.io/drain", "intent": "Withdrawn"}),
            "",
        ),
        (
            json!({"requesterName": "maintd.io/drain", "intent": "Eviction"}),
            "spec.target.pod: Required value",
        ),
        (
            json!({"target": {"pod": {"uid": UID}}, "requesterName": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.name: Required value",
        ),
        (
            json!({"target": {"pod": {"name": "Web_1", "uid": UID}}, "requesterName": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.name: Invalid value",
        ),
        (
            json!({"target": {"pod": {"name": "w"}}, "requesterName": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.uid: Required value",
        ),
        (
            json!({"target": {"pod": {"name": "w", "uid": "ABC"}}, "requesterName": "a.io/b", "intent": "Eviction"}),
            "spec.target.pod.uid: Invalid value",
        ),
        (
            json!({"target": pod, "intent": "Eviction"}),
            "spec.requesterName: Required value",
        ),
        (
            json!({"target": pod, "requesterName": "drain", "intent": "Eviction"}),
            "must be a domain-prefixed path",
        ),
        (
            json!({"target": pod, "requesterName": "Acme.io/drain", "intent": "Eviction"}),
            "prefix must be a DNS subdomain",
        ),
        (
            json!({"target": pod, "requesterName": "acme.io/", "intent": "Eviction"}),
            "the path must be",
        ),
        (
            json!({"target": pod, "requesterName": "nodes.k8s.io/drain", "intent": "Eviction"}),
            "are reserved",
        ),
        (
            json!({"target": pod, "requesterName": "kubernetes.io/drain", "intent": "Eviction"}),
            "are reserved",
        ),
        (
            json!({"target": pod, "requesterName": "a.io/b"}),
            "spec.intent: Required value",
        ),
        (
            json!({"target": pod, "requesterName": "a.io/b", "intent": "Evict"}),
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
        ["spec.target.pod: Required value"]
    );
}

#[test]
fn target_and_requester_are_immutable() {
    let old = request(
        json!({"target": {"pod": {"name": "a", "uid": UID}}, "requesterName": "a.io/b", "intent": "Eviction"}),
    );
    let mut withdrawn = old.clone();
    withdrawn["spec"]["intent"] = json!("Withdrawn");
    assert!(check_update(&def("EvictionRequest"), &old, &withdrawn).is_ok());
    for (field, value) in [
        ("target", json!({"pod": {"name": "b", "uid": UID}})),
        ("requesterName", json!("c.io/d")),
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
    let pod = json!({"spec": {"evictionResponders": [{"name": LIVE_MIGRATION}]}});
    let old =
        json!({"metadata": {"name": "e"}, "spec": {}, "status": status::initial(&pod, &[], "t0")});
    let mut new = old.clone();
    new["status"]["targetResponders"] = json!([{"name": IMPERATIVE_EVICTOR, "state": "Active"}]);
    assert!(check_update(&def("Eviction"), &old, &new).is_err());
    let mut new = old.clone();
    new["status"]["targetResponders"][0]["state"] = json!("Active");
    assert!(check_update(&def("Eviction"), &old, &new).is_ok());
}

fn requesters(intents: &[&str]) -> Vec<(String, String)> {
    intents
        .iter()
        .enumerate()
        .map(|(i, intent)| (format!("r{i}.io/x"), intent.to_string()))
        .collect()
}

fn states(s: &Value) -> Vec<String> {
    s["targetResponders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap().to_string())
        .collect()
}

fn reason(s: &Value, kind: &str) -> String {
    let c = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == kind)
        .unwrap();
    format!(
        "{}/{}",
        c["status"].as_str().unwrap(),
        c["reason"].as_str().unwrap()
    )
}

#[test]
fn responders_run_in_order_and_the_evictor_comes_last() {
    let pod = json!({"spec": {"evictionResponders": [{"name": LIVE_MIGRATION}, {"name": LIVE_MIGRATION}]}});
    let fresh = |_: &str| Some(0);
    let req = requesters(&["Eviction"]);
    let s0 = status::initial(&pod, &req, "t0");
    assert_eq!(
        states(&s0),
        ["Inactive", "Inactive"],
        "duplicates dropped, evictor appended"
    );
    assert_eq!(s0["targetResponders"][1]["name"], IMPERATIVE_EVICTOR);
    assert_eq!(reason(&s0, FAILED), "False/AwaitingEviction");

    let s1 = status::advance(&s0, &req, Target::Running, "t1", &fresh);
    assert_eq!(states(&s1), ["Active", "Inactive"]);
    assert_eq!(s1["responders"][0]["startTime"], "t1");
    assert_eq!(
        status::advance(&s1, &req, Target::Running, "t2", &fresh),
        s1,
        "nothing to do"
    );

    let mut done = s1.clone();
    done["responders"][0]["completionTime"] = json!("t2");
    let s2 = status::advance(&done, &req, Target::Running, "t3", &fresh);
    assert_eq!(states(&s2), ["Completed", "Active"]);

    let silent = |_: &str| Some(HEARTBEAT_DEADLINE_SECS + 1);
    let s3 = status::advance(&s2, &req, Target::Running, "t4", &silent);
    assert_eq!(states(&s3), ["Completed", "Interrupted"]);
    assert_eq!(reason(&s3, FAILED), "True/NoFurtherResponder");
    assert!(status::is_final(&s3));
}

#[test]
fn the_target_going_completes_and_withdrawal_cancels() {
    let pod = json!({"spec": {}});
    let fresh = |_: &str| Some(0);
    let both = requesters(&["Eviction", "Eviction"]);
    let active = status::advance(
        &status::initial(&pod, &both, "t0"),
        &both,
        Target::Running,
        "t1",
        &fresh,
    );

    for (target, why) in [
        (Target::Gone, "True/PodDeleted"),
        (Target::Terminal, "True/PodTerminal"),
    ] {
        let s = status::advance(&active, &both, target, "t2", &fresh);
        assert_eq!(reason(&s, TARGET_EVICTED), why);
        assert_eq!(reason(&s, FAILED), "False/Succeeded");
        assert_eq!(states(&s), ["Completed"]);
    }

    // One requester withdraws: the other still wants it.
    let one = requesters(&["Withdrawn", "Eviction"]);
    let s = status::advance(&active, &one, Target::Running, "t2", &fresh);
    assert_eq!(states(&s), ["Active"]);
    assert_eq!(s["requesters"][0]["intent"], "Withdrawn");

    // The last one's request is deleted: it counts as withdrawn.
    let s = status::advance(&s, &one[..1], Target::Running, "t3", &fresh);
    assert_eq!(states(&s), ["Canceled"]);
    assert_eq!(reason(&s, FAILED), "True/CanceledDueToNoRequesters");
    assert_eq!(
        s["requesters"].as_array().unwrap().len(),
        2,
        "requesters are never removed"
    );
    let later = status::advance(&s, &both, Target::Gone, "t4", &fresh);
    assert_eq!(later, s, "a final eviction stays so");
}

#[test]
fn requests_copy_the_outcome_and_keep_transition_times() {
    let pod = json!({"spec": {}});
    let ev = status::initial(&pod, &[], "t0");
    let r1 = status::request(&Value::Null, &status::outcome(&ev), 1, "t1");
    assert_eq!(reason(&r1, FAILED), "False/AwaitingEviction");
    assert_eq!(r1["observedGeneration"], 1);
    let r2 = status::request(&r1, &status::outcome(&ev), 1, "t2");
    assert_eq!(r2, r1, "same outcome, same status");
    let evicted = status::advance(&ev, &[], Target::Gone, "t3", &|_| Some(0));
    let r3 = status::request(&r2, &status::outcome(&evicted), 2, "t3");
    assert_eq!(reason(&r3, TARGET_EVICTED), "True/PodDeleted");
    assert_eq!(r3["conditions"][1]["lastTransitionTime"], "t3");
}
