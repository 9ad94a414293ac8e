//! Pods as the watch delivers them (raw JSON, any shape), read leniently
//! and planned: `[pod, ...]`, or `{"pods": [...], "drainPlan": [...],
//! "ownPod": ["ns", "name"]}`. Checks: reading a pod never fails and says
//! each malformed field in words; a pod that decodes as Kubernetes' Pod
//! type reads the same both ways; the plan follows every rule (see
//! common/mod.rs).
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use k8s_openapi::api::core::v1::Pod;
use libfuzzer_sys::fuzz_target;
use maintd::drain::plan::{PlanEntry, PlanOptions, PodInfo};

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let raw = match doc.get("pods") {
        Some(pods) => common::values(pods),
        None => common::values(&doc),
    };
    if raw.len() > 256 {
        return;
    }
    let pods: Vec<PodInfo> = raw.iter().map(PodInfo::from_json).collect();
    for (v, pod) in raw.iter().zip(&pods) {
        if let Ok(typed) = serde_json::from_value::<Pod>(v.clone()) {
            assert_eq!(
                PodInfo::from_pod(&typed),
                *pod,
                "a typed pod reads as its JSON does"
            );
        }
    }
    let entries: Option<Vec<PlanEntry>> = doc
        .get("drainPlan")
        .and_then(|e| serde_json::from_value(e.clone()).ok());
    let own_pod = doc
        .get("ownPod")
        .and_then(|o| serde_json::from_value::<(String, String)>(o.clone()).ok());
    let opts = PlanOptions {
        own_pod,
        ..PlanOptions::default()
    };
    common::plan_and_check(&pods, entries.as_deref(), &opts);
});
