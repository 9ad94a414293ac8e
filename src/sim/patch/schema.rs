//! How each list field of a resource merges: by key (a list-map, Kubernetes'
//! patchMergeKey / x-kubernetes-list-map-keys), as a set, or atomically.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole.
    Atomic,
    /// Merged by these keys.
    Map(Vec<String>),
    /// Merged as a set of scalars.
    Set,
}

/// List kinds by path of field names (list elements elided), e.g.
/// `spec.taints` or `status.nodes`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListSchema {
    lists: BTreeMap<String, ListKind>,
}

fn map(keys: &[&str]) -> ListKind {
    ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
}

impl ListSchema {
    /// What Kubernetes' patch strategies say for the built-in kinds the
    /// simulator serves.
    pub fn builtin(group: &str, kind: &str) -> ListSchema {
        let mut lists: BTreeMap<String, ListKind> = BTreeMap::new();
        lists.insert("metadata.ownerReferences".into(), map(&["uid"]));
        lists.insert("metadata.finalizers".into(), ListKind::Set);
        let pod_spec = |prefix: &str, lists: &mut BTreeMap<String, ListKind>| {
            for c in ["containers", "initContainers"] {
                lists.insert(format!("{prefix}.{c}"), map(&["name"]));
                lists.insert(format!("{prefix}.{c}.env"), map(&["name"]));
                lists.insert(
                    format!("{prefix}.{c}.ports"),
                    map(&["containerPort", "protocol"]),
                );
                lists.insert(format!("{prefix}.{c}.volumeMounts"), map(&["mountPath"]));
            }
            lists.insert(format!("{prefix}.volumes"), map(&["name"]));
            lists.insert(format!("{prefix}.imagePullSecrets"), map(&["name"]));
        };
        match (group, kind) {
            ("", "Node") => {
                lists.insert("spec.taints".into(), map(&["key", "effect"]));
                lists.insert("status.conditions".into(), map(&["type"]));
                lists.insert("status.addresses".into(), map(&["type"]));
            }
            ("", "Pod") => {
                pod_spec("spec", &mut lists);
                lists.insert("status.conditions".into(), map(&["type"]));
            }
            ("apps", "DaemonSet" | "ReplicaSet" | "Deployment") => {
                pod_spec("spec.template.spec", &mut lists);
                lists.insert("status.conditions".into(), map(&["type"]));
            }
            ("policy", "PodDisruptionBudget") => {
                lists.insert("status.conditions".into(), map(&["type"]));
            }
            _ => {}
        }
        ListSchema { lists }
    }

    /// From a CRD's openAPIV3Schema: `x-kubernetes-list-type` map (with
    /// `x-kubernetes-list-map-keys`), set or atomic; lists without a list
    /// type are atomic, as for custom resources in Kubernetes.
    pub fn from_openapi_v3(schema: &Value) -> ListSchema {
        let mut s = Self::builtin("", "");
        walk(schema, "", &mut s.lists);
        s
    }

    /// How the list at `path` (field names joined with '.') merges.
    pub fn list_kind(&self, path: &str) -> ListKind {
        self.lists.get(path).cloned().unwrap_or(ListKind::Atomic)
    }
}

fn walk(schema: &Value, path: &str, out: &mut BTreeMap<String, ListKind>) {
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            let p = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            walk(sub, &p, out);
        }
    }
    if schema["type"] == "array" {
        let kind = match schema["x-kubernetes-list-type"].as_str() {
            Some("map") => ListKind::Map(
                schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .map(|ks| {
                        ks.iter()
                            .filter_map(|k| k.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Some("set") => ListKind::Set,
            _ => ListKind::Atomic,
        };
        out.insert(path.to_string(), kind);
        walk(&schema["items"], path, out);
    }
}
