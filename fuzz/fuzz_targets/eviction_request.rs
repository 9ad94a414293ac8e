//! The EvictionRequest API as the agent reads it: a pod's declared
//! responders (raw JSON), an EvictionRequest and the Evictions made of it
//! (Kubernetes 1.37's types). Input:
//! `{"pod": {...}, "request": {...}, "evictions": [...]}`.
//! Checks: reading never fails; responders are named, distinct, never the
//! default evictor; what the agent says of a request's progress is one line
//! of bounded length.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use libfuzzer_sys::fuzz_target;
use maintd::drain::eviction_requests::{self as read};

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let responders = read::own_responders(&doc["pod"]);
    for (i, r) in responders.iter().enumerate() {
        assert!(!r.is_empty());
        assert!(!responders[..i].contains(r), "responders are distinct");
    }
    let evictions: Vec<Eviction> = common::values(&doc["evictions"])
        .into_iter()
        .filter_map(|e| serde_json::from_value(e).ok())
        .collect();
    for e in &evictions {
        let said = read::progress(Some(e));
        assert!(!said.contains('\n'), "progress is one line: {said:?}");
        assert!(
            said.chars().count() <= 1024,
            "progress is bounded: {} chars",
            said.chars().count()
        );
    }
    if let Ok(request) = serde_json::from_value::<EvictionRequest>(doc["request"].clone()) {
        match read::state_of(&request, &evictions) {
            read::State::Pending(said) => {
                assert!(!said.contains('\n'));
                assert!(said.chars().count() <= 1024);
            }
            read::State::Failed { .. } | read::State::Evicted | read::State::Canceled => {}
            read::State::Untouched => assert!(evictions.is_empty()),
            read::State::Missing => panic!("a request read is not missing"),
        }
    }
});
