//! Built-in objects checked against their types, as the API server decodes
//! a body into its Go struct before anything else: a field of the wrong
//! JSON type (`"priority": "high"`, `"ownerReferences": "not-a-list"`) is
//! refused, with Go's `encoding/json` words for it. Unknown fields are not
//! an error (the API server drops them, or only warns), and missing ones
//! are left to validation.
//!
//! The check decodes into the k8s-openapi type, whose serde impls accept
//! and refuse what the Go structs do. The object stored is still the JSON
//! as written: a typed round trip would drop what the simulator keeps (its
//! own annotations are fine, but unknown fields would go). When the decode
//! fails, the field is found by walking the object along the type's JSON
//! schema, which also gives the Go names for the message.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::{Map, Value};

use k8s_openapi::api::{
    admissionregistration, apps, coordination, core, events, lifecycle, policy, rbac, scheduling,
    storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::errors::ApiError;
use super::resources::ResourceDef;

/// One step of a path into an object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(usize),
    Key(String),
}

/// Where and how an object does not fit its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    path: Vec<Step>,
    /// The Go struct holding the field (`PodSpec`).
    go_struct: String,
    /// The Go type of the field (`int32`, `[]v1.OwnerReference`).
    go_type: String,
    /// What the JSON had, in Go's words: `string`, `number 1.5`, `object`.
    found: String,
    /// serde's own words, for a mismatch the schema walk could not place
    /// (a malformed timestamp or base64 value).
    serde: String,
}

impl Mismatch {
    /// The error as Go's `encoding/json` words it: "json: cannot unmarshal
    /// string into Go struct field PodSpec.spec.priority of type int32".
    /// (Go names the field by its JSON names, without list indexes.)
    pub fn json_message(&self) -> String {
        if self.path.is_empty() {
            return self.serde.clone();
        }
        let field: Vec<&str> = self
            .path
            .iter()
            .filter_map(|s| match s {
                Step::Field(f) => Some(f.as_str()),
                _ => None,
            })
            .collect();
        format!(
            "json: cannot unmarshal {} into Go struct field {}.{} of type {}",
            self.found,
            self.go_struct,
            field.join("."),
            self.go_type
        )
    }

    /// The error as server-side apply's structured-merge-diff words it:
    /// ".spec.priority: expected numeric (int or float), got string". (Its
    /// paths name list items by their keys, `[name="app"]`; the simulator
    /// gives the index.)
    pub fn apply_message(&self) -> String {
        if self.path.is_empty() {
            return self.serde.clone();
        }
        let mut path = String::new();
        for step in &self.path {
            let _ = match step {
                Step::Field(f) | Step::Key(f) => write!(path, ".{f}"),
                Step::Index(i) => write!(path, "[{i}]"),
            };
        }
        let expected = match self.go_type.as_str() {
            t if t.starts_with("[]") && t != "[]uint8" => "list",
            t if t.starts_with("map[") => "map",
            "string" | "[]uint8" => "string",
            "bool" => "boolean",
            t if t.starts_with("int") || t.starts_with("float") => "numeric (int or float)",
            _ => "map",
        };
        let got = self.found.split(' ').next().unwrap_or("");
        format!("{path}: expected {expected}, got {got}")
    }
}

/// Decodes `obj` into the Go type of its kind, as the API server would;
/// kinds without one (custom resources) pass.
pub fn check(def: &ResourceDef, obj: &Value) -> Result<(), Mismatch> {
    if def.custom {
        return Ok(());
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => decode::<core::v1::Pod>(obj),
        ("", "Node") => decode::<core::v1::Node>(obj),
        ("", "Namespace") => decode::<core::v1::Namespace>(obj),
        ("", "Event") => decode::<core::v1::Event>(obj),
        ("", "ServiceAccount") => decode::<core::v1::ServiceAccount>(obj),
        ("", "ConfigMap") => decode::<core::v1::ConfigMap>(obj),
        ("", "Secret") => decode::<core::v1::Secret>(obj),
        ("", "Service") => decode::<core::v1::Service>(obj),
        ("", "PersistentVolume") => decode::<core::v1::PersistentVolume>(obj),
        ("", "PersistentVolumeClaim") => decode::<core::v1::PersistentVolumeClaim>(obj),
        ("storage.k8s.io", "VolumeAttachment") => decode::<storage::v1::VolumeAttachment>(obj),
        ("apps", "DaemonSet") => decode::<apps::v1::DaemonSet>(obj),
        ("apps", "ReplicaSet") => decode::<apps::v1::ReplicaSet>(obj),
        ("apps", "Deployment") => decode::<apps::v1::Deployment>(obj),
        ("apps", "StatefulSet") => decode::<apps::v1::StatefulSet>(obj),
        ("policy", "PodDisruptionBudget") => decode::<policy::v1::PodDisruptionBudget>(obj),
        ("coordination.k8s.io", "Lease") => decode::<coordination::v1::Lease>(obj),
        ("lifecycle.k8s.io", "EvictionRequest") => {
            decode::<lifecycle::v1alpha1::EvictionRequest>(obj)
        }
        ("lifecycle.k8s.io", "Eviction") => decode::<lifecycle::v1alpha1::Eviction>(obj),
        ("events.k8s.io", "Event") => decode::<events::v1::Event>(obj),
        ("scheduling.k8s.io", "PriorityClass") => decode::<scheduling::v1::PriorityClass>(obj),
        ("rbac.authorization.k8s.io", "ClusterRole") => decode::<rbac::v1::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => {
            decode::<rbac::v1::ClusterRoleBinding>(obj)
        }
        ("rbac.authorization.k8s.io", "Role") => decode::<rbac::v1::Role>(obj),
        ("rbac.authorization.k8s.io", "RoleBinding") => decode::<rbac::v1::RoleBinding>(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            decode::<CustomResourceDefinition>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            decode::<admissionregistration::v1::ValidatingAdmissionPolicy>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            decode::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(obj)
        }
        _ => Ok(()),
    }
}

/// A body given whole (create, update) that does not fit its type: 400, as
/// the API server's `transformDecodeError` words it.
pub fn on_body(def: &ResourceDef, body: &Value) -> Result<(), ApiError> {
    check(def, body).map_err(|m| {
        let kind = body["kind"].as_str().unwrap_or(&def.kind);
        let version = body["apiVersion"]
            .as_str()
            .and_then(|av| av.rsplit('/').next())
            .unwrap_or(def.preferred_version());
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {}: {}",
            def.kind,
            m.json_message()
        ))
    })
}

/// An object a JSON, merge or strategic merge patch made that does not fit
/// its type: 422 on the field `patch`, the patched object as the bad value,
/// as the API server's patch handler answers (for a strategic merge patch
/// it words the detail through its unstructured converter instead).
pub fn on_patched(def: &ResourceDef, patched: &Value) -> Result<(), ApiError> {
    check(def, patched)
        .map_err(|m| ApiError::patch_invalid(&patched.to_string(), &m.json_message()))
}

/// A server-side apply patch (for `ns`/`name`) that does not fit its type:
/// upstream's field manager fails to type the patch before it looks at
/// ownership, and that error reaches the client as a 500.
pub fn on_apply(def: &ResourceDef, ns: &str, name: &str, patch: &Value) -> Result<(), ApiError> {
    let refused = |why: String| {
        let gv = def.api_version(def.preferred_version());
        let gv = if def.group.is_empty() {
            format!("/{gv}")
        } else {
            gv
        };
        ApiError::internal(format!(
            "failed to create typed patch object ({ns}/{name}; {gv}, Kind={}): {why}",
            def.kind,
        ))
    };
    // A custom resource's apply names only fields its CRD declares.
    if let Some(field) = def.list_schema.undeclared(patch) {
        return Err(refused(format!("{field}: field not declared in schema")));
    }
    check(def, patch).map_err(|m| refused(m.apply_message()))
}

/// The body of a `pods/eviction` request, decoded as an Eviction (400 if
/// it does not fit, as for any body).
pub fn on_eviction(body: &Value) -> Result<(), ApiError> {
    decode::<policy::v1::Eviction>(body).map_err(|m| {
        ApiError::bad_request(format!(
            "Eviction in version \"v1\" cannot be handled as a Eviction: {}",
            m.json_message()
        ))
    })
}

fn decode<T>(obj: &Value) -> Result<(), Mismatch>
where
    T: for<'de> Deserialize<'de> + schemars::JsonSchema,
{
    let Err(e) = T::deserialize(obj) else {
        return Ok(());
    };
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let schema = serde_json::to_value(&schema).unwrap_or_default();
    let walk = Walk {
        defs: schema["$defs"].as_object().cloned().unwrap_or_default(),
    };
    let title = schema["title"].as_str().unwrap_or("");
    let root_struct = title.rsplit('.').next().unwrap_or(title).to_string();
    let mut path = Vec::new();
    Err(walk
        .find(obj, &schema, &mut path, &root_struct)
        .unwrap_or_else(|| Mismatch {
            path: vec![],
            go_struct: String::new(),
            go_type: String::new(),
            found: String::new(),
            serde: e.to_string(),
        }))
}

/// A type's JSON schema with its definitions, walked along an object.
struct Walk {
    defs: Map<String, Value>,
}

/// The definition name a `$ref` points to.
fn ref_name(schema: &Value) -> Option<&str> {
    schema["$ref"].as_str()?.strip_prefix("#/$defs/")
}

/// What a JSON value is, in Go's words for a type error: a number is
/// quoted only when it was meant for a number field (a fraction or an
/// overflow).
fn found(v: &Value, numeric_target: bool) -> String {
    match v {
        Value::String(_) => "string".into(),
        Value::Number(n) if numeric_target => format!("number {n}"),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
    }
}

impl Walk {
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match ref_name(schema).and_then(|n| self.defs.get(n)) {
            Some(def) => def,
            None => schema,
        }
    }

    /// The Go type a schema stands for (`v1.Container`, `[]string`).
    fn go_type(&self, schema: &Value) -> String {
        if let Some(name) = ref_name(schema) {
            let mut parts = name.rsplit('.');
            let ty = parts.next().unwrap_or(name);
            return match parts.next() {
                Some(pkg) => format!("{pkg}.{ty}"),
                None => ty.to_string(),
            };
        }
        match (schema["type"].as_str(), schema["format"].as_str()) {
            (Some("array"), _) => format!("[]{}", self.go_type(&schema["items"])),
            (Some("object"), _) if schema["additionalProperties"].is_object() => {
                format!(
                    "map[string]{}",
                    self.go_type(&schema["additionalProperties"])
                )
            }
            (Some("integer"), Some(f @ ("int32" | "int64"))) => f.to_string(),
            (Some("integer"), _) => "int".into(),
            (Some("number"), _) => "float64".into(),
            (Some("string"), Some("byte")) => "[]uint8".into(),
            (Some("string"), _) => "string".into(),
            (Some("boolean"), _) => "bool".into(),
            _ => "json.RawMessage".into(),
        }
    }

    /// The first place `v` does not fit `schema`.
    fn find(
        &self,
        v: &Value,
        schema: &Value,
        path: &mut Vec<Step>,
        go_struct: &str,
    ) -> Option<Mismatch> {
        // null is every Go type's zero value.
        if v.is_null() {
            return None;
        }
        let sch = self.resolve(schema);
        let miss = |path: &Vec<Step>| {
            let numeric = matches!(sch["type"].as_str(), Some("integer" | "number"));
            Some(Mismatch {
                path: path.clone(),
                go_struct: go_struct.to_string(),
                go_type: self.go_type(schema),
                found: found(v, numeric),
                serde: String::new(),
            })
        };
        if sch["x-kubernetes-int-or-string"] == true {
            let ok = v.is_string() || v.as_i64().is_some() || v.as_u64().is_some();
            return if ok { None } else { miss(path) };
        }
        if let Some(props) = sch["properties"].as_object() {
            let Some(fields) = v.as_object() else {
                return miss(path);
            };
            let name = ref_name(schema)
                .and_then(|n| n.rsplit('.').next())
                .unwrap_or(go_struct);
            for (k, child) in fields {
                let Some(child_schema) = props.get(k) else {
                    continue;
                };
                path.push(Step::Field(k.clone()));
                let found = self.find(child, child_schema, path, name);
                path.pop();
                if found.is_some() {
                    return found;
                }
            }
            return None;
        }
        match sch["type"].as_str() {
            Some("array") => {
                let Some(items) = v.as_array() else {
                    return miss(path);
                };
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    let found = self.find(item, &sch["items"], path, go_struct);
                    path.pop();
                    if found.is_some() {
                        return found;
                    }
                }
                None
            }
            Some("object") => {
                let Some(entries) = v.as_object() else {
                    return miss(path);
                };
                if !sch["additionalProperties"].is_object() {
                    return None;
                }
                for (k, item) in entries {
                    path.push(Step::Key(k.clone()));
                    let found = self.find(item, &sch["additionalProperties"], path, go_struct);
                    path.pop();
                    if found.is_some() {
                        return found;
                    }
                }
                None
            }
            Some("string") if !v.is_string() => miss(path),
            Some("boolean") if !v.is_boolean() => miss(path),
            Some("number") if !v.is_number() => miss(path),
            Some("integer") => {
                let fits = match sch["format"].as_str() {
                    Some("int32") => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
                    _ => v.as_i64().is_some(),
                };
                if fits { None } else { miss(path) }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
