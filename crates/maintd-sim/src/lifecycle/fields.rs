//! Fields an EvictionRequest or Eviction does not have. The API server
//! decodes a body into its Go type, so what the type does not know is
//! gone: by default dropped (with a warning the simulator does not send),
//! and refused with a 400 when the client asks for
//! `fieldValidation=Strict` (kubectl does). A body written for the KEP's
//! drafts (`spec.requesterName`) so loses the field and then fails
//! validation for the `spec.requester` it lacks.
//!
//! The types are k8s-openapi's `v1_37` ones; their JSON schemas name the
//! fields. Metadata is left alone (the simulator keeps its own there).

use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use serde_json::{Map, Value};

use super::GROUP;
use crate::errors::ApiError;
use crate::resources::ResourceDef;

/// Drops what the kind's type does not have from `obj`.
pub fn prune(def: &ResourceDef, obj: &mut Value) {
    if let Some(schema) = schema(def) {
        walk(
            obj,
            &schema.root,
            &schema,
            &mut String::new(),
            &mut |_| {},
            true,
        );
    }
}

/// The 400 a strict decode gives for a body with fields its type does not
/// have, if the client asked for strict field validation.
pub fn strict(
    def: &ResourceDef,
    obj: &Value,
    field_validation: Option<&str>,
) -> Result<(), ApiError> {
    if field_validation != Some("Strict") {
        return Ok(());
    }
    let Some(schema) = schema(def) else {
        return Ok(());
    };
    let mut unknown = Vec::new();
    let mut copy = obj.clone();
    walk(
        &mut copy,
        &schema.root,
        &schema,
        &mut String::new(),
        &mut |path| unknown.push(format!("unknown field {path:?}")),
        false,
    );
    if unknown.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
        super::VERSION,
        unknown.join(", "),
        kind = def.kind,
    )))
}

struct Schema {
    root: Value,
    defs: Map<String, Value>,
}

fn schema(def: &ResourceDef) -> Option<Schema> {
    if def.group != GROUP {
        return None;
    }
    let generator = schemars::SchemaGenerator::default();
    let root = match def.kind.as_str() {
        "EvictionRequest" => generator.into_root_schema_for::<EvictionRequest>(),
        "Eviction" => generator.into_root_schema_for::<Eviction>(),
        _ => return None,
    };
    let root = serde_json::to_value(&root).ok()?;
    Some(Schema {
        defs: root["$defs"].as_object().cloned().unwrap_or_default(),
        root,
    })
}

fn resolve<'a>(schema: &'a Value, all: &'a Schema) -> &'a Value {
    schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| all.defs.get(name))
        .unwrap_or(schema)
}

/// Walks `v` along `schema`, telling `unknown` the JSON path of each field
/// the schema does not have, and removing it if `remove`.
fn walk(
    v: &mut Value,
    schema: &Value,
    all: &Schema,
    path: &mut String,
    unknown: &mut dyn FnMut(&str),
    remove: bool,
) {
    let schema = resolve(schema, all);
    if let Some(props) = schema["properties"].as_object() {
        let Some(fields) = v.as_object_mut() else {
            return;
        };
        let mut gone = Vec::new();
        for (k, child) in fields.iter_mut() {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(k);
            match props.get(k) {
                // Metadata is the simulator's own business.
                Some(_) if len == 0 && k == "metadata" => {}
                Some(s) => walk(child, s, all, path, unknown, remove),
                None => {
                    unknown(path);
                    gone.push(k.clone());
                }
            }
            path.truncate(len);
        }
        if remove {
            for k in gone {
                fields.remove(&k);
            }
        }
        return;
    }
    if let (Some(items), Some(item)) = (v.as_array_mut(), schema.get("items")) {
        for (i, child) in items.iter_mut().enumerate() {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            walk(child, item, all, path, unknown, remove);
            path.truncate(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn def(kind: &str) -> ResourceDef {
        super::super::resources()
            .into_iter()
            .find(|d| d.kind == kind)
            .expect("served")
    }

    #[test]
    fn a_drafts_field_is_dropped_or_refused_when_strict() {
        let mut body = json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
            "metadata": {"name": "r", "labels": {"a": "b"}},
            "spec": {"requesterName": "a.io/b", "intent": "Eviction",
                     "target": {"pod": {"name": "p", "uid": "u", "node": "n"}}},
            "status": {"conditions": [{"type": "Failed", "status": "False", "hint": 1}]},
            "extra": true,
        });
        // (In the order of the simulator's JSON maps; Go names them in the
        // body's order.)
        let err = strict(&def("EvictionRequest"), &body, Some("Strict")).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "EvictionRequest in version \"v1alpha1\" cannot be handled as a EvictionRequest: strict decoding error: unknown field \"extra\", unknown field \"spec.requesterName\", unknown field \"spec.target.pod.node\", unknown field \"status.conditions[0].hint\""
        );
        for lenient in [None, Some("Warn"), Some("Ignore")] {
            assert!(strict(&def("EvictionRequest"), &body, lenient).is_ok());
        }
        prune(&def("EvictionRequest"), &mut body);
        assert_eq!(
            body,
            json!({
                "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
                "metadata": {"name": "r", "labels": {"a": "b"}},
                "spec": {"intent": "Eviction", "target": {"pod": {"name": "p", "uid": "u"}}},
                "status": {"conditions": [{"type": "Failed", "status": "False"}]},
            })
        );
    }

    #[test]
    fn what_the_types_have_is_kept() {
        let eviction = json!({
            "metadata": {"name": "e"},
            "spec": {"target": {"pod": {"name": "p", "uid": "u"}}},
            "status": {
                "targetResponders": [{"name": "a.io/b", "priority": 1000, "state": "Active"}],
                "responders": [{"name": "a.io/b", "startTime": "t", "message": "m",
                                "heartbeatTime": "t", "expectedCompletionTime": "t", "completionTime": "t"}],
                "requesters": [{"name": "c.io/d", "intent": "Eviction"}],
                "observedGeneration": 1,
            },
        });
        let mut pruned = eviction.clone();
        prune(&def("Eviction"), &mut pruned);
        assert_eq!(pruned, eviction);
        assert!(strict(&def("Eviction"), &eviction, Some("Strict")).is_ok());
    }
}
