//! The controller's status transitions, as plain data.

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

fn refusals(kind: &str, obj: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    check(&def(kind), obj, &mut causes);
    causes
        .into_iter()
        .map(|(f, m)| format!("{f}: {m}"))
        .collect()
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

fn names_and_priorities(s: &Value) -> Vec<(String, i64)> {
    s["targetResponders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn responders_run_by_priority_and_the_evictor_comes_last() {
    let pod = json!({"spec": {"evictionResponders": [
        {"name": "backup.example.io/snapshot", "priority": 5000},
        {"name": LIVE_MIGRATION, "priority": 10000},
        {"name": LIVE_MIGRATION, "priority": 20000},
    ]}});
    let fresh = |_: &str| Some(0);
    let req = requesters(&["Eviction"]);
    let s0 = status::initial(&pod, &req, "t0");
    assert_eq!(
        names_and_priorities(&s0),
        [
            (LIVE_MIGRATION.to_string(), 10000),
            ("backup.example.io/snapshot".to_string(), 5000),
            (IMPERATIVE_EVICTOR.to_string(), 100),
        ],
        "higher priority first, duplicates dropped, the evictor at 100"
    );
    assert_eq!(
        states(&s0),
        ["Active", "Inactive", "Inactive"],
        "the first responder is Active from the start"
    );
    assert_eq!(s0["responders"][0]["startTime"], "t0");
    assert_eq!(reason(&s0, FAILED), "False/AwaitingEviction");
    let eviction =
        json!({"spec": {"target": {"pod": {"name": "p", "uid": UID}}}, "status": s0.clone()});
    assert!(
        refusals("Eviction", &eviction).is_empty(),
        "the controller's own status is valid"
    );
    assert_eq!(
        status::advance(&s0, &req, Target::Running, "t1", &fresh),
        s0,
        "nothing to do"
    );

    let mut done = s0.clone();
    done["responders"][0]["completionTime"] = json!("t2");
    let s1 = status::advance(&done, &req, Target::Running, "t3", &fresh);
    assert_eq!(states(&s1), ["Completed", "Active", "Inactive"]);
    assert_eq!(s1["responders"][1]["startTime"], "t3");

    let silent = |_: &str| Some(HEARTBEAT_DEADLINE_SECS + 1);
    let s2 = status::advance(&s1, &req, Target::Running, "t4", &silent);
    assert_eq!(states(&s2), ["Completed", "Interrupted", "Active"]);
    let s3 = status::advance(&s2, &req, Target::Running, "t5", &silent);
    assert_eq!(states(&s3), ["Completed", "Interrupted", "Interrupted"]);
    assert_eq!(reason(&s3, FAILED), "True/NoFurtherResponder");
    assert!(status::is_final(&s3));
}

#[test]
fn equal_priorities_are_ordered_by_domain_from_the_top() {
    let mut list: Vec<(String, i64)> = [
        ("storage.example.io/move", 5000),
        ("backup.example.io/snapshot", 5000),
        ("data.example.com/copy", 5000),
        ("backup.example.io/archive", 5000),
        ("z.example.io/first", 6000),
    ]
    .iter()
    .map(|(n, p)| (n.to_string(), *p))
    .collect();
    status::sort_responders(&mut list);
    let names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "z.example.io/first",
            "data.example.com/copy",
            "backup.example.io/archive",
            "backup.example.io/snapshot",
            "storage.example.io/move",
        ]
    );
}

#[test]
fn participants_label_the_eviction_by_role() {
    let req = vec!["maintd.io/drain".to_string(), LIVE_MIGRATION.to_string()];
    let resp = vec![LIVE_MIGRATION.to_string(), IMPERATIVE_EVICTOR.to_string()];
    assert_eq!(
        status::roles(&req, &resp),
        [
            ("maintd.io/drain".to_string(), "requester"),
            (LIVE_MIGRATION.to_string(), "requester-responder"),
            (IMPERATIVE_EVICTOR.to_string(), "responder"),
        ]
    );
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
