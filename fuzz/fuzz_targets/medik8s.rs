//! medik8s' NodeMaintenance objects as the agent reads them (raw JSON, any
//! shape): `{"objects": [...], "node": "name"}`, or one object alone (node
//! `node-a`). Checks: an object asks for a drain only when it names the node
//! and is not being deleted; one awaiting the release of medik8s'
//! finalizer is never also a live request; every request becomes a
//! trigger line that names it.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use maintd::api::medik8s::{awaits_release, request_for};

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let (objects, node) = match doc.get("objects") {
        Some(objs) => (
            common::values(objs),
            doc["node"].as_str().unwrap_or("node-a").to_string(),
        ),
        None => (vec![doc.clone()], "node-a".to_string()),
    };
    for obj in &objects {
        let asks = request_for(obj, &node);
        if let Some(name) = asks {
            assert!(!name.is_empty());
            assert_eq!(Some(name), obj["metadata"]["name"].as_str());
            assert_eq!(obj["spec"]["nodeName"].as_str(), Some(node.as_str()));
        }
        assert!(
            !(asks.is_some() && awaits_release(obj, &node)),
            "an object being deleted does not ask for a drain"
        );
    }
    let objs: Vec<Arc<serde_json::Value>> = objects.into_iter().map(Arc::new).collect();
    let requests = maintd::trigger::medik8s::requests(&objs, &node);
    let mut desired = maintd::trigger::Desired::default();
    maintd::trigger::medik8s::contribute(&requests, &mut desired);
    assert_eq!(desired.evict, !requests.is_empty());
    for name in &requests {
        assert!(desired.sources.iter().any(|s| s.contains(name.as_str())));
    }
});
