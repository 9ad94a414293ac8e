//! The agent's Node as its watch delivers it (raw JSON, any shape): the
//! drain taint, the reboot turn annotations, the drain order label, the
//! lifecycle conditions others hold, who else cordoned it. Checks: reading
//! never fails; a drain taint found is one of the keys asked for and its
//! warnings are words; ending a turn records it as done (state Done, at
//! most the remembered number, the record cleared when it was this turn);
//! a bad drain order label is said in words.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use maintd::api::{order, turns};
use serde_json::Value;

/// A JSON merge patch of the Node's annotations (what `done_patch` is).
fn merged(node: &Value, patch: &Value) -> Value {
    let mut out = node.clone();
    // A merge patch makes objects of what it goes through (RFC 7386).
    if !out["metadata"].is_object() {
        out["metadata"] = serde_json::json!({});
    }
    if !out["metadata"]["annotations"].is_object() {
        out["metadata"]["annotations"] = serde_json::json!({});
    }
    for (k, v) in patch.as_object().expect("a patch is an object") {
        let annotations = out["metadata"]["annotations"].as_object_mut().unwrap();
        if v.is_null() {
            annotations.remove(k);
        } else {
            annotations.insert(k.clone(), v.clone());
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some(node) = common::json(data) else {
        return;
    };
    if !node.is_object() {
        return;
    }
    let keys = vec![
        "maintd.io/drain".to_string(),
        "example.com/maintenance".to_string(),
    ];
    if let Some(t) = maintd::trigger::taint::find(&node, &keys) {
        assert!(keys.contains(&t.key));
        assert!(!t.describe().is_empty());
        for w in t.warnings() {
            assert!(!w.trim().is_empty());
        }
    }
    match order::of_node(&node) {
        Ok(n) => assert!((0..=order::MAX_ORDER).contains(&n)),
        Err(e) => assert!(!e.trim().is_empty()),
    }
    let _ = maintd::cluster::unschedulable_owners(&node);
    let _ = maintd::report::conditions::held_by_others(&node);
    let _ = turns::ready(&node);
    let _ = turns::boot_id(&node);
    let record = turns::record(&node);
    // Uids are the API server's (UUIDs): one word each.
    let mut uids: Vec<String> = turns::done(&node);
    uids.extend(record.iter().map(|r| r.uid.clone()));
    uids.push("0b6c3c1e-5d1f-4f57-9f0e-1d2d9b4c7a11".into());
    for uid in uids
        .iter()
        .filter(|u| !u.is_empty() && !u.contains(char::is_whitespace))
    {
        let _ = turns::state(uid, &node);
        let patch = turns::done_patch(&node, uid);
        let after = merged(&node, &patch);
        assert_eq!(
            turns::state(uid, &after),
            turns::TurnState::Done,
            "a turn ended is done"
        );
        assert!(turns::done(&after).len() <= turns::MAX_DONE);
        if record.as_ref().is_some_and(|r| &r.uid == uid) {
            assert!(
                turns::record(&after).is_none(),
                "the turn under way is cleared"
            );
        }
    }
    if let Some(r) = &record {
        let patch = turns::start_patch(r);
        let after = merged(&node, &patch);
        assert_eq!(
            turns::record(&after).as_ref(),
            Some(r),
            "parse(render(x)) == x"
        );
    }
});
