//! [`PodInfo`]: the few facts about a pod the plan needs, read leniently.
//!
//! The agent watches pods as raw JSON, and one pod with a malformed field must
//! never stop the drain of the rest of the node. So reading a pod never fails:
//! every field that is missing takes its Kubernetes default silently, and every
//! field that is present but malformed takes a default and leaves a warning
//! saying which field and what was wrong.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::{Map, Value};

/// Priority of the built-in `system-cluster-critical` PriorityClass.
pub const SYSTEM_CLUSTER_CRITICAL: i32 = 2_000_000_000;
/// Priority of the built-in `system-node-critical` PriorityClass.
pub const SYSTEM_NODE_CRITICAL: i32 = 2_000_001_000;
/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// The value of a well-known (built-in) PriorityClass, if `name` is one.
pub fn well_known_priority(name: &str) -> Option<i32> {
    match name {
        "system-cluster-critical" => Some(SYSTEM_CLUSTER_CRITICAL),
        "system-node-critical" => Some(SYSTEM_NODE_CRITICAL),
        _ => None,
    }
}

/// The owner reference that decides a pod's type: its controller if it has
/// one, else its first owner.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    /// Its API group and version (`apps/v1`), for an Event about it.
    #[serde(skip)]
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// `controller: true` on the reference: the owner recreates the pod.
    pub controller: bool,
}

/// One entry of `spec.tolerations`; absent fields are empty strings, which is
/// what they mean in Kubernetes (empty effect = all effects, and so on).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
}

/// What the drain plan needs to know about one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// `spec.priority`, or the well-known class's value, or 0.
    pub priority: i32,
    pub priority_class: Option<String>,
    pub owner: Option<OwnerRef>,
    /// `status.phase`; empty when unknown.
    pub phase: String,
    /// `metadata.deletionTimestamp` is set: the pod is already terminating.
    pub deleting: bool,
    pub tolerations: Vec<Toleration>,
    /// The pod mounts an `emptyDir` volume, whose data a drain destroys.
    pub has_empty_dir: bool,
    /// `spec.terminationGracePeriodSeconds` (default 30, never negative).
    pub termination_grace_seconds: i64,
    pub node_name: String,
    /// One line per malformed field: which field, what was wrong, what was used.
    pub warnings: Vec<String>,
}

impl Default for PodInfo {
    fn default() -> Self {
        PodInfo {
            namespace: String::new(),
            name: String::new(),
            uid: String::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            priority: 0,
            priority_class: None,
            owner: None,
            phase: String::new(),
            deleting: false,
            tolerations: Vec::new(),
            has_empty_dir: false,
            termination_grace_seconds: DEFAULT_GRACE_SECONDS,
            node_name: String::new(),
            warnings: Vec::new(),
        }
    }
}

impl PodInfo {
    /// Reads a pod from its JSON form. Never fails: see the module docs.
    pub fn from_json(v: &Value) -> PodInfo {
        let mut r = Reader::default();
        let mut pod = PodInfo::default();
        let Some(root) = v.as_object() else {
            r.warn("pod", v, "an object", "ignoring the whole pod body");
            pod.warnings = r.warnings;
            return pod;
        };
        let meta = r.object(root, "metadata", "metadata");
        let spec = r.object(root, "spec", "spec");
        let status = r.object(root, "status", "status");

        pod.namespace = r
            .string(meta, "namespace", "metadata.namespace")
            .unwrap_or_default();
        pod.name = r.string(meta, "name", "metadata.name").unwrap_or_default();
        pod.uid = r.string(meta, "uid", "metadata.uid").unwrap_or_default();
        pod.labels = r.string_map(meta, "labels", "metadata.labels");
        pod.annotations = r.string_map(meta, "annotations", "metadata.annotations");
        pod.deleting = meta
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some_and(|t| !t.is_null());
        pod.owner = r.owner(meta);

        pod.node_name = r
            .string(spec, "nodeName", "spec.nodeName")
            .unwrap_or_default();
        pod.priority_class = r.string(spec, "priorityClassName", "spec.priorityClassName");
        pod.priority = r.priority(spec, pod.priority_class.as_deref());
        pod.tolerations = r.tolerations(spec);
        pod.has_empty_dir = r.has_empty_dir(spec);
        pod.termination_grace_seconds = r.grace(spec);

        pod.phase = r
            .string(status, "phase", "status.phase")
            .unwrap_or_default();
        pod.warnings = r.warnings;
        pod
    }

    /// Reads a typed pod, through the same lenient path as [`PodInfo::from_json`]
    /// so both give identical results.
    pub fn from_pod(p: &Pod) -> PodInfo {
        match serde_json::to_value(p) {
            Ok(v) => PodInfo::from_json(&v),
            // Not expected for a typed Pod; keep the identity so it is reported.
            Err(e) => PodInfo {
                namespace: p.metadata.namespace.clone().unwrap_or_default(),
                name: p.metadata.name.clone().unwrap_or_default(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                warnings: vec![format!(
                    "pod: could not be serialized ({e}); using defaults"
                )],
                ..PodInfo::default()
            },
        }
    }

    /// The owner reference if it is the pod's controller.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owner.as_ref().filter(|o| o.controller)
    }
}

/// Collects warnings while reading one pod.
#[derive(Default)]
struct Reader {
    warnings: Vec<String>,
}

type Obj = Map<String, Value>;

impl Reader {
    fn warn(&mut self, path: &str, found: &Value, expected: &str, fallback: &str) {
        self.warnings.push(format!(
            "{path}: expected {expected}, found {}; {fallback}",
            describe(found)
        ));
    }

    /// A nested object; absent or null is `None` without a warning.
    fn object<'a>(&mut self, parent: &'a Obj, key: &str, path: &str) -> Option<&'a Obj> {
        match parent.get(key)? {
            Value::Null => None,
            Value::Object(m) => Some(m),
            other => {
                self.warn(path, other, "an object", "ignoring it");
                None
            }
        }
    }

    fn list<'a>(&mut self, parent: Option<&'a Obj>, key: &str, path: &str) -> &'a [Value] {
        match parent.and_then(|p| p.get(key)) {
            None | Some(Value::Null) => &[],
            Some(Value::Array(items)) => items,
            Some(other) => {
                self.warn(path, other, "a list", "ignoring it");
                &[]
            }
        }
    }

    fn string(&mut self, parent: Option<&Obj>, key: &str, path: &str) -> Option<String> {
        match parent?.get(key)? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => {
                self.warn(path, other, "a string", "ignoring it");
                None
            }
        }
    }

    fn string_map(
        &mut self,
        parent: Option<&Obj>,
        key: &str,
        path: &str,
    ) -> BTreeMap<String, String> {
        let Some(parent) = parent else {
            return BTreeMap::new();
        };
        let Some(map) = self.object(parent, key, path) else {
            return BTreeMap::new();
        };
        let mut out = BTreeMap::new();
        for (k, v) in map {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => self.warn(
                    &format!("{path}[{k:?}]"),
                    other,
                    "a string",
                    "ignoring this entry",
                ),
            }
        }
        out
    }

    fn owner(&mut self, meta: Option<&Obj>) -> Option<OwnerRef> {
        let mut owners = Vec::new();
        for (i, item) in self
            .list(meta, "ownerReferences", "metadata.ownerReferences")
            .iter()
            .enumerate()
        {
            let path = format!("metadata.ownerReferences[{i}]");
            let Some(obj) = item.as_object() else {
                self.warn(&path, item, "an object", "ignoring this owner");
                continue;
            };
            // An empty kind (what a typed pod writes for a missing one) is
            // no kind either: both readings of a pod must agree.
            let Some(kind) = self
                .string(Some(obj), "kind", &format!("{path}.kind"))
                .filter(|k| !k.is_empty())
            else {
                self.warnings
                    .push(format!("{path}: has no kind; ignoring this owner"));
                continue;
            };
            let controller = match obj.get("controller") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    self.warn(
                        &format!("{path}.controller"),
                        other,
                        "true or false",
                        "using false",
                    );
                    false
                }
            };
            owners.push(OwnerRef {
                api_version: obj
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                kind,
                name: self
                    .string(Some(obj), "name", &format!("{path}.name"))
                    .unwrap_or_default(),
                uid: self
                    .string(Some(obj), "uid", &format!("{path}.uid"))
                    .unwrap_or_default(),
                controller,
            });
        }
        let controller = owners.iter().position(|o| o.controller).unwrap_or(0);
        (!owners.is_empty()).then(|| owners.swap_remove(controller))
    }

    /// `spec.priority`, falling back to the well-known class names, then 0.
    fn priority(&mut self, spec: Option<&Obj>, class: Option<&str>) -> i32 {
        let from_class = class.and_then(well_known_priority);
        let fallback = match (from_class, class) {
            (Some(p), Some(c)) => format!("using {p} from priorityClassName {c}"),
            (None, Some(c)) => format!("priorityClassName {c} is not a built-in class; using 0"),
            (_, None) => "no priorityClassName; using 0".to_string(),
        };
        match spec.and_then(|s| s.get("priority")) {
            None | Some(Value::Null) => {
                if from_class.is_none() && class.is_some() {
                    self.warnings
                        .push(format!("spec.priority: missing and {fallback}"));
                }
                from_class.unwrap_or(0)
            }
            Some(Value::Number(n)) if n.as_i64().is_some() || n.as_u64().is_some() => {
                // Out-of-range values keep their direction: a huge number still
                // means "most critical", so it must still drain last.
                let wide = n.as_i64().unwrap_or(i64::MAX);
                let clamped = wide.clamp(i64::from(i32::MIN), i64::from(i32::MAX));
                if clamped != wide {
                    self.warnings.push(format!(
                        "spec.priority: {n} is outside the 32-bit range; using {clamped}"
                    ));
                }
                clamped as i32
            }
            Some(other) => {
                self.warn("spec.priority", other, "an integer", &fallback);
                from_class.unwrap_or(0)
            }
        }
    }

    fn tolerations(&mut self, spec: Option<&Obj>) -> Vec<Toleration> {
        let mut out = Vec::new();
        for (i, item) in self
            .list(spec, "tolerations", "spec.tolerations")
            .iter()
            .enumerate()
        {
            let path = format!("spec.tolerations[{i}]");
            let Some(obj) = item.as_object() else {
                self.warn(&path, item, "an object", "ignoring this toleration");
                continue;
            };
            let mut field = |name: &str| {
                self.string(Some(obj), name, &format!("{path}.{name}"))
                    .unwrap_or_default()
            };
            out.push(Toleration {
                key: field("key"),
                operator: field("operator"),
                value: field("value"),
                effect: field("effect"),
            });
        }
        out
    }

    fn has_empty_dir(&mut self, spec: Option<&Obj>) -> bool {
        let volumes = self.list(spec, "volumes", "spec.volumes");
        volumes
            .iter()
            .any(|v| v.get("emptyDir").is_some_and(|e| !e.is_null()))
    }

    fn grace(&mut self, spec: Option<&Obj>) -> i64 {
        let path = "spec.terminationGracePeriodSeconds";
        match spec.and_then(|s| s.get("terminationGracePeriodSeconds")) {
            None | Some(Value::Null) => DEFAULT_GRACE_SECONDS,
            Some(Value::Number(n)) => match n.as_i64() {
                Some(s) if s >= 0 => s,
                Some(s) => {
                    self.warnings
                        .push(format!("{path}: {s} is negative; using 0"));
                    0
                }
                None => {
                    self.warn(
                        path,
                        &Value::Number(n.clone()),
                        "a whole number of seconds",
                        "using 30",
                    );
                    DEFAULT_GRACE_SECONDS
                }
            },
            Some(other) => {
                self.warn(path, other, "a whole number of seconds", "using 30");
                DEFAULT_GRACE_SECONDS
            }
        }
    }
}

/// A short description of a JSON value for a warning (long strings cut).
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("the string {:?}…", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}
