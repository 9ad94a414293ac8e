//! Server-side apply and field ownership, as the apiserver records it in
//! `metadata.managedFields` (FieldsV1). Each manager owns the fields it
//! applied or changed; list-maps merge by key, so managers that own
//! different entries of one list never clobber each other; a field a
//! manager stops applying is removed unless someone else owns it; a
//! different value for another manager's field is a conflict unless forced.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{ListKind, ListSchema, PatchError};

/// A field path as FieldsV1 tokens: `f:name`, `k:{"key":"v"}`, `v:<json>`, `.`.
type FieldPath = Vec<String>;
type FieldSet = BTreeSet<FieldPath>;

/// Metadata the server owns; never tracked, never applied.
const SERVER_FIELDS: [&str; 8] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
];

fn clean(applied: &Value) -> Value {
    let mut v = applied.clone();
    if let Some(md) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in SERVER_FIELDS {
            md.remove(f);
        }
    }
    v
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn key_token(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        if let Some(v) = item.get(k) {
            m.insert(k.clone(), v.clone());
        }
    }
    format!("k:{}", Value::Object(m))
}

/// The leaf fields a value sets.
fn leaves(v: &Value, prefix: &mut FieldPath, path: &str, schema: &ListSchema, out: &mut FieldSet) {
    match v {
        Value::Object(o) => {
            let mut any = false;
            for (k, sub) in o {
                if prefix.is_empty() && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                // The server's fields and the object's identity are nobody's.
                if prefix.len() == 1
                    && prefix[0] == "f:metadata"
                    && (SERVER_FIELDS.contains(&k.as_str()) || k == "name" || k == "namespace")
                {
                    continue;
                }
                any = true;
                prefix.push(format!("f:{k}"));
                leaves(sub, prefix, &join(path, k), schema, out);
                prefix.pop();
            }
            if !any && o.is_empty() && !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
        Value::Array(items) => match schema.list_kind(path) {
            ListKind::Atomic => {
                out.insert(prefix.clone());
            }
            ListKind::Set => {
                for i in items {
                    let mut p = prefix.clone();
                    p.push(format!("v:{i}"));
                    out.insert(p);
                }
            }
            ListKind::Map(keys) => {
                for item in items {
                    prefix.push(key_token(item, &keys));
                    prefix.push(".".into());
                    out.insert(prefix.clone());
                    prefix.pop();
                    if let Some(o) = item.as_object() {
                        for (k, sub) in o {
                            prefix.push(format!("f:{k}"));
                            leaves(sub, prefix, &join(path, k), schema, out);
                            prefix.pop();
                        }
                    }
                    prefix.pop();
                }
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn find<'a>(v: &'a Value, token: &str) -> Option<&'a Value> {
    if let Some(f) = token.strip_prefix("f:") {
        return v.get(f);
    }
    if let Some(k) = token.strip_prefix("k:") {
        let want: Map<String, Value> = serde_json::from_str(k).ok()?;
        return v
            .as_array()?
            .iter()
            .find(|e| want.iter().all(|(wk, wv)| e.get(wk) == Some(wv)));
    }
    if let Some(j) = token.strip_prefix("v:") {
        let want: Value = serde_json::from_str(j).ok()?;
        return v.as_array()?.iter().find(|e| **e == want);
    }
    Some(v)
}

fn get<'a>(v: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, t| find(cur, t))
}

fn remove(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    if last == "." {
        // The list entry itself: remove it from its list.
        if let Some((entry, list_path)) = parent.split_last()
            && let Some(list) = get_mut(v, list_path).and_then(Value::as_array_mut)
            && let Some(i) = list
                .iter()
                .position(|e| find(&Value::Array(vec![e.clone()]), entry).is_some())
        {
            list.remove(i);
        }
        return;
    }
    let Some(container) = get_mut(v, parent) else {
        return;
    };
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(o) = container.as_object_mut() {
            o.remove(f);
        }
    } else if let Some(j) = last.strip_prefix("v:")
        && let (Ok(want), Some(list)) = (serde_json::from_str::<Value>(j), container.as_array_mut())
    {
        list.retain(|e| *e != want);
    }
}

fn get_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = v;
    for t in path {
        cur = if let Some(f) = t.strip_prefix("f:") {
            cur.get_mut(f)?
        } else if let Some(k) = t.strip_prefix("k:") {
            let want: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur.as_array_mut()?
                .iter_mut()
                .find(|e| want.iter().all(|(wk, wv)| e.get(wk) == Some(wv)))?
        } else {
            return None;
        };
    }
    Some(cur)
}

/// Merges `applied` into `target` the way apply does.
fn merge(target: &mut Value, applied: &Value, schema: &ListSchema, path: &str) {
    match applied {
        Value::Object(a) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Some(t) = target.as_object_mut() {
                for (k, v) in a {
                    let slot = t.entry(k.clone()).or_insert(Value::Null);
                    merge(slot, v, schema, &join(path, k));
                }
            }
        }
        Value::Array(items) => match schema.list_kind(path) {
            ListKind::Atomic => *target = applied.clone(),
            ListKind::Set => {
                let mut list = target.as_array().cloned().unwrap_or_default();
                for i in items {
                    if !list.contains(i) {
                        list.push(i.clone());
                    }
                }
                *target = Value::Array(list);
            }
            ListKind::Map(keys) => {
                let mut list = target.as_array().cloned().unwrap_or_default();
                for item in items {
                    let tok = key_token(item, &keys);
                    match list.iter().position(|e| key_token(e, &keys) == tok) {
                        Some(i) => merge(&mut list[i], item, schema, path),
                        None => list.push(item.clone()),
                    }
                }
                *target = Value::Array(list);
            }
        },
        scalar => *target = scalar.clone(),
    }
}

/// FieldsV1: the set as nested `{"f:a": {"f:b": {}}}` objects.
fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for t in path {
            cur = cur
                .entry(t.clone())
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .unwrap_or_else(|| unreachable!("fieldsV1 nodes are objects"));
        }
    }
    Value::Object(root)
}

fn decode(v: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    match v.as_object() {
        Some(o) if !o.is_empty() => {
            for (k, sub) in o {
                prefix.push(k.clone());
                if k == "." {
                    out.insert(prefix.clone());
                } else {
                    decode(sub, prefix, out);
                }
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

struct Entry {
    raw: Value,
    fields: FieldSet,
}

fn entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|es| {
            es.iter()
                .map(|e| {
                    let mut fields = FieldSet::new();
                    decode(&e["fieldsV1"], &mut vec![], &mut fields);
                    Entry {
                        raw: e.clone(),
                        fields,
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn is(e: &Entry, manager: &str, op: &str, sub: Option<&str>) -> bool {
    e.raw["manager"] == manager && e.raw["operation"] == op && e.raw["subresource"].as_str() == sub
}

fn store(obj: &mut Value, list: Vec<Entry>) {
    let out: Vec<Value> = list
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|mut e| {
            e.raw["fieldsV1"] = encode(&e.fields);
            e.raw
        })
        .collect();
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if out.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("managedFields");
        }
    } else {
        obj["metadata"]["managedFields"] = Value::Array(out);
    }
}

fn new_entry(manager: &str, op: &str, sub: Option<&str>, api_version: &Value, now: &str) -> Entry {
    let mut raw = json!({"manager": manager, "operation": op, "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1"});
    if let Some(s) = sub {
        raw["subresource"] = json!(s);
    }
    Entry {
        raw,
        fields: FieldSet::new(),
    }
}

fn render(path: &FieldPath) -> String {
    path.iter()
        .filter(|t| *t != ".")
        .map(|t| match t.strip_prefix("f:") {
            Some(f) => format!(".{f}"),
            None => format!("[{}]", t.trim_start_matches("k:").trim_start_matches("v:")),
        })
        .collect()
}

/// Server-side apply of `applied` by `manager` onto `live` (None: create).
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    schema: &ListSchema,
    now: &str,
) -> Result<Value, PatchError> {
    if !applied.is_object() {
        return Err(PatchError::BadRequest(
            "an apply configuration must be an object".into(),
        ));
    }
    if manager.is_empty() {
        return Err(PatchError::BadRequest(
            "fieldManager is required for apply".into(),
        ));
    }
    let applied = clean(applied);
    let live = live.cloned().unwrap_or_else(|| json!({}));
    let mut new_set = FieldSet::new();
    leaves(&applied, &mut vec![], "", schema, &mut new_set);
    let mut list = entries(&live);

    // Conflicts: a different value for a field another manager owns.
    let mut conflicts: Vec<(String, String)> = Vec::new();
    for path in new_set
        .iter()
        .filter(|p| p.last().is_some_and(|t| t != "."))
    {
        let (Some(have), Some(want)) = (get(&live, path), get(&applied, path)) else {
            continue;
        };
        if have == want {
            continue;
        }
        for e in list
            .iter_mut()
            .filter(|e| !is(e, manager, "Apply", subresource) && e.fields.contains(path))
        {
            if force {
                e.fields.remove(path);
            } else {
                let other = e.raw["manager"].as_str().unwrap_or("").to_string();
                conflicts.push((render(path), format!("conflict with \"{other}\"")));
            }
        }
    }
    if !conflicts.is_empty() {
        let detail: Vec<String> = conflicts.iter().map(|(f, m)| format!("{m}: {f}")).collect();
        let n = conflicts.len();
        let message = format!(
            "Apply failed with {n} conflict{}: {}",
            if n == 1 { "" } else { "s" },
            detail.join("\n")
        );
        return Err(PatchError::Conflict {
            message,
            causes: conflicts,
        });
    }

    let mut result = live.clone();
    merge(&mut result, &applied, schema, "");
    let mine = list
        .iter()
        .position(|e| is(e, manager, "Apply", subresource));
    let old_set = mine.map(|i| list[i].fields.clone()).unwrap_or_default();
    // Fields this manager stopped applying go, unless someone else owns them.
    let others: FieldSet = list
        .iter()
        .filter(|e| !is(e, manager, "Apply", subresource))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut dropped: Vec<&FieldPath> = old_set
        .iter()
        .filter(|p| !new_set.contains(*p) && !others.contains(*p))
        .collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        let is_entry_field =
            p.len() >= 2 && p[p.len() - 2].starts_with("k:") && p.last().is_some_and(|t| t != ".");
        let entry_still_applied =
            is_entry_field && new_set.contains(&[&p[..p.len() - 1], &[".".to_string()]].concat());
        if is_entry_field && !entry_still_applied {
            continue; // the whole entry goes with its "." marker
        }
        remove(&mut result, p);
    }
    let api_version = applied.get("apiVersion").cloned().unwrap_or(Value::Null);
    match mine {
        Some(i) => {
            list[i].fields = new_set;
            list[i].raw["time"] = json!(now);
        }
        None => {
            let mut e = new_entry(manager, "Apply", subresource, &api_version, now);
            e.fields = new_set;
            list.push(e);
        }
    }
    store(&mut result, list);
    Ok(result)
}

/// Gives `manager` ownership of the fields an update changed (taking them
/// from others), as the apiserver does for Update operations.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    schema: &ListSchema,
    now: &str,
) {
    if manager.is_empty() {
        return;
    }
    let mut new_leaves = FieldSet::new();
    leaves(new, &mut vec![], "", schema, &mut new_leaves);
    let changed: FieldSet = match old {
        None => new_leaves,
        Some(o) => new_leaves
            .into_iter()
            .filter(|p| get(o, p) != get(new, p))
            .collect(),
    };
    // Ownership lives in the new object's managedFields as sent, falling
    // back to the old object's when the writer did not send any.
    let source = if new["metadata"]["managedFields"].is_array() {
        new.clone()
    } else {
        old.cloned().unwrap_or_else(|| json!({}))
    };
    let mut list = entries(&source);
    if changed.is_empty() {
        store(new, list);
        return;
    }
    for e in list.iter_mut() {
        if !is(e, manager, operation, subresource) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    let api_version = new.get("apiVersion").cloned().unwrap_or(Value::Null);
    match list
        .iter()
        .position(|e| is(e, manager, operation, subresource))
    {
        Some(i) => {
            list[i].fields.extend(changed);
            list[i].raw["time"] = json!(now);
        }
        None => {
            let mut e = new_entry(manager, operation, subresource, &api_version, now);
            e.fields = changed;
            list.push(e);
        }
    }
    store(new, list);
}
