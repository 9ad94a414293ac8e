//! How each list field of a resource merges: the part of a resource's schema
//! that strategic merge patch (`patchStrategy`/`patchMergeKey`) and
//! server-side apply (`x-kubernetes-list-type`/`-list-map-keys`) need.

use serde_json::Value;

/// How one list field merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole by every write and owned whole by one manager. The
    /// default for any list the schema does not name, as in Kubernetes.
    Atomic,
    /// A list of objects identified by these key fields. Strategic merge
    /// patch merges by the first key (Kubernetes' `patchMergeKey`);
    /// server-side apply identifies an item by all of them.
    Map(Vec<String>),
    /// A list of scalars with set semantics (`x-kubernetes-list-type: set`,
    /// or `patchStrategy: merge` without a merge key).
    Set,
}

/// The list kinds of one resource, by field path with list elements elided
/// (`["status", "nodes"]`). A `*` segment matches any key of a map
/// (`additionalProperties`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSchema {
    lists: Vec<(Vec<String>, ListKind)>,
    /// A CRD's `openAPIV3Schema`, for the fields it declares (None for
    /// built-in kinds, checked by their types instead).
    declared: Option<Value>,
}

/// Pod spec lists, relative to a pod spec (`spec` of a Pod,
/// `spec.template.spec` of a workload), as `k8s.io/api` tags them.
const POD_SPEC_LISTS: &[(&[&str], &[&str])] = &[
    (&["containers"], &["name"]),
    (&["initContainers"], &["name"]),
    (&["ephemeralContainers"], &["name"]),
    (&["volumes"], &["name"]),
    (&["imagePullSecrets"], &["name"]),
    (&["hostAliases"], &["ip"]),
    (&["schedulingGates"], &["name"]),
    (&["resourceClaims"], &["name"]),
    (&["evictionResponders"], &["name"]),
    (
        &["topologySpreadConstraints"],
        &["topologyKey", "whenUnsatisfiable"],
    ),
];

/// Container lists, relative to one container.
const CONTAINER_LISTS: &[(&str, &[&str])] = &[
    ("env", &["name"]),
    ("ports", &["containerPort"]),
    ("volumeMounts", &["mountPath"]),
    ("volumeDevices", &["devicePath"]),
];

impl ListSchema {
    /// The list kinds Kubernetes declares for a built-in resource
    /// (`group` is `""` for the core group). Every kind gets the metadata
    /// lists; an unknown kind gets only those.
    ///
    /// Node `spec.taints` and Pod `spec.tolerations` are atomic, as in
    /// Kubernetes (no patch merge key; k8s-openapi merges them atomically):
    /// `kubectl taint` sends the whole new list, never `$patch: delete`.
    pub fn builtin(group: &str, kind: &str) -> ListSchema {
        let mut schema = ListSchema::default().with_metadata();
        match (group, kind) {
            ("", "Node") => {
                schema = schema
                    .with(&["spec", "taints"], ListKind::Atomic)
                    .with(&["spec", "podCIDRs"], ListKind::Set)
                    .with(&["status", "conditions"], map(&["type"]))
                    .with(&["status", "addresses"], map(&["type"]));
            }
            ("", "Pod") => {
                schema = schema
                    .with_pod_spec(&["spec"])
                    .with(&["status", "conditions"], map(&["type"]))
                    .with(&["status", "podIPs"], map(&["ip"]))
                    .with(&["status", "hostIPs"], map(&["ip"]));
            }
            ("apps", "DaemonSet" | "ReplicaSet" | "Deployment" | "StatefulSet") => {
                schema = schema
                    .with_pod_spec(&["spec", "template", "spec"])
                    .with(&["status", "conditions"], map(&["type"]));
            }
            ("batch", "Job") => {
                schema = schema
                    .with_pod_spec(&["spec", "template", "spec"])
                    .with(&["status", "conditions"], map(&["type"]));
            }
            ("policy", "PodDisruptionBudget") => {
                schema = schema.with(&["status", "conditions"], map(&["type"]));
            }
            _ => {}
        }
        schema
    }

    /// Reads the list kinds from a CRD version's `openAPIV3Schema` (or the
    /// `schema` object holding it): `x-kubernetes-list-type: map` with
    /// `x-kubernetes-list-map-keys`, `set`, and `atomic` (also the default).
    /// The metadata lists are added, since CRD schemas do not describe
    /// metadata.
    pub fn from_openapi_v3(schema: &Value) -> ListSchema {
        let root = schema.get("openAPIV3Schema").unwrap_or(schema);
        let mut out = ListSchema::default().with_metadata();
        walk_openapi(root, &mut Vec::new(), &mut out);
        out.declared = Some(root.clone());
        out
    }

    /// A CRD's `openAPIV3Schema` (None for a built-in kind).
    pub fn declared(&self) -> Option<&Value> {
        self.declared.as_ref()
    }

    /// The first field of `obj` a CRD's schema does not declare, as the API
    /// server's server-side apply names it (`.status.pendingPodsRefs`):
    /// an apply of it is refused ("field not declared in schema"). Fields
    /// under `x-kubernetes-preserve-unknown-fields`, a map's values
    /// (`additionalProperties`) and objects without declared properties
    /// are not checked; neither is the root's apiVersion, kind, metadata.
    pub fn undeclared(&self, obj: &Value) -> Option<String> {
        fn walk(schema: &Value, obj: &Value, path: &str, root: bool) -> Option<String> {
            if schema["x-kubernetes-preserve-unknown-fields"] == true {
                return None;
            }
            match obj {
                Value::Object(map) => {
                    let props = schema["properties"].as_object();
                    let values = schema.get("additionalProperties").filter(|a| a.is_object());
                    for (key, value) in map {
                        if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                            continue;
                        }
                        let inner = format!("{path}.{key}");
                        let found = match (props, values) {
                            (Some(props), _) => match props.get(key) {
                                Some(s) => walk(s, value, &inner, false),
                                None => Some(inner),
                            },
                            (None, Some(s)) => walk(s, value, &inner, false),
                            (None, None) => None,
                        };
                        if found.is_some() {
                            return found;
                        }
                    }
                    None
                }
                Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
                    walk(&schema["items"], item, &format!("{path}[{i}]"), false)
                }),
                _ => None,
            }
        }
        walk(self.declared.as_ref()?, obj, "", true)
    }

    /// This schema with `path` merging as `kind` (replacing an earlier entry).
    pub fn with(mut self, path: &[&str], kind: ListKind) -> ListSchema {
        self.lists.retain(|(p, _)| !same_path(p, path));
        self.lists
            .push((path.iter().map(|s| s.to_string()).collect(), kind));
        self
    }

    /// How the list at `path` (field names, list elements elided) merges.
    pub fn list_kind(&self, path: &[&str]) -> ListKind {
        let exact = self.lists.iter().find(|(p, _)| same_path(p, path));
        let pattern = || {
            self.lists.iter().find(|(p, _)| {
                p.len() == path.len() && p.iter().zip(path).all(|(a, b)| a == "*" || a == b)
            })
        };
        exact
            .or_else(pattern)
            .map(|(_, kind)| kind.clone())
            .unwrap_or(ListKind::Atomic)
    }

    fn with_metadata(self) -> ListSchema {
        self.with(&["metadata", "ownerReferences"], map(&["uid"]))
            .with(&["metadata", "finalizers"], ListKind::Set)
    }

    fn with_pod_spec(mut self, prefix: &[&str]) -> ListSchema {
        let at = |rest: &[&str]| -> Vec<String> {
            prefix.iter().chain(rest).map(|s| s.to_string()).collect()
        };
        for (rest, keys) in POD_SPEC_LISTS {
            self.lists.push((at(rest), map(keys)));
        }
        self.lists.push((at(&["tolerations"]), ListKind::Atomic));
        self.lists.push((at(&["readinessGates"]), ListKind::Atomic));
        for containers in ["containers", "initContainers", "ephemeralContainers"] {
            for (field, keys) in CONTAINER_LISTS {
                self.lists.push((at(&[containers, field]), map(keys)));
            }
        }
        self
    }
}

fn map(keys: &[&str]) -> ListKind {
    ListKind::Map(keys.iter().map(|k| k.to_string()).collect())
}

fn same_path(stored: &[String], path: &[&str]) -> bool {
    stored.len() == path.len() && stored.iter().zip(path).all(|(a, b)| a == b)
}

fn walk_openapi(node: &Value, path: &mut Vec<String>, out: &mut ListSchema) {
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            path.push(name.clone());
            walk_openapi(sub, path, out);
            path.pop();
        }
    }
    if let Some(sub) = node.get("additionalProperties").filter(|v| v.is_object()) {
        path.push("*".to_string());
        walk_openapi(sub, path, out);
        path.pop();
    }
    if let Some(items) = node.get("items") {
        let kind = match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListKind::Set,
            Some("map") => {
                let keys: Vec<String> = node
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                // A map list without keys is rejected by CRD validation;
                // treating it as atomic is the safe reading.
                if keys.is_empty() {
                    ListKind::Atomic
                } else {
                    ListKind::Map(keys)
                }
            }
            _ => ListKind::Atomic,
        };
        if kind != ListKind::Atomic {
            out.lists.push((path.clone(), kind));
        }
        // List elements are elided from paths.
        walk_openapi(items, path, out);
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        if let Some(subs) = node.get(combinator).and_then(Value::as_array) {
            for sub in subs {
                walk_openapi(sub, path, out);
            }
        }
    }
}
