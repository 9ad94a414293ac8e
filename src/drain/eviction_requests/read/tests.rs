//! Reading responders, states and progress from the objects as the API
//! server returns them (JSON decoded into k8s-openapi's types).

use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use serde_json::{Value, json};

use super::*;

const MIGRATOR: &str = "live-migration.kubevirt.io/migrator";

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("decodes")
}

fn request(status: Value) -> EvictionRequest {
    typed(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": "maintd-u", "namespace": "default"},
        "spec": {"requester": "maintd.io/drain", "intent": "Eviction",
                 "target": {"pod": {"name": "vm-1", "uid": "u"}}},
        "status": status,
    }))
}

fn eviction(status: Value) -> Eviction {
    typed(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "Eviction",
        "metadata": {"name": "pod-1-vm-1", "namespace": "default",
                     "labels": {"maintd.io/drain": "requester", MIGRATOR: "responder"}},
        "spec": {"target": {"pod": {"name": "vm-1", "uid": "u"}}},
        "status": status,
    }))
}

fn cond(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-11-26T00:00:00Z"})
}

#[test]
fn a_pods_own_responders_are_named_higher_priority_first() {
    let pod = json!({"spec": {"evictionResponders": [
        {"name": DEFAULT_RESPONDER, "priority": 100},
        {"name": "backup.example.io/snapshot", "priority": 5000},
        {"name": MIGRATOR, "priority": 10000},
        {"name": MIGRATOR, "priority": 1},
        {"name": "storage.example.io/move", "priority": 5000},
        {"name": "data.example.com/copy", "priority": 5000},
        {"name": "", "priority": 99999}, {"x": 1}, 7,
        {"name": "old.example.io/no-priority"}
    ]}});
    assert_eq!(
        own_responders(&pod),
        [
            MIGRATOR,
            // Equal priorities: by domain from the top (com before io),
            // then label by label (example.io: backup before storage).
            "data.example.com/copy",
            "backup.example.io/snapshot",
            "storage.example.io/move",
            "old.example.io/no-priority",
        ]
    );
    let default_only =
        json!({"spec": {"evictionResponders": [{"name": DEFAULT_RESPONDER, "priority": 100}]}});
    assert!(own_responders(&default_only).is_empty());
    assert!(own_responders(&json!({"spec": {"evictionResponders": "x"}})).is_empty());
    assert!(own_responders(&json!({})).is_empty());
}

#[test]
fn final_states_are_read_from_the_conditions() {
    let of = |conds: Value| state_of(&request(json!({"conditions": conds})), &[]);
    assert_eq!(
        of(json!([cond("TargetEvicted", "True", "PodDeleted", "")])),
        State::Evicted
    );
    assert_eq!(
        of(json!([cond(
            "Failed",
            "True",
            "CanceledDueToNoRequesters",
            ""
        )])),
        State::Canceled,
        "a cancellation is Failed with its reason: there is no Canceled condition"
    );
    assert_eq!(
        of(json!([cond(
            "Failed",
            "True",
            "NoFurtherResponder",
            "none left"
        )])),
        State::Failed {
            reason: "NoFurtherResponder".into(),
            message: "none left".into()
        }
    );
    assert_eq!(
        of(json!([cond("Canceled", "True", "Whatever", "")])),
        State::Pending("EvictionRequest made; no Eviction has been made of it yet".into()),
        "an unknown condition is no outcome, but a sign that something acts on it"
    );
}

#[test]
fn a_request_nothing_acted_on_is_told_apart_from_one_in_progress() {
    let waiting = json!([
        cond("Failed", "False", "AwaitingEviction", ""),
        cond("TargetEvicted", "False", "AwaitingEviction", "")
    ]);
    let cases: Vec<(Value, Vec<Eviction>, bool)> = vec![
        // Kubernetes 1.37.2: accepted, then nothing.
        (Value::Null, vec![], true),
        (json!({}), vec![], true),
        (json!({"conditions": []}), vec![], true),
        // Any condition, an observed generation or an Eviction is a sign.
        (json!({"conditions": waiting}), vec![], false),
        (json!({"observedGeneration": 1}), vec![], false),
        (Value::Null, vec![eviction(Value::Null)], false),
    ];
    for (status, evictions, untouched) in cases {
        let state = state_of(&request(status.clone()), &evictions);
        assert_eq!(
            state == State::Untouched,
            untouched,
            "{status} with {} Evictions: {state:?}",
            evictions.len()
        );
    }
}

#[test]
fn the_active_responder_is_named_with_its_words() {
    let st = json!({
        "targetResponders": [
            {"name": MIGRATOR, "priority": 10000, "state": "Active"},
            {"name": DEFAULT_RESPONDER, "priority": 100, "state": "Inactive"}
        ],
        "responders": [
            {"name": MIGRATOR, "startTime": "2026-11-26T00:59:00Z",
             "message": "Live migration of pod vm-1 to another node in progress.",
             "expectedCompletionTime": "2026-11-26T01:00:00Z"},
            {"name": DEFAULT_RESPONDER}
        ]
    });
    let words = "EvictionRequest: responder live-migration.kubevirt.io/migrator: Live migration of pod vm-1 to another node in progress (expected done by 2026-11-26T01:00:00Z)";
    assert_eq!(progress(Some(&eviction(st.clone()))), words);
    // The last Eviction not final is the one followed.
    let done =
        eviction(json!({"conditions": [cond("Failed", "True", "CanceledDueToNoRequesters", "")]}));
    assert_eq!(
        state_of(&request(Value::Null), &[eviction(st.clone()), done]),
        State::Pending(words.into())
    );

    let mut long = st.clone();
    long["responders"][0]["message"] = json!(format!("line\n{}", "x".repeat(5000)));
    let said = progress(Some(&eviction(long)));
    assert!(said.chars().count() < 400 && !said.contains('\n'), "{said}");
    let quiet =
        json!({"targetResponders": [{"name": "a.io/b", "priority": 1000, "state": "Active"}]});
    assert_eq!(
        progress(Some(&eviction(quiet))),
        "EvictionRequest: responder a.io/b is at work"
    );
    let none =
        json!({"targetResponders": [{"name": "a.io/b", "priority": 1000, "state": "Inactive"}]});
    assert!(progress(Some(&eviction(none))).contains("no responder is active"));
    assert!(progress(None).contains("no Eviction"));
    assert!(progress(Some(&eviction(Value::Null))).contains("no Eviction"));
}

#[test]
fn discovery_looks_for_the_evictionrequests_resource() {
    assert!(serves_requests(&json!({"resources": [
        {"name": "evictions"}, {"name": "evictionrequests"}
    ]})));
    assert!(!serves_requests(
        &json!({"resources": [{"name": "evictions"}]})
    ));
    assert!(!serves_requests(&json!({})));
}
