//! Leases as the agent reads them from its watches: a reboot slot, the
//! status writer's Lease with its published drain order, medik8s' Lease of
//! a node. Input: the Lease's JSON. Checks: reading never fails; taking a
//! slot makes the agent its holder, giving it back leaves none and no boot
//! ID, renewing keeps the holder, a boot ID noted reads back; medik8s'
//! Lease held names medik8s' holder; every label value the agent writes
//! is one Kubernetes accepts.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use k8s_openapi::api::coordination::v1::Lease;
use libfuzzer_sys::fuzz_target;
use maintd::fuzzing;

/// `^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`, at most 63: a label value.
fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))))
}

fuzz_target!(|data: &[u8]| {
    let Some(doc) = common::json(data) else {
        return;
    };
    let orders = maintd::api::order::read(&doc);
    serde_json::to_string(&orders).expect("orders serialize");
    let Ok(lease) = serde_json::from_value::<Lease>(doc.clone()) else {
        return;
    };
    let now: jiff::Timestamp = "2026-03-01T12:00:00Z".parse().unwrap();
    let boot = fuzzing::lease_boot(&lease).map(str::to_string);
    let holder = fuzzing::lease_holder(&lease).map(str::to_string);
    let me = "node-a";
    let (h, b, taken, renewed, noted, released) =
        fuzzing::slot_lease(&lease, me, Some("boot-2"), now);
    assert_eq!((h, b), (holder.clone(), boot));
    assert_eq!(
        fuzzing::lease_holder(&taken),
        Some(me),
        "taking a slot holds it"
    );
    assert_eq!(
        fuzzing::lease_holder(&renewed),
        holder.as_deref(),
        "renewing keeps the holder"
    );
    assert_eq!(fuzzing::lease_boot(&noted), Some("boot-2"));
    assert_eq!(
        fuzzing::lease_holder(&released),
        None,
        "a slot given back is free"
    );
    assert_eq!(fuzzing::lease_boot(&released), None);
    for l in [&taken, &renewed, &noted, &released] {
        // As written (times at the API's microseconds), it reads back.
        let written = serde_json::to_value(l).expect("a Lease serializes");
        let back: Lease =
            serde_json::from_value(written.clone()).expect("a Lease the agent writes reads back");
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            written,
            "parse(render(x)) == x"
        );
    }
    for text in [
        holder.as_deref().unwrap_or(""),
        &lease.metadata.name.clone().unwrap_or_default(),
    ] {
        let v = fuzzing::lease_label_value(text);
        assert!(
            valid_label_value(&v),
            "label value {v:?} (from {text:?}) is not one Kubernetes accepts"
        );
    }
    let node_uid = lease.metadata.uid.clone().unwrap_or_default();
    let (steps, held, given_back) = fuzzing::medik8s_lease(&lease, me, &node_uid, now);
    for s in &steps {
        assert!(!s.is_empty());
    }
    assert_eq!(fuzzing::lease_holder(&held), Some(fuzzing::MEDIK8S_HOLDER));
    assert_eq!(fuzzing::lease_holder(&given_back), None);
});
