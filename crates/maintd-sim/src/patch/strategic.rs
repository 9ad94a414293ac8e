//! Strategic merge patch (`application/strategic-merge-patch+json`), the
//! patch kubectl computes for built-in types (cordon, taint, label, edit).
//!
//! Follows `k8s.io/apimachinery/pkg/util/strategicpatch` (`mergeMap`,
//! `mergeSlice`, `normalizeElementOrder`) with the list kinds of a
//! [`ListSchema`]. Directives are consumed, never stored.

use serde_json::{Map, Value};

use super::json::kind_of;
use super::{ListKind, ListSchema, PatchError};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `target`; on error `target` is left
/// unchanged.
///
/// Maps merge recursively and `null` deletes a key. Lists merge by their
/// [`ListKind`]: `Map` lists by the first key (`$patch: delete` elements
/// remove by key, a `{"$patch": "replace"}` element replaces the list),
/// `Set` lists as a union, `Atomic` lists are replaced. `$patch:
/// replace|delete` on a map, `$retainKeys`, `$setElementOrder/<list>` and
/// `$deleteFromPrimitiveList/<list>` are honoured.
///
/// Errors: a malformed patch or directive is `BadRequest`; a `$patch`
/// element inside an atomic list is `Invalid` (Kubernetes stores the element
/// without its directive and then fails validation with 422).
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    schema: &ListSchema,
) -> Result<(), PatchError> {
    let Some(patch) = patch.as_object() else {
        return Err(PatchError::BadRequest(format!(
            "a strategic merge patch must be a JSON object, got {}",
            kind_of(patch)
        )));
    };
    let Some(original) = target.as_object() else {
        return Err(PatchError::Invalid(format!(
            "the object to patch is {}, not an object",
            kind_of(target)
        )));
    };
    let merged = Merger { schema }.map(original.clone(), patch, &mut Vec::new())?;
    *target = Value::Object(merged);
    Ok(())
}

struct Merger<'a> {
    schema: &'a ListSchema,
}

impl Merger<'_> {
    fn map(
        &self,
        mut original: Map<String, Value>,
        patch: &Map<String, Value>,
        names: &mut Vec<String>,
    ) -> Result<Map<String, Value>, PatchError> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => {
                    let mut rest = patch.clone();
                    rest.remove(DIRECTIVE);
                    self.map(Map::new(), &rest, names)
                }
                Some("delete") => Ok(Map::new()),
                _ => Err(bad(format!(
                    "unknown {DIRECTIVE} directive {directive} on the map at {}; use \"replace\" or \"delete\"",
                    at(names)
                ))),
            };
        }
        if let Some(retain) = patch.get(RETAIN_KEYS) {
            let retain = string_list(retain).ok_or_else(|| {
                bad(format!(
                    "{RETAIN_KEYS} at {} must be a list of field names",
                    at(names)
                ))
            })?;
            for (key, value) in patch {
                if !key.starts_with('$') && !value.is_null() && !retain.contains(&key.as_str()) {
                    return Err(bad(format!(
                        "{RETAIN_KEYS} at {} does not list \"{key}\", which the patch sets",
                        at(names)
                    )));
                }
            }
            original.retain(|key, _| retain.contains(&key.as_str()));
        }
        for (key, values) in patch {
            let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else {
                continue;
            };
            let values = values
                .as_array()
                .ok_or_else(|| bad(format!("{key} at {} must be a list of values", at(names))))?;
            if let Some(Value::Array(list)) = original.get_mut(field) {
                list.retain(|item| !values.contains(item));
            }
        }
        let mut ordered: Vec<&str> = Vec::new();
        for (key, order) in patch {
            let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) else {
                continue;
            };
            let order = order
                .as_array()
                .ok_or_else(|| bad(format!("{key} at {} must be a list", at(names))))?;
            names.push(field.to_string());
            let done = self.ordered_list(&mut original, field, patch.get(field), order, names)?;
            names.pop();
            if done {
                ordered.push(field);
            }
        }
        for (key, value) in patch {
            if key == RETAIN_KEYS
                || key.starts_with(SET_ELEMENT_ORDER)
                || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
                || ordered.contains(&key.as_str())
            {
                continue;
            }
            if key.starts_with('$') {
                return Err(bad(format!("unknown directive \"{key}\" at {}", at(names))));
            }
            names.push(key.clone());
            let merged = match (original.remove(key), value) {
                (_, Value::Null) => None,
                (None, value) => Some(self.clean(value, names)?),
                (Some(old), value) => Some(self.value(old, value, names)?),
            };
            names.pop();
            if let Some(merged) = merged {
                original.insert(key.clone(), merged);
            }
        }
        Ok(original)
    }

    /// Merges list `field` and orders it by `$setElementOrder`; returns
    /// whether the field is done (false leaves it to the plain merge).
    fn ordered_list(
        &self,
        original: &mut Map<String, Value>,
        field: &str,
        patch: Option<&Value>,
        order: &[Value],
        names: &mut Vec<String>,
    ) -> Result<bool, PatchError> {
        let kind = self.kind(names);
        let old = match original.get(field) {
            Some(Value::Array(old)) => old.clone(),
            Some(_) => return Ok(false),
            None => Vec::new(),
        };
        let merged = match patch {
            Some(Value::Array(items)) => self.list(old.clone(), items, &kind, names)?,
            None if original.contains_key(field) => old.clone(),
            _ => return Ok(false),
        };
        let identity = match &kind {
            // Kubernetes cannot order an atomic list either; the patch's own
            // order stands.
            ListKind::Atomic => {
                original.insert(field.to_string(), Value::Array(merged));
                return Ok(true);
            }
            ListKind::Set => Identity::Value,
            ListKind::Map(keys) => Identity::Key(&keys[0]),
        };
        if let Identity::Key(key) = identity
            && let Some(item) = order.iter().find(|item| item.get(key).is_none())
        {
            return Err(bad(format!(
                "{SET_ELEMENT_ORDER}{field} at {}: item {item} lacks the merge key \"{key}\"",
                at(&names[..names.len() - 1])
            )));
        }
        let sorted = normalize_order(merged, order, &old, identity);
        original.insert(field.to_string(), Value::Array(sorted));
        Ok(true)
    }

    fn value(
        &self,
        old: Value,
        patch: &Value,
        names: &mut Vec<String>,
    ) -> Result<Value, PatchError> {
        match (old, patch) {
            (Value::Object(old), Value::Object(patch)) => {
                Ok(Value::Object(self.map(old, patch, names)?))
            }
            (Value::Array(old), Value::Array(patch)) => {
                let kind = self.kind(names);
                Ok(Value::Array(self.list(old, patch, &kind, names)?))
            }
            (_, patch) => self.clean(patch, names),
        }
    }

    /// The patch value with its directives applied to nothing (a new field).
    fn clean(&self, patch: &Value, names: &mut Vec<String>) -> Result<Value, PatchError> {
        match patch {
            Value::Object(patch) => Ok(Value::Object(self.map(Map::new(), patch, names)?)),
            Value::Array(patch) => {
                let kind = self.kind(names);
                Ok(Value::Array(self.list(Vec::new(), patch, &kind, names)?))
            }
            other => Ok(other.clone()),
        }
    }

    fn list(
        &self,
        mut original: Vec<Value>,
        patch: &[Value],
        kind: &ListKind,
        names: &mut Vec<String>,
    ) -> Result<Vec<Value>, PatchError> {
        match kind {
            ListKind::Atomic => {
                if patch.iter().any(|item| item.get(DIRECTIVE).is_some()) {
                    return Err(PatchError::Invalid(format!(
                        "{} is an atomic list (Kubernetes declares no patch merge key for it): \
                         a {DIRECTIVE} element is not supported; send the whole new list",
                        at(names)
                    )));
                }
                Ok(patch.to_vec())
            }
            ListKind::Set => {
                if let Some(item) = patch
                    .iter()
                    .find(|item| item.is_object() || item.is_array())
                {
                    return Err(bad(format!(
                        "{} merges as a set of scalars; got the element {item}",
                        at(names)
                    )));
                }
                let server_order = original.clone();
                for item in patch {
                    if !original.contains(item) {
                        original.push(item.clone());
                    }
                }
                Ok(normalize_order(
                    original,
                    patch,
                    &server_order,
                    Identity::Value,
                ))
            }
            ListKind::Map(keys) => self.map_list(original, patch, &keys[0], names),
        }
    }

    fn map_list(
        &self,
        mut original: Vec<Value>,
        patch: &[Value],
        key: &str,
        names: &mut Vec<String>,
    ) -> Result<Vec<Value>, PatchError> {
        let mut plain = Vec::new();
        let mut replace = false;
        for item in patch {
            let Some(fields) = item.as_object() else {
                return Err(bad(format!(
                    "{} is merged by \"{key}\"; got the element {item}, not an object",
                    at(names)
                )));
            };
            let merge_value = fields.get(key);
            match (fields.get(DIRECTIVE).map(|d| d.as_str()), merge_value) {
                (None, Some(_)) => plain.push(fields),
                (Some(Some("delete")), Some(value)) => {
                    original.retain(|old| old.get(key) != Some(value));
                }
                (Some(Some("replace")), _) => replace = true,
                (Some(Some("delete")) | None, None) => {
                    return Err(bad(format!(
                        "element {item} of {} lacks the merge key \"{key}\"",
                        at(names)
                    )));
                }
                (Some(other), _) => {
                    return Err(bad(format!(
                        "unknown {DIRECTIVE} directive {} in {}; use \"delete\" or \"replace\"",
                        other.map_or_else(|| "(not a string)".to_string(), str::to_string),
                        at(names)
                    )));
                }
            }
        }
        if replace {
            return plain
                .into_iter()
                .map(|item| Ok(Value::Object(self.map(Map::new(), item, names)?)))
                .collect();
        }
        let server_order = original.clone();
        for item in &plain {
            let value = item.get(key);
            match original.iter().position(|old| old.get(key) == value) {
                Some(pos) => {
                    let old = match std::mem::take(&mut original[pos]) {
                        Value::Object(old) => old,
                        _ => Map::new(),
                    };
                    original[pos] = Value::Object(self.map(old, item, names)?);
                }
                None => original.push(Value::Object(self.map(Map::new(), item, names)?)),
            }
        }
        let patch_order: Vec<Value> = plain
            .iter()
            .map(|item| Value::Object((*item).clone()))
            .collect();
        Ok(normalize_order(
            original,
            &patch_order,
            &server_order,
            Identity::Key(key),
        ))
    }

    fn kind(&self, names: &[String]) -> ListKind {
        let path: Vec<&str> = names.iter().map(String::as_str).collect();
        self.schema.list_kind(&path)
    }
}

/// How list items are matched for ordering.
#[derive(Clone, Copy)]
enum Identity<'a> {
    Value,
    Key(&'a str),
}

impl Identity<'_> {
    fn index_in(self, item: &Value, list: &[Value]) -> Option<usize> {
        match self {
            Identity::Value => list.iter().position(|x| x == item),
            Identity::Key(key) => {
                let value = item.get(key)?;
                list.iter().position(|x| x.get(key) == Some(value))
            }
        }
    }
}

/// Kubernetes' `normalizeElementOrder`: items named by `order` come in that
/// order, the others keep their place relative to the live list.
fn normalize_order(
    merged: Vec<Value>,
    order: &[Value],
    server: &[Value],
    id: Identity,
) -> Vec<Value> {
    let (mut named, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| id.index_in(item, order).is_some());
    named.sort_by_key(|item| id.index_in(item, order));
    let mut out = Vec::with_capacity(named.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = named.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => matches!(
                (id.index_in(l, server), id.index_in(r, server)),
                (Some(i), Some(j)) if i < j
            ),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

fn string_list(v: &Value) -> Option<Vec<&str>> {
    v.as_array()?.iter().map(Value::as_str).collect()
}

fn bad(message: String) -> PatchError {
    PatchError::BadRequest(message)
}

fn at(names: &[String]) -> String {
    if names.is_empty() {
        "the object root".to_string()
    } else {
        names.join(".")
    }
}
