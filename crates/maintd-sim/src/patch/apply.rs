//! Server-side apply and the ownership bookkeeping of every other write,
//! after structured-merge-diff's `Updater.Apply` / `Updater.Update` and the
//! API server's field manager.

use serde_json::{Map, Value};

use super::apply_merge::merge;
use super::fieldset::{self, FieldSet, Fields, Path};
use super::json::kind_of;
use super::managed::{self, Entry};
use super::{ListSchema, PatchError};

/// Metadata in an apply configuration that is the server's, never applied.
const SERVER_META: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Server-side apply (`application/apply-patch+yaml`, body already parsed):
/// merges the configuration `applied` into `live` (`None` creates) and
/// returns the new object with `metadata.managedFields` updated.
///
/// Maps merge recursively, `Map` lists by their keys, `Set` lists as a
/// union, atomic lists are replaced. A field `manager` applied before but
/// omits now is removed unless another manager owns it. Changing a field
/// another manager owns is a `Conflict` unless `force`, which moves the
/// ownership to `manager`; applying the value it already has shares it.
///
/// With `subresource = Some("status")` only `status` is applied (the status
/// strategy resets the rest). For resources with a status subresource the
/// caller drops `status` from `applied` on the main resource, as the API
/// server does. `resourceVersion`/`uid` preconditions in `applied` are the
/// caller's to check; here they are ignored with the other server fields.
/// A `null` in `applied` is dropped (neither applied nor owned).
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    schema: &ListSchema,
    now: &str,
) -> Result<Value, PatchError> {
    if manager.is_empty() {
        return Err(PatchError::BadRequest(
            "fieldManager is required for apply requests".to_string(),
        ));
    }
    let config = configuration(applied, subresource)?;
    let api_version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let live_obj = match live {
        Some(obj @ Value::Object(_)) => obj.clone(),
        Some(other) => {
            return Err(PatchError::Invalid(format!(
                "the live object is {}",
                kind_of(other)
            )));
        }
        None => Value::Object(Map::new()),
    };
    let invalid = |what: &str, err: String| PatchError::Invalid(format!("{what}: {err}"));
    let config_set: FieldSet = fieldset::fields_of(&config, schema)
        .map_err(|e| invalid("apply configuration", e))?
        .into_keys()
        .collect();
    let live_fields =
        fieldset::fields_of(&live_obj, schema).map_err(|e| invalid("live object", e))?;

    let mut entries = managed::decode(&live_obj).unwrap_or_default();
    if live.is_some() && entries.is_empty() && !live_fields.is_empty() {
        // An object nobody tracked yet: its fields belong to a placeholder
        // manager, so the first apply cannot silently take them.
        entries.push(Entry {
            manager: "before-first-apply".to_string(),
            operation: "Update".to_string(),
            api_version: live_obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: None,
            subresource: None,
            fields: live_fields.keys().cloned().collect(),
        });
    }
    let mine = entries
        .iter()
        .position(|e| e.is(manager, "Apply", subresource, &api_version));
    let last_set = mine.map(|i| entries[i].fields.clone()).unwrap_or_default();

    let mut merged = live_obj.clone();
    merge(&mut merged, &config, &mut Vec::new(), schema);
    // What this manager applied before and omits now goes, unless someone
    // (this apply included) still owns it or something below it.
    let kept = |path: &Path| {
        fieldset::covers(&config_set, path)
            || entries
                .iter()
                .enumerate()
                .any(|(i, e)| Some(i) != mine && fieldset::covers(&e.fields, path))
    };
    for path in last_set.difference(&config_set) {
        if !kept(path) && !is_key_of_surviving_item(path, kept) {
            fieldset::remove_path(&mut merged, path);
        }
    }

    let new_fields =
        fieldset::fields_of(&merged, schema).map_err(|e| invalid("merged object", e))?;
    let (changed, removed) = compare(&live_fields, &new_fields);
    let mut conflicts: Vec<(String, String)> = Vec::new();
    for (i, entry) in entries.iter_mut().enumerate() {
        if Some(i) == mine {
            continue;
        }
        let taken: FieldSet = entry.fields.intersection(&changed).cloned().collect();
        for path in &taken {
            conflicts.push((fieldset::display(path), entry.printed()));
        }
        entry
            .fields
            .retain(|p| !taken.contains(p) && !removed.contains(p));
    }
    if !force && !conflicts.is_empty() {
        return Err(conflict_error(conflicts));
    }
    let touched = !changed.is_empty() || !removed.is_empty() || last_set != config_set;
    match mine {
        Some(i) => {
            let entry = &mut entries[i];
            entry.fields = config_set;
            entry.api_version = api_version;
            if touched {
                entry.time = Some(now.to_string());
            }
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".to_string(),
            api_version,
            time: Some(now.to_string()),
            subresource: subresource.map(str::to_string),
            fields: config_set,
        }),
    }
    managed::store(&mut merged, entries);
    Ok(merged)
}

/// Gives `manager` ownership of what an `Update` (create, update, or a
/// merge/JSON/strategic patch; `operation` is `"Update"`) changed from
/// `old` (`None` on create) to `new`, taking those fields from other
/// managers, and writes `new.metadata.managedFields`.
///
/// As in Kubernetes: `managedFields` the writer sent are kept when they
/// differ from `old`'s (that is how a client rewrites ownership), and
/// `managedFields: [{}]` clears them all. An object whose lists cannot be
/// keyed keeps its previous ownership unchanged.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    schema: &ListSchema,
    now: &str,
) {
    if !new.is_object() {
        return;
    }
    if managed::is_reset_request(new) {
        managed::store(new, Vec::new());
        return;
    }
    let old_entries = old.and_then(managed::decode).unwrap_or_default();
    let sent = new.pointer("/metadata/managedFields").cloned();
    let old_sent = old
        .and_then(|o| o.pointer("/metadata/managedFields"))
        .cloned();
    let mut entries = match managed::decode(new) {
        Some(entries) if sent != old_sent => entries,
        _ => old_entries.clone(),
    };
    let empty = Value::Object(Map::new());
    let (Ok(old_fields), Ok(new_fields)) = (
        fieldset::fields_of(old.unwrap_or(&empty), schema),
        fieldset::fields_of(new, schema),
    ) else {
        managed::store(new, entries);
        return;
    };
    let (changed, removed) = compare(&old_fields, &new_fields);
    let api_version = new
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mine = entries
        .iter()
        .position(|e| e.is(manager, operation, subresource, &api_version));
    for (i, entry) in entries.iter_mut().enumerate() {
        entry.fields.retain(|p| !removed.contains(p));
        if Some(i) != mine {
            entry.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match mine {
            Some(i) => {
                entries[i].fields.extend(changed);
                entries[i].time = Some(now.to_string());
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: operation.to_string(),
                api_version,
                time: Some(now.to_string()),
                subresource: subresource.map(str::to_string),
                fields: changed,
            }),
        }
    }
    managed::store(new, entries);
}

/// The apply configuration: an object with apiVersion and kind, server
/// metadata and `null`s removed, narrowed to `status` for that subresource.
fn configuration(applied: &Value, subresource: Option<&str>) -> Result<Value, PatchError> {
    let Some(body) = applied.as_object() else {
        return Err(PatchError::BadRequest(format!(
            "an apply configuration must be an object, got {}",
            kind_of(applied)
        )));
    };
    for required in ["apiVersion", "kind"] {
        if body
            .get(required)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(PatchError::BadRequest(format!(
                "the apply configuration lacks \"{required}\"; every applied object names its apiVersion and kind"
            )));
        }
    }
    let mut config = without_nulls(applied);
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        meta.retain(|k, _| !SERVER_META.contains(&k.as_str()));
    }
    if subresource == Some("status")
        && let Value::Object(map) = &mut config
    {
        map.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.retain(|k, _| k == "name" || k == "namespace");
        }
    }
    Ok(config)
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// (added or modified, removed) member paths between two objects.
fn compare(old: &Fields, new: &Fields) -> (FieldSet, FieldSet) {
    let changed = new
        .iter()
        .filter(|(path, value)| match old.get(*path) {
            None => true,
            Some(old_value) => value.is_some() && old_value != *value,
        })
        .map(|(path, _)| path.clone())
        .collect();
    let removed = old
        .keys()
        .filter(|p| !new.contains_key(*p))
        .cloned()
        .collect();
    (changed, removed)
}

/// A key field of a list item that stays (someone still owns the item):
/// removing it would leave an item without its identity.
fn is_key_of_surviving_item(path: &Path, kept: impl Fn(&Path) -> bool) -> bool {
    let [.., item, field] = path.as_slice() else {
        return false;
    };
    let (Some(key), Some(name)) = (item.strip_prefix("k:"), field.strip_prefix("f:")) else {
        return false;
    };
    let is_key =
        serde_json::from_str::<Map<String, Value>>(key).is_ok_and(|k| k.contains_key(name));
    is_key && kept(&path[..path.len() - 1].to_vec())
}

/// Kubernetes' conflict error (`internal.NewConflictError`).
fn conflict_error(conflicts: Vec<(String, String)>) -> PatchError {
    let message = if let [(field, manager)] = conflicts.as_slice() {
        format!("Apply failed with 1 conflict: conflict with {manager}: {field}")
    } else {
        let mut managers: Vec<&String> = conflicts.iter().map(|(_, m)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for manager in managers {
            lines.push(format!("conflicts with {manager}:"));
            for (field, _) in conflicts.iter().filter(|(_, m)| m == manager) {
                lines.push(format!("- {field}"));
            }
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    let causes = conflicts
        .into_iter()
        .map(|(field, manager)| (field, format!("conflict with {manager}")))
        .collect();
    PatchError::Conflict { message, causes }
}
