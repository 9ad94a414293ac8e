//! PodDisruptionBudgets as the agent reads them (raw JSON, any shape):
//! `{"budget": {...}, "labels": {...}, "pods": n}`, or a budget alone.
//! Checks: whether it selects a pod never fails; pods asking in turn
//! against one status take at most the disruptions it allows; a pod that
//! must wait is told why in words.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let (budget, labels, n) = match doc.get("budget") {
        Some(b) => (
            b.clone(),
            serde_json::from_value::<BTreeMap<String, String>>(doc["labels"].clone())
                .unwrap_or_default(),
            doc["pods"].as_u64().unwrap_or(3).min(64) as usize,
        ),
        None => (doc.clone(), BTreeMap::new(), 3),
    };
    let pods: Vec<(String, String)> = (0..n).map(|i| (format!("p{i}"), format!("u{i}"))).collect();
    let (_, claims) = maintd::fuzzing::budget_claims(&budget, &labels, &pods);
    let allowed = budget["status"]["disruptionsAllowed"]
        .as_i64()
        .unwrap_or(0)
        .max(0);
    let taken = claims.iter().filter(|c| matches!(c, Ok(true))).count();
    assert!(
        i64::try_from(taken).unwrap() <= allowed,
        "{taken} pods took a disruption of a budget allowing {allowed}"
    );
    for c in &claims {
        if let Err(words) = c {
            assert!(!words.trim().is_empty());
        }
    }
});
