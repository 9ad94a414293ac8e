//! `metadata.managedFields` entries: decoding, manager identity, encoding in
//! Kubernetes' order.

use serde_json::{Map, Value, json};

use super::fieldset::{self, FieldSet};

/// One entry of `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether `self` is the entry of this writer. Kubernetes keys appliers
    /// by (manager, subresource) and updaters also by apiVersion
    /// (`BuildManagerIdentifier`).
    pub fn is(
        &self,
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        api_version: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == "Apply" || self.api_version == api_version)
    }

    /// How conflicts name this manager (`printManager`):
    /// `"mgr"`, `"mgr" with subresource "status"`, `"mgr" using v1`.
    pub fn printed(&self) -> String {
        let mut out = format!("{}", Value::String(self.manager.clone()));
        if let Some(sub) = &self.subresource {
            out.push_str(&format!(" with subresource {}", Value::String(sub.clone())));
        }
        if self.operation == "Update" {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// The `managedFields` of `obj`, or `None` when absent, empty or
/// undecodable (Kubernetes then starts over from an empty set).
pub(super) fn decode(obj: &Value) -> Option<Vec<Entry>> {
    let entries = obj.pointer("/metadata/managedFields")?.as_array()?;
    let decoded: Option<Vec<Entry>> = entries.iter().map(decode_entry).collect();
    decoded.filter(|entries| !entries.is_empty())
}

fn decode_entry(entry: &Value) -> Option<Entry> {
    let text = |key: &str| entry.get(key).and_then(Value::as_str).map(str::to_string);
    Some(Entry {
        manager: text("manager")?,
        operation: text("operation")?,
        api_version: text("apiVersion").unwrap_or_default(),
        time: text("time"),
        subresource: text("subresource").filter(|s| !s.is_empty()),
        fields: fieldset::decode(entry.get("fieldsV1").unwrap_or(&Value::Null)).ok()?,
    })
}

/// Whether the writer asked to clear ownership with `managedFields: [{}]`.
pub(super) fn is_reset_request(obj: &Value) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            !entries.is_empty()
                && entries
                    .iter()
                    .all(|e| e.as_object().is_some_and(Map::is_empty))
        })
}

/// Stores `entries` (without empty ones) in `obj.metadata.managedFields`, in
/// Kubernetes' order: Apply before Update, then by time, manager,
/// apiVersion, subresource.
pub(super) fn store(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Value::Object(root) = obj else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let encoded = entries.iter().map(encode_entry).collect();
    meta.insert("managedFields".to_string(), Value::Array(encoded));
}

fn encode_entry(e: &Entry) -> Value {
    let mut out = json!({
        "manager": e.manager,
        "operation": e.operation,
        "apiVersion": e.api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": fieldset::encode(&e.fields),
    });
    if let Value::Object(map) = &mut out {
        if let Some(time) = &e.time {
            map.insert("time".to_string(), Value::String(time.clone()));
        }
        if let Some(sub) = &e.subresource {
            map.insert("subresource".to_string(), Value::String(sub.clone()));
        }
    }
    out
}
