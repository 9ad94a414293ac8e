//! Custom resources checked against their CRD's OpenAPI v3 schema on every
//! write, as the API server checks them (k8s.io/apiextensions-apiserver
//! pkg/apiserver/validation, through kube-openapi's pkg/validation/validate):
//! `type`, `required`, `enum`, `maximum`/`minimum` with their exclusive
//! forms, `multipleOf`, the range of an `int32`/`int64`/`float` format,
//! `maxLength`/`minLength`/`pattern`, `maxItems`/`minItems` and
//! `maxProperties`/`minProperties`, in nested objects, maps and list items,
//! refused with 422 Invalid in the API server's words (`words.rs`).
//!
//! An update is checked with ratcheting (`CRDValidationRatcheting`, locked
//! on since 1.33): a part of the object equal to its old value passes even
//! if it no longer fits, so a tightened CRD does not lock out writes that
//! leave old values alone. A write of the status subresource checks the
//! status alone, against the schema's `status`.
//!
//! Where the simulator still differs from Kubernetes:
//! - string `format`s (date-time, uuid, ...) are not parsed, and
//!   `allOf`/`anyOf`/`oneOf`/`not`, `x-kubernetes-validations` (CEL rules)
//!   and list-type uniqueness are not evaluated: the agent and the tests
//!   need the bounds, and each of these is an evaluator of its own (an
//!   object a CEL rule would refuse is stored; one refused for a bound is
//!   refused in the API server's words, its note on the rules not checked
//!   included);
//! - the schema is the storage version's, for every served version (the
//!   simulator keeps one schema per CRD);
//! - unknown fields are kept rather than pruned and defaults are not filled
//!   in (the simulator stores objects as written); a null the API server
//!   would drop or default is skipped, and a missing required field with a
//!   default counts as given, so the verdict is the API server's;
//! - the API server walks properties in Go map order, which is random; the
//!   simulator walks them by name, so several errors come in one order.

use serde_json::{Map, Value};

use super::errors::ApiError;
use super::meta;
use super::resources::ResourceDef;

mod words;

use words::{Failure, Num, What};

/// Checks a custom resource against its CRD's schema: the whole object
/// (create; update and patch with `old`), or only its status (a write of
/// the status subresource). Built-in kinds pass.
pub fn check(
    def: &ResourceDef,
    old: Option<&Value>,
    new: &Value,
    status_only: bool,
) -> Result<(), ApiError> {
    let Some(schema) = def.list_schema.declared().filter(|_| def.custom) else {
        return Ok(());
    };
    let (failures, prefix) = if status_only {
        let status_schema = &schema["properties"]["status"];
        let Some(status) = new.get("status").filter(|s| kept(s, status_schema)) else {
            return Ok(());
        };
        let old = old.and_then(|o| o.get("status"));
        // The status validator's root is the status: its words name
        // `selectedNodes`, its fields `status.selectedNodes`.
        (node(status, status_schema, "", old), Some("status"))
    } else {
        (node(new, schema, "", old), None)
    };
    if failures.is_empty() {
        return Ok(());
    }
    let mut causes: Vec<_> = failures.iter().map(|f| f.cause(prefix)).collect();
    // The API server runs a CRD's CEL rules only on an object without
    // errors of these kinds, and says so; the simulator runs none (see the
    // module's notes), but words its refusal the same.
    let blocking = failures.iter().any(|f| f.what.blocks_rules());
    if blocking && has_rules(schema) {
        causes.push(words::rules_not_checked());
    }
    Err(ApiError::invalid_object(
        &def.group,
        &def.kind,
        meta::name(new),
        causes,
    ))
}

/// Whether a schema has CEL rules (`x-kubernetes-validations`) anywhere.
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            m.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .is_some_and(|rules| !rules.is_empty())
                || m.values().any(has_rules)
        }
        Value::Array(items) => items.iter().any(has_rules),
        _ => false,
    }
}

/// Whether a value reaches validation: the API server drops a null that
/// its schema does not allow (or defaults it, if it has a default) first.
fn kept(v: &Value, schema: &Value) -> bool {
    !v.is_null() || schema["nullable"] == true
}

/// The failures of `v` against `schema`, at `name` (kube-openapi's path:
/// `spec.drainPlan[3].podType`), given its correlated old value.
fn node(v: &Value, schema: &Value, name: &str, old: Option<&Value>) -> Vec<Failure> {
    let mut out = Vec::new();
    let fail = |what: What| Failure {
        name: name.to_string(),
        what,
    };
    let types = types(schema);
    if v.is_null() {
        if !types.is_empty() && schema["nullable"] != true {
            out.push(fail(What::Type {
                want: types.join(","),
                found: "null",
            }));
        }
    } else {
        check_type(v, schema, &types, &fail, &mut out);
    }
    match v {
        Value::String(s) => check_string(s, schema, &fail, &mut out),
        Value::Number(_) => {
            if let Some(n) = Num::of(v) {
                check_number(n, schema, &types, name, &fail, &mut out);
            }
        }
        Value::Array(items) => check_items(items, schema, name, old, &fail, &mut out),
        _ => {}
    }
    check_enum(v, schema, &fail, &mut out);
    if let Value::Object(fields) = v {
        check_object(fields, schema, name, old, &fail, &mut out);
    }
    // Ratcheting: an unchanged part passes as it is.
    if old == Some(v) {
        out.clear();
    }
    out
}

/// The schema's types: `x-kubernetes-int-or-string` is integer or string.
fn types(schema: &Value) -> Vec<&str> {
    if schema["x-kubernetes-int-or-string"] == true {
        return vec!["integer", "string"];
    }
    schema["type"].as_str().into_iter().collect()
}

/// The schema's format, as apiextensions keeps it: string formats it knows
/// (1.37), int32/int64 for integers, float/double for numbers; no other.
fn format<'a>(schema: &'a Value, types: &[&str]) -> &'a str {
    let format = schema["format"].as_str().unwrap_or("");
    let known = match types {
        ["integer"] => matches!(format, "int32" | "int64"),
        ["number"] => matches!(format, "float" | "double"),
        [_] if types != ["string"] => false,
        // No type, a string, or several (int-or-string).
        _ => words::STRING_FORMATS.contains(&format.replace('-', "").as_str()),
    };
    if known { format } else { "" }
}

/// kube-openapi's type validator, quirks included: a value that is neither
/// a string nor a list, where a format is declared, is named by the format.
fn check_type(
    v: &Value,
    schema: &Value,
    types: &[&str],
    fail: &impl Fn(What) -> Failure,
    out: &mut Vec<Failure>,
) {
    let format = format(schema, types);
    if types.is_empty() && format.is_empty() {
        return;
    }
    let found = words::json_type(v);
    let num = Num::of(v);
    let data_format = match num {
        Some(Num::Int(_)) => "int64",
        Some(Num::Float(_)) => "float64",
        None => "",
    };
    let float_int = matches!(num, Some(Num::Float(f)) if words::is_json_integer(f))
        && types.contains(&"integer");
    let int_float = found == "integer" && types.contains(&"number");
    let fits = types.contains(&found) || float_int || int_float;
    let string_or_list = v.is_string() || v.is_array();
    let formatted = !format.is_empty();
    let numeric = types.iter().any(|t| matches!(*t, "integer" | "number"));
    if formatted && !string_or_list && !fits && data_format != format {
        out.push(fail(What::Type {
            want: format.to_string(),
            found: data_format,
        }));
    } else {
        // kube-openapi takes a string or list in a formatted non-numeric
        // field as it is.
        let taken_as_is = formatted && string_or_list && !numeric;
        if fits || taken_as_is {
            return;
        }
        out.push(fail(What::Type {
            want: types.join(","),
            found,
        }));
    }
}

/// maxLength, minLength, pattern: the first that fails, as kube-openapi
/// stops at it. Lengths count characters (the words say bytes).
fn check_string(s: &str, schema: &Value, fail: &impl Fn(What) -> Failure, out: &mut Vec<Failure>) {
    let len = s.chars().count() as u64;
    if let Some(max) = schema["maxLength"].as_u64().filter(|max| len > *max) {
        return out.push(fail(What::TooLong { max }));
    }
    if let Some(min) = schema["minLength"].as_u64().filter(|min| len < *min) {
        return out.push(fail(What::TooShort {
            min,
            value: s.to_string(),
        }));
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        // (Go's regexp and the regex crate take the same RE2 syntax; a
        // pattern neither compiles fails every value, in other words.)
        let failed = match regex::Regex::new(pattern) {
            Ok(re) => (!re.is_match(s)).then(|| pattern.to_string()),
            Err(e) => Some(format!("{pattern}, but pattern is invalid: {e}")),
        };
        if let Some(pattern) = failed {
            out.push(fail(What::Pattern {
                pattern,
                value: s.to_string(),
            }));
        }
    }
}

/// The range of the declared format, multipleOf, minimum, maximum. An
/// integer is compared with the bound as an integer (Go truncates it).
fn check_number(
    n: Num,
    schema: &Value,
    types: &[&str],
    name: &str,
    fail: &impl Fn(What) -> Failure,
    out: &mut Vec<Failure>,
) {
    let format = format(schema, types);
    if let [t @ ("integer" | "number")] = types
        && !n.fits(t, format)
    {
        let with = if format.is_empty() {
            "(default format)".to_string()
        } else {
            format!("with format {format}")
        };
        out.push(fail(What::Plain(format!(
            "Checked value must be of type {t} {with} in {name}"
        ))));
    }
    if let Some(factor) = schema["multipleOf"].as_f64()
        && let Some(what) = n.multiple_of(factor, name)
    {
        out.push(fail(what));
    }
    let exclusive = |key: &str| schema[key] == true;
    if let Some(min) = schema["minimum"].as_f64()
        && n.below(min, exclusive("exclusiveMinimum"))
    {
        let than = if exclusive("exclusiveMinimum") {
            "greater than"
        } else {
            "greater than or equal to"
        };
        out.push(fail(What::Bound {
            value: n,
            message: format!("{name} in body should be {than} {}", n.bound(min)),
        }));
    }
    if let Some(max) = schema["maximum"].as_f64()
        && n.above(max, exclusive("exclusiveMaximum"))
    {
        let than = if exclusive("exclusiveMaximum") {
            "less than"
        } else {
            "less than or equal to"
        };
        out.push(fail(What::Bound {
            value: n,
            message: format!("{name} in body should be {than} {}", n.bound(max)),
        }));
    }
}

/// Each item against `items` (an item of a `map` list correlated with the
/// old item of the same keys, for ratcheting), then minItems, maxItems.
fn check_items(
    items: &[Value],
    schema: &Value,
    name: &str,
    old: Option<&Value>,
    fail: &impl Fn(What) -> Failure,
    out: &mut Vec<Failure>,
) {
    if schema["items"].is_object() {
        let old_items = old
            .and_then(Value::as_array)
            .filter(|_| schema["x-kubernetes-list-type"] == "map");
        let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (i, item) in items.iter().enumerate() {
            let old_item = old_items.and_then(|olds| {
                olds.iter()
                    .find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
            });
            out.extend(node(
                item,
                &schema["items"],
                &format!("{name}[{i}]"),
                old_item,
            ));
        }
    }
    let size = items.len() as u64;
    if let Some(min) = schema["minItems"].as_u64().filter(|min| size < *min) {
        out.push(fail(What::MinItems { min, size }));
    }
    if let Some(max) = schema["maxItems"].as_u64().filter(|max| size > *max) {
        out.push(fail(What::MaxItems { max, size }));
    }
}

fn check_enum(v: &Value, schema: &Value, fail: &impl Fn(What) -> Failure, out: &mut Vec<Failure>) {
    let Some(allowed) = schema["enum"].as_array().filter(|a| !a.is_empty()) else {
        return;
    };
    if !allowed.iter().any(|a| words::enum_matches(v, a)) {
        out.push(fail(What::Enum {
            value: v.clone(),
            allowed: allowed.clone(),
        }));
    }
}

/// minProperties, maxProperties, each map value against
/// `additionalProperties`, each property, then `required`.
fn check_object(
    fields: &Map<String, Value>,
    schema: &Value,
    name: &str,
    old: Option<&Value>,
    fail: &impl Fn(What) -> Failure,
    out: &mut Vec<Failure>,
) {
    let props = schema["properties"].as_object();
    let values = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
    // What is left once the API server has pruned unknown fields and
    // dropped nulls: the fields validation sees.
    let seen: Vec<(&String, &Value, Option<&Value>)> = fields
        .iter()
        .filter_map(|(k, v)| {
            let field_schema = props.and_then(|p| p.get(k)).or(values);
            match field_schema {
                Some(s) if kept(v, s) => Some((k, v, Some(s))),
                Some(_) => None,
                None => preserve.then_some((k, v, None)),
            }
        })
        .collect();
    let size = seen.len() as u64;
    if let Some(min) = schema["minProperties"].as_u64().filter(|min| size < *min) {
        out.push(fail(What::MinProperties { min, size }));
    }
    if let Some(max) = schema["maxProperties"].as_u64().filter(|max| size > *max) {
        out.push(fail(What::MaxProperties { max, size }));
    }
    let child = |key: &str| {
        if name.is_empty() {
            key.to_string()
        } else {
            format!("{name}.{key}")
        }
    };
    let old_of = |key: &str| old.and_then(|o| o.get(key));
    for (key, v, s) in &seen {
        let Some(s) = s else { continue };
        if props.is_some_and(|p| p.contains_key(*key)) {
            continue;
        }
        // kube-openapi names a map's entry with a dot even at the root.
        out.extend(node(v, s, &format!("{name}.{key}"), old_of(key)));
    }
    for (key, v, s) in &seen {
        if let (Some(s), true) = (s, props.is_some_and(|p| p.contains_key(*key))) {
            out.extend(node(v, s, &child(key), old_of(key)));
        }
    }
    for key in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let given = seen.iter().any(|(k, _, _)| k.as_str() == key);
        let defaulted =
            props.is_some_and(|p| p.get(key).is_some_and(|s| s.get("default").is_some()));
        if !given && !defaulted {
            out.push(Failure {
                name: format!("{name}.{key}"),
                what: What::Required,
            });
        }
    }
}

#[cfg(test)]
mod tests;
