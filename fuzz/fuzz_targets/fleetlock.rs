//! FleetLock requests as Zincati (or anyone on the node) sends them: the
//! `fleet-lock-protocol` header's value and the body. Input: the first
//! line is the header's value, the rest the body. Checks: a refused request
//! gets the protocol's error reply with a kind and a reason in words; an
//! accepted one has an id and a group whose reboot slot Leases can be
//! created (a valid Lease name and label value).
#![no_main]

use libfuzzer_sys::fuzz_target;
use maintd::fleetlock::parse_request;

/// A DNS-1123 subdomain, as Kubernetes wants an object's name.
fn valid_name(n: &str) -> bool {
    n.len() <= 253
        && !n.is_empty()
        && n.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))))
}

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"true"[..], data),
    };
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_bytes(header) {
        headers.insert(maintd::fleetlock::PROTOCOL_HEADER, v);
    }
    match parse_request(&headers, body) {
        Ok(params) => {
            assert!(!params.id.trim().is_empty());
            for index in [0, 1, 99] {
                let name = maintd::coordination::slot_name(&params.group, index);
                assert!(
                    valid_name(&name),
                    "group {:?} gives the Lease name {name:?}",
                    params.group
                );
            }
            let label = maintd::fuzzing::lease_label_value(&params.group);
            assert!(
                valid_label_value(&label),
                "group {:?} gives the label value {label:?}",
                params.group
            );
        }
        Err(reply) => {
            assert_eq!(reply.status, 400);
            assert!(!reply.kind.is_empty());
            assert!(!reply.value.trim().is_empty(), "a refusal says why");
            let body: serde_json::Value =
                serde_json::from_slice(&reply.body()).expect("the reply is JSON");
            assert_eq!(body["kind"], reply.kind.as_str());
        }
    }
});
