//! NodeMaintenance objects as the agent reads them from its watch (raw
//! JSON, any shape), against a Node and its pods: `{"objects": [...],
//! "node": {...}, "pods": [...]}`, or one object alone. Checks: every
//! object is either valid or invalid with each problem said in words, and
//! its Valid condition fits a Kubernetes Condition; a valid object reads
//! back the same after it is written out (parse(render(x)) == x); what
//! the objects ask of the node comes from valid objects only, and the
//! drain plan it brings follows every rule (see common/mod.rs).
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use maintd::api;
use maintd::drain::plan::{PlanOptions, PodInfo, validate_entries};
use serde_json::{Value, json};

/// metav1.Condition's limit on a message.
const CONDITION_MESSAGE_MAX: usize = 32768;

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let (objects, node, pods) = match doc.get("objects") {
        Some(objs) => (
            common::values(objs),
            doc.get("node").cloned().unwrap_or(Value::Null),
            common::values(doc.get("pods").unwrap_or(&Value::Null)),
        ),
        None => (
            vec![doc.clone()],
            json!({"metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}}}),
            Vec::new(),
        ),
    };
    if objects.len() > 32 || pods.len() > 64 {
        return;
    }
    for obj in &objects {
        let verdict = api::parse(obj).and_then(|nm| {
            let checked = api::validate(&nm);
            if checked.is_ok() {
                let written = serde_json::to_value(&nm).expect("a NodeMaintenance serializes");
                let again = api::parse(&written).expect("a valid object reads back");
                assert_eq!(again.metadata, nm.metadata, "parse(render(x)) == x");
                assert_eq!(again.spec, nm.spec, "parse(render(x)) == x");
                assert_eq!(again.status, nm.status, "parse(render(x)) == x");
                assert!(api::validate(&again).is_ok());
            }
            checked
        });
        if let Err(problems) = &verdict {
            assert!(!problems.is_empty(), "an invalid object says why");
            for p in problems {
                assert!(!p.trim().is_empty(), "each problem is said in words");
            }
        }
        let condition = api::status::valid_condition(obj, &verdict, "2026-01-01T00:00:00Z");
        let message = condition["message"]
            .as_str()
            .expect("a condition has a message");
        assert!(!message.is_empty());
        assert!(
            message.chars().count() <= CONDITION_MESSAGE_MAX,
            "the Valid condition's message is {} characters; a Condition allows {CONDITION_MESSAGE_MAX}",
            message.chars().count()
        );
    }
    let objs: Vec<Arc<Value>> = objects.into_iter().map(Arc::new).collect();
    let eval = maintd::trigger::maintenance::evaluate(&objs, &node);
    assert_eq!(eval.valid.len() + eval.invalid.len(), objs.len());
    for invalid in &eval.invalid {
        assert!(!invalid.problems.is_empty());
    }
    let _ = eval.invalid_selecting(&node);
    let Some(effective) = &eval.effective else {
        return;
    };
    assert!(
        eval.valid.iter().any(|nm| api::selects(nm, &node)),
        "only a valid object that selects the node asks something of it"
    );
    let mut desired = maintd::trigger::Desired::default();
    maintd::trigger::maintenance::contribute(Some(effective), &mut desired);
    if let Some(entries) = &effective.entries {
        assert!(
            validate_entries(entries).is_ok(),
            "an effective plan is valid"
        );
    }
    let pods: Vec<PodInfo> = pods.iter().map(PodInfo::from_json).collect();
    common::plan_and_check(&pods, effective.entries.as_deref(), &PlanOptions::default());
});
