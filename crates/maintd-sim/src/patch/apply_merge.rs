//! Merging a server-side apply configuration into the live object
//! (structured-merge-diff's `merge`).

use std::collections::HashSet;

use serde_json::Value;

use super::fieldset;
use super::{ListKind, ListSchema};

/// Merges an apply configuration into the live object.
pub(super) fn merge(
    live: &mut Value,
    config: &Value,
    names: &mut Vec<String>,
    schema: &ListSchema,
) {
    match (live, config) {
        (Value::Object(live), Value::Object(config)) => {
            for (key, value) in config {
                names.push(key.clone());
                match live.get_mut(key) {
                    Some(existing) => merge(existing, value, names, schema),
                    None => {
                        live.insert(key.clone(), value.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(live), Value::Array(config)) => {
            let path: Vec<&str> = names.iter().map(String::as_str).collect();
            match schema.list_kind(&path) {
                ListKind::Atomic => *live = config.clone(),
                ListKind::Set => {
                    for item in config {
                        if !live.contains(item) {
                            live.push(item.clone());
                        }
                    }
                }
                ListKind::Map(keys) => merge_map_list(live, config, &keys, names, schema),
            }
        }
        (live, config) => *live = config.clone(),
    }
}

/// Live items keep their place and merge with the configured item of the
/// same key; new items go before the next shared item, in the
/// configuration's order (structured-merge-diff's list merge).
fn merge_map_list(
    live: &mut Vec<Value>,
    config: &[Value],
    keys: &[String],
    names: &mut Vec<String>,
    schema: &ListSchema,
) {
    let config_keys: Vec<Option<String>> = config
        .iter()
        .map(|i| fieldset::key_element(i, keys))
        .collect();
    let live_keys: HashSet<String> = live
        .iter()
        .filter_map(|i| fieldset::key_element(i, keys))
        .collect();
    let mut out = Vec::with_capacity(live.len() + config.len());
    let mut next = 0;
    for mut item in std::mem::take(live) {
        let shared = fieldset::key_element(&item, keys).and_then(|k| {
            config_keys
                .iter()
                .position(|c| c.as_deref() == Some(k.as_str()))
        });
        if let Some(at) = shared {
            while next < at {
                if !config_keys[next]
                    .as_ref()
                    .is_some_and(|k| live_keys.contains(k))
                {
                    out.push(config[next].clone());
                }
                next += 1;
            }
            merge(&mut item, &config[at], names, schema);
            next = next.max(at + 1);
        }
        out.push(item);
    }
    for (item, key) in config.iter().zip(&config_keys).skip(next) {
        if !key.as_ref().is_some_and(|k| live_keys.contains(k)) {
            out.push(item.clone());
        }
    }
    *live = out;
}
