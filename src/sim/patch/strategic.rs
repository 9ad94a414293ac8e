//! Strategic merge patch, with the directives kubectl sends: maps merge
//! recursively and `null` deletes; keyed lists merge by key, with
//! `$patch: delete` / `$patch: replace` elements; `$setElementOrder/<f>`,
//! `$deleteFromPrimitiveList/<f>`, `$retainKeys` and map-level `$patch`.
//! Directives never reach the stored object.

use serde_json::{Map, Value};

use super::{ListKind, ListSchema, PatchError};

pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    schema: &ListSchema,
) -> Result<(), PatchError> {
    if !patch.is_object() {
        return Err(PatchError::BadRequest(
            "a strategic merge patch must be a JSON object".into(),
        ));
    }
    merge_map(target, patch, schema, "")
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn merge_map(
    target: &mut Value,
    patch: &Value,
    schema: &ListSchema,
    path: &str,
) -> Result<(), PatchError> {
    let Some(p) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut clean = p.clone();
            clean.remove("$patch");
            *target = Value::Object(strip_directives(&clean));
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some(other) => {
            return Err(PatchError::BadRequest(format!(
                "unknown $patch directive {other:?} at {path:?}"
            )));
        }
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let retain: Option<Vec<String>> = match p.get("$retainKeys") {
        None => None,
        Some(Value::Array(ks)) => Some(
            ks.iter()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect(),
        ),
        Some(_) => {
            return Err(PatchError::BadRequest(
                "$retainKeys must be a list of field names".into(),
            ));
        }
    };
    for (key, value) in p {
        if key == "$retainKeys" || key == "$patch" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value
                .as_array()
                .ok_or_else(|| PatchError::BadRequest(format!("{key} must be a list")))?;
            if let Some(list) = target.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if key.starts_with("$setElementOrder/") {
            continue;
        }
        if key.starts_with('$') {
            return Err(PatchError::BadRequest(format!("unknown directive {key:?}")));
        }
        let Some(obj) = target.as_object_mut() else {
            continue;
        };
        let sub_path = join(path, key);
        match value {
            Value::Null => {
                obj.remove(key);
            }
            Value::Object(_) => {
                let slot = obj.entry(key.clone()).or_insert(Value::Null);
                merge_map(slot, value, schema, &sub_path)?;
            }
            Value::Array(items) => {
                let current = obj.remove(key).unwrap_or(Value::Array(vec![]));
                let order = p.get(&format!("$setElementOrder/{key}"));
                let merged = merge_list(current, items, schema, &sub_path, order)?;
                obj.insert(key.clone(), merged);
            }
            scalar => {
                obj.insert(key.clone(), scalar.clone());
            }
        }
    }
    if let (Some(keep), Some(obj)) = (retain, target.as_object_mut()) {
        obj.retain(|k, _| keep.contains(k));
    }
    Ok(())
}

fn strip_directives(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| {
            let v = match v {
                Value::Object(o) => Value::Object(strip_directives(o)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Whether `item` has the same values as `patch_item` for every merge key
/// the patch element names (kubectl's delete elements name only the
/// primary key).
fn same_key(item: &Value, patch_item: &Value, keys: &[String]) -> bool {
    let named: Vec<&String> = keys
        .iter()
        .filter(|k| patch_item.get(k.as_str()).is_some())
        .collect();
    !named.is_empty()
        && named
            .iter()
            .all(|k| item.get(k.as_str()) == patch_item.get(k.as_str()))
}

fn merge_list(
    current: Value,
    items: &[Value],
    schema: &ListSchema,
    path: &str,
    order: Option<&Value>,
) -> Result<Value, PatchError> {
    let mut list = match current {
        Value::Array(a) => a,
        _ => vec![],
    };
    match schema.list_kind(path) {
        ListKind::Atomic => {
            if items.iter().any(|i| i.get("$patch").is_some()) {
                return Ok(Value::Array(
                    items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .cloned()
                        .collect(),
                ));
            }
            Ok(Value::Array(items.to_vec()))
        }
        ListKind::Set => {
            for i in items {
                if !list.contains(i) {
                    list.push(i.clone());
                }
            }
            Ok(Value::Array(list))
        }
        ListKind::Map(keys) => {
            if items
                .iter()
                .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                let kept: Vec<Value> = items
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .map(strip)
                    .collect();
                return Ok(Value::Array(kept));
            }
            for item in items {
                if !item.is_object() {
                    return Err(PatchError::BadRequest(format!(
                        "elements of {path} must be objects"
                    )));
                }
                let pos = list.iter().position(|e| same_key(e, item, &keys));
                match (item.get("$patch").and_then(Value::as_str), pos) {
                    (Some("delete"), Some(i)) => {
                        list.remove(i);
                        // A delete by primary key removes every match.
                        list.retain(|e| !same_key(e, item, &keys));
                    }
                    (Some("delete"), None) => {}
                    (Some(other), _) => {
                        return Err(PatchError::BadRequest(format!(
                            "unknown $patch directive {other:?} in {path}"
                        )));
                    }
                    (None, Some(i)) => merge_map(&mut list[i], item, schema, path)?,
                    (None, None) => list.push(strip(item)),
                }
            }
            if let Some(Value::Array(order)) = order {
                list.sort_by_key(|e| {
                    order
                        .iter()
                        .position(|o| same_key(e, o, &keys))
                        .unwrap_or(usize::MAX)
                });
            }
            Ok(Value::Array(list))
        }
    }
}

fn strip(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(strip_directives(o)),
        other => other.clone(),
    }
}
