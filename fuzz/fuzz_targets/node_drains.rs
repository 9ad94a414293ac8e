//! The status writer's reading of NodeDrain objects (raw JSON, any shape):
//! `{"maintenance": "name", "drains": [...]}`, or a list of NodeDrains
//! (maintenance `m`). The writer keeps only what its aggregates read.
//! Checks: a NodeDrain trimmed aggregates, and orders the rollout, exactly
//! as the whole one does; a status decoded reads back the same after it is
//! written out (parse(render(x)) == x).
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use maintd::api::nodedrain::NodeDrainStatus;
use maintd::api::{order, status};

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let (name, whole) = match doc.get("drains") {
        Some(d) => (
            doc["maintenance"].as_str().unwrap_or("m").to_string(),
            common::values(d),
        ),
        None => ("m".to_string(), common::values(&doc)),
    };
    if whole.len() > 128 {
        return;
    }
    let mut trimmed = whole.clone();
    for d in &mut trimmed {
        maintd::fuzzing::trim_node_drain(d);
    }
    // Those whose whole status decodes (the trimmed one may decode where
    // the whole does not: a malformed field it does not keep).
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (w, t) in whole.iter().zip(&trimmed) {
        if let Ok(s) = serde_json::from_value::<NodeDrainStatus>(w["status"].clone()) {
            a.push(s);
            b.push(
                serde_json::from_value::<NodeDrainStatus>(t["status"].clone())
                    .expect("a NodeDrain that decodes whole decodes trimmed"),
            );
        }
    }
    assert_eq!(
        status::aggregate(&name, &a),
        status::aggregate(&name, &b),
        "the aggregates of trimmed NodeDrains are those of the whole ones"
    );
    let (la, lb) = (order::lowest(&a), order::lowest(&b));
    assert_eq!(la, lb, "the lowest orders are the same");
    assert_eq!(order::waiting(&a, &la), order::waiting(&b, &lb));
    for s in &a {
        let written = serde_json::to_value(s).expect("a NodeDrain status serializes");
        let back: NodeDrainStatus =
            serde_json::from_value(written).expect("a NodeDrain status reads back");
        assert_eq!(&back, s, "parse(render(x)) == x");
    }
});
