//! Tests of the patch machinery, one file per patch family.

mod apply;
mod json;
mod ownership;
mod schema;
mod strategic;

use serde_json::Value;

/// Every `$`-prefixed key anywhere in `v`: directives must never be stored.
fn directive_keys(v: &Value) -> Vec<String> {
    match v {
        Value::Object(map) => map
            .iter()
            .flat_map(|(k, v)| {
                let mut keys = directive_keys(v);
                if k.starts_with('$') {
                    keys.push(k.clone());
                }
                keys
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(directive_keys).collect(),
        _ => Vec::new(),
    }
}
