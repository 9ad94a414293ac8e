//! The protobuf layout of the built-in kinds, read from `schema.txt` (made
//! by `scripts/gen-sim-proto-schema.py` from the k8s-pb and k8s-openapi
//! crates; the file's header says how it reads).

use std::collections::HashMap;
use std::sync::OnceLock;

/// A scalar field type, as Kubernetes' messages use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    String,
    Bool,
    Int32,
    Int64,
    Double,
    Bytes,
}

impl Scalar {
    fn parse(s: &str) -> Option<Scalar> {
        Some(match s {
            "string" => Scalar::String,
            "bool" => Scalar::Bool,
            "int32" => Scalar::Int32,
            "int64" => Scalar::Int64,
            "double" => Scalar::Double,
            "bytes" => Scalar::Bytes,
            _ => return None,
        })
    }
}

/// What one field holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Scalar(Scalar),
    /// A message, by full name.
    Message(String),
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    One,
    List,
    /// A map with keys of this type.
    Map(Scalar),
}

/// One field of a message.
#[derive(Debug, Clone)]
pub struct Field {
    /// The field's name in the JSON form.
    pub json: String,
    pub ty: Type,
    pub card: Card,
    /// Required in the JSON form: written even when empty.
    pub required: bool,
    /// Embedded inline in Go (`json:",inline"`): its fields are the
    /// parent's in the JSON form.
    pub inline: bool,
}

/// The layout of every message the simulator can read.
#[derive(Debug, Default)]
pub struct Schema {
    messages: HashMap<String, HashMap<u32, Field>>,
    /// (apiVersion, kind) → message name.
    kinds: HashMap<(String, String), String>,
}

impl Schema {
    /// The built-in schema, parsed on first use.
    pub fn builtin() -> Result<&'static Schema, String> {
        static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
        SCHEMA
            .get_or_init(|| Schema::parse(include_str!("schema.txt")))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The fields of message `name`, by number.
    pub fn message(&self, name: &str) -> Option<&HashMap<u32, Field>> {
        self.messages.get(name)
    }

    /// The message of a kind.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<&str> {
        // DeleteOptions is registered in every group version, so a typed
        // client's delete body names the group it deletes from.
        let api_version = if kind == "DeleteOptions" {
            "meta.k8s.io/v1"
        } else {
            api_version
        };
        self.kinds
            .get(&(api_version.to_string(), kind.to_string()))
            .map(String::as_str)
    }

    /// The API versions whose kinds can be read, sorted.
    pub fn api_versions(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.kinds.keys().map(|(av, _)| av.as_str()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub(super) fn parse(text: &str) -> Result<Schema, String> {
        let mut schema = Schema::default();
        let mut current: Option<(String, HashMap<u32, Field>)> = None;
        for (i, line) in text.lines().enumerate() {
            let bad = || format!("schema.txt line {}: cannot read {line:?}", i + 1);
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [] => {}
                [w, ..] if w.starts_with('#') => {}
                ["kind", api_version, kind, message] => {
                    schema.kinds.insert(
                        (api_version.to_string(), kind.to_string()),
                        message.to_string(),
                    );
                }
                ["message", name] => {
                    if let Some((name, fields)) = current.take() {
                        schema.messages.insert(name, fields);
                    }
                    current = Some((name.to_string(), HashMap::new()));
                }
                [number, json, ty, flags @ ..] => {
                    let (message, fields) = current.as_mut().ok_or_else(bad)?;
                    let number: u32 = number.parse().map_err(|_| bad())?;
                    let package = message.rsplit_once('.').map_or("", |(p, _)| p);
                    let (card, ty) = if let Some(t) = ty.strip_prefix("[]") {
                        (Card::List, t)
                    } else if let Some(t) = ty.strip_prefix("map[") {
                        let (key, t) = t.split_once(']').ok_or_else(bad)?;
                        (Card::Map(Scalar::parse(key).ok_or_else(bad)?), t)
                    } else {
                        (Card::One, *ty)
                    };
                    let ty = match Scalar::parse(ty) {
                        Some(s) => Type::Scalar(s),
                        None if ty.contains('.') => Type::Message(ty.to_string()),
                        None => Type::Message(format!("{package}.{ty}")),
                    };
                    fields.insert(
                        number,
                        Field {
                            json: json.to_string(),
                            ty,
                            card,
                            required: flags.contains(&"required"),
                            inline: flags.contains(&"inline"),
                        },
                    );
                }
                _ => return Err(bad()),
            }
        }
        if let Some((name, fields)) = current.take() {
            schema.messages.insert(name, fields);
        }
        Ok(schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_schema_is_whole() {
        let schema = Schema::builtin().unwrap();
        for (name, fields) in &schema.messages {
            for f in fields.values() {
                if let Type::Message(m) = &f.ty {
                    assert!(schema.messages.contains_key(m), "{name}.{}: {m}", f.json);
                }
            }
        }
        for (kind, message) in &schema.kinds {
            assert!(schema.messages.contains_key(message), "{kind:?}");
        }
        // The kinds typed `kubectl create` sends as protobuf.
        for (av, kind) in [
            ("v1", "Namespace"),
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "Service"),
            ("v1", "ServiceAccount"),
            ("apps/v1", "Deployment"),
            ("policy/v1", "PodDisruptionBudget"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ] {
            assert!(schema.kind(av, kind).is_some(), "{av} {kind}");
        }
    }

    #[test]
    fn names_come_from_the_json_form() {
        let schema = Schema::builtin().unwrap();
        let spec = schema.message("k8s.io.api.core.v1.ServiceSpec").unwrap();
        assert_eq!(spec[&3].json, "clusterIP");
        let volume = schema.message("k8s.io.api.core.v1.Volume").unwrap();
        assert!(volume[&2].inline, "VolumeSource is embedded inline");
        let source = schema.message("k8s.io.api.core.v1.VolumeSource").unwrap();
        assert!(source.values().any(|f| f.json == "downwardAPI"));
        let port = schema.message("k8s.io.api.core.v1.ServicePort").unwrap();
        assert!(port[&3].required && !port[&1].required);
    }

    #[test]
    fn a_line_it_cannot_read_is_an_error() {
        let err = Schema::parse("message a.B\n  x name string\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(Schema::parse("  1 name string\n").is_err());
        assert!(Schema::parse("message a.B\n  1 m map[float]string\n").is_err());
    }
}
