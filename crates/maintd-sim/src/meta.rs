//! Small helpers over object metadata shared by the simulator's parts.

use serde_json::{Value, json};

/// Now as a Kubernetes `Time` (RFC 3339, whole seconds, UTC).
pub fn now_time() -> String {
    time_after(0)
}

/// Now plus `secs` as a Kubernetes `Time`.
pub fn time_after(secs: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as a Kubernetes `MicroTime`.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Seconds since a Kubernetes timestamp, or None if it does not parse.
pub fn age_secs(time: &str) -> Option<i64> {
    let t: jiff::Timestamp = time.parse().ok()?;
    Some(jiff::Timestamp::now().duration_since(t).as_secs())
}

/// A random UUID (version 4) for metadata.uid.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]) & 0x0fff,
        (u16::from_be_bytes([b[8], b[9]]) & 0x3fff) | 0x8000,
        u64::from_be_bytes([0, 0, b[10], b[11], b[12], b[13], b[14], b[15]]),
    )
}

/// Five lowercase alphanumerics, as the apiserver appends to a generateName.
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

pub fn name(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace(obj: &Value) -> &str {
    obj["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub fn rv(obj: &Value) -> &str {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
}

pub fn uid(obj: &Value) -> &str {
    obj["metadata"]["uid"].as_str().unwrap_or_default()
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

/// The controller owner reference (kind, name, uid), if any.
pub fn controller_of(obj: &Value) -> Option<(&str, &str, &str)> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"].as_bool() == Some(true))
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default(),
                o["name"].as_str().unwrap_or_default(),
                o["uid"].as_str().unwrap_or_default(),
            )
        })
}

/// An owner reference to `owner` marking it as the controller.
pub fn controller_ref(api_version: &str, kind: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": name(owner),
        "uid": uid(owner),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

pub fn is_terminating(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}

/// A pod counts as Ready when its Ready condition is True.
pub fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

pub fn node_ready(node: &Value) -> bool {
    pod_ready(node)
}

/// A non-negative number of seconds from an annotation; malformed values are
/// treated as absent.
pub fn seconds_annotation(obj: &Value, key: &str) -> Option<f64> {
    annotation(obj, key)
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
}

/// DNS-1123 subdomain: what most object names must be.
pub fn valid_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}
