//! Field sets in Kubernetes' FieldsV1 shape: which fields of an object exist
//! (and with which leaf values), their JSON encoding in
//! `metadata.managedFields[].fieldsV1`, and their printed form in conflicts.
//!
//! A path is a list of elements: `f:<field>`, `k:<json of key fields>` for
//! an item of a map list, `v:<json value>` for an item of a set list. As in
//! structured-merge-diff's `ToFieldSet`, scalars, atomic lists, empty maps,
//! `null`s and list items are members; non-empty maps are not.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{ListKind, ListSchema};

/// One field path, e.g. `["f:status", "f:nodes", "k:{\"nodeName\":\"a\"}"]`.
pub(super) type Path = Vec<String>;

/// A set of member paths.
pub(super) type FieldSet = BTreeSet<Path>;

/// Every member path of an object with its leaf value (`None` for a list
/// item, which is a member that has children).
pub(super) type Fields = BTreeMap<Path, Option<Value>>;

/// Fields the server owns; never part of any manager's set
/// (the field manager's `stripMeta`).
const STRIPPED_TOP: &[&str] = &["apiVersion", "kind"];
const STRIPPED_META: &[&str] = &[
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// The member paths of `obj` and their values; `Err` names a list item that
/// lacks its key fields.
pub(super) fn fields_of(obj: &Value, schema: &ListSchema) -> Result<Fields, String> {
    let mut out = Fields::new();
    if let Value::Object(map) = obj {
        walk_map(map, schema, &mut Vec::new(), &mut Vec::new(), &mut out)?;
    }
    Ok(out)
}

fn stripped(names: &[&str], key: &str) -> bool {
    match names {
        [] => STRIPPED_TOP.contains(&key),
        ["metadata"] => STRIPPED_META.contains(&key),
        _ => false,
    }
}

fn walk_map<'a>(
    map: &'a Map<String, Value>,
    schema: &ListSchema,
    names: &mut Vec<&'a str>,
    path: &mut Path,
    out: &mut Fields,
) -> Result<(), String> {
    for (key, value) in map {
        if stripped(names, key) {
            continue;
        }
        names.push(key);
        path.push(format!("f:{key}"));
        match value {
            Value::Object(child) if !child.is_empty() => walk_map(child, schema, names, path, out)?,
            Value::Array(items) => walk_list(items, schema, names, path, out)?,
            // `metadata` is the server's; only its contents are owned.
            _ if names.len() == 1 && key == "metadata" => {}
            leaf => {
                out.insert(path.clone(), Some(leaf.clone()));
            }
        }
        path.pop();
        names.pop();
    }
    Ok(())
}

fn walk_list<'a>(
    items: &'a [Value],
    schema: &ListSchema,
    names: &mut Vec<&'a str>,
    path: &mut Path,
    out: &mut Fields,
) -> Result<(), String> {
    match schema.list_kind(names) {
        ListKind::Atomic => {
            out.insert(path.clone(), Some(Value::Array(items.to_vec())));
        }
        ListKind::Set => {
            for item in items {
                path.push(format!("v:{item}"));
                out.insert(path.clone(), Some(item.clone()));
                path.pop();
            }
        }
        ListKind::Map(keys) => {
            for item in items {
                let element = key_element(item, &keys).ok_or_else(|| {
                    format!(
                        "{}: element {item} lacks the key field(s) {keys:?}",
                        display(path)
                    )
                })?;
                path.push(element);
                out.insert(path.clone(), None);
                if let Value::Object(fields) = item {
                    walk_map(fields, schema, names, path, out)?;
                }
                path.pop();
            }
        }
    }
    Ok(())
}

/// `k:{"a":1,"b":"x"}` for a map-list item: its key fields, sorted by name.
/// `None` when the item is not an object or has none of the keys.
pub(super) fn key_element(item: &Value, keys: &[String]) -> Option<String> {
    let fields = item.as_object()?;
    let mut present: Vec<(&String, &Value)> = keys
        .iter()
        .filter_map(|k| fields.get(k).map(|v| (k, v)))
        .collect();
    if present.is_empty() {
        return None;
    }
    present.sort_by(|a, b| a.0.cmp(b.0));
    let body: Vec<String> = present
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::String((*k).clone())))
        .collect();
    Some(format!("k:{{{}}}", body.join(",")))
}

/// Encodes a set as FieldsV1 JSON: members with children carry `".": {}`.
pub(super) fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        insert_member(&mut root, path);
    }
    collapse_leaves(&mut root);
    Value::Object(root)
}

fn insert_member(node: &mut Map<String, Value>, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        node.insert(".".to_string(), Value::Object(Map::new()));
        return;
    };
    let child = node
        .entry(first.clone())
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(child) = child {
        insert_member(child, rest);
    }
}

fn collapse_leaves(node: &mut Map<String, Value>) {
    for child in node.values_mut() {
        if let Value::Object(child) = child {
            if child.len() == 1 && child.contains_key(".") {
                child.clear();
            } else {
                collapse_leaves(child);
            }
        }
    }
}

/// Decodes FieldsV1 JSON; `Err` says what is malformed.
pub(super) fn decode(fields: &Value) -> Result<FieldSet, String> {
    let mut set = FieldSet::new();
    match fields {
        Value::Object(map) => decode_into(map, &mut Vec::new(), &mut set)?,
        Value::Null => {}
        other => return Err(format!("fieldsV1 must be an object, got {other}")),
    }
    Ok(set)
}

fn decode_into(
    map: &Map<String, Value>,
    path: &mut Path,
    set: &mut FieldSet,
) -> Result<(), String> {
    for (element, child) in map {
        if element == "." {
            continue;
        }
        let Value::Object(child) = child else {
            return Err(format!("fieldsV1 entry {element} must be an object"));
        };
        path.push(element.clone());
        if child.is_empty() || child.contains_key(".") {
            set.insert(path.clone());
        }
        decode_into(child, path, set)?;
        path.pop();
    }
    Ok(())
}

/// structured-merge-diff's path string: `.status.nodes[nodeName="a"].phase`.
pub(super) fn display(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(name) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(key) = element.strip_prefix("k:") {
            let pairs = match serde_json::from_str::<Map<String, Value>>(key) {
                Ok(fields) => fields
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
                Err(_) => key.to_string(),
            };
            out.push_str(&format!("[{pairs}]"));
        } else if let Some(value) = element.strip_prefix("v:") {
            out.push_str(&format!("[={value}]"));
        } else if let Some(index) = element.strip_prefix("i:") {
            out.push_str(&format!("[{index}]"));
        } else {
            out.push_str(element);
        }
    }
    out
}

/// Whether `set` holds `path` or any path below it.
pub(super) fn covers(set: &FieldSet, path: &Path) -> bool {
    set.range(path.clone()..)
        .next()
        .is_some_and(|p| p.starts_with(path))
}

/// Removes the value at `path` from `obj`; containers left empty by the
/// removal go too (structured-merge-diff drops them to null). Returns
/// whether `obj` itself became empty.
pub(super) fn remove_path(obj: &mut Value, path: &[String]) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return false;
    };
    let removed = if rest.is_empty() {
        remove_child(obj, first)
    } else {
        match child_mut(obj, first) {
            Some(child) => remove_path(child, rest) && remove_child(obj, first),
            None => false,
        }
    };
    removed
        && match obj {
            Value::Object(map) => map.is_empty(),
            Value::Array(items) => items.is_empty(),
            _ => false,
        }
}

fn child_index(items: &[Value], element: &str) -> Option<usize> {
    if let Some(key) = element.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(key).ok()?;
        items.iter().position(|item| {
            item.as_object()
                .is_some_and(|fields| key.iter().all(|(k, v)| fields.get(k) == Some(v)))
        })
    } else if let Some(value) = element.strip_prefix("v:") {
        let value: Value = serde_json::from_str(value).ok()?;
        items.iter().position(|item| *item == value)
    } else {
        None
    }
}

fn child_mut<'a>(obj: &'a mut Value, element: &str) -> Option<&'a mut Value> {
    match obj {
        Value::Object(map) => map.get_mut(element.strip_prefix("f:")?),
        Value::Array(items) => {
            let index = child_index(items, element)?;
            items.get_mut(index)
        }
        _ => None,
    }
}

fn remove_child(obj: &mut Value, element: &str) -> bool {
    match obj {
        Value::Object(map) => element
            .strip_prefix("f:")
            .is_some_and(|name| map.remove(name).is_some()),
        Value::Array(items) => match child_index(items, element) {
            Some(index) => {
                items.remove(index);
                true
            }
            None => false,
        },
        _ => false,
    }
}
