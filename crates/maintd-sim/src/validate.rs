//! Defaulting and validation the apiserver applies to the built-in kinds the
//! simulator cares about. Custom resources are checked against their CRD's
//! schema in `crd_validation.rs`.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::meta;
use super::resources::{Gr, ResourceDef};
use super::store::Store;

/// The two priority classes every cluster has.
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

/// Fills in what the apiserver (and its admission plugins) would.
pub fn default_new(store: &Store, def: &ResourceDef, obj: &mut Value) {
    match (def.group.as_str(), def.kind.as_str()) {
        ("", "Pod") => {
            if obj["spec"]["terminationGracePeriodSeconds"].is_null() {
                obj["spec"]["terminationGracePeriodSeconds"] = json!(30);
            }
            if obj["spec"]["priority"].is_null() {
                // The Priority admission plugin resolves the class name.
                let class = obj["spec"]["priorityClassName"].as_str().unwrap_or("");
                let value = priority_of_class(store, class).unwrap_or(0);
                obj["spec"]["priority"] = json!(value);
            }
            if obj["status"]["phase"].is_null() {
                obj["status"]["phase"] = json!("Pending");
            }
        }
        // A Node's spec and status are Go structs, not pointers: the API
        // server always serializes both, empty or not.
        ("", "Node") => {
            for part in ["spec", "status"] {
                if !obj[part].is_object() {
                    obj[part] = json!({});
                }
            }
        }
        ("", "Namespace") => {
            if obj["status"]["phase"].is_null() {
                obj["status"] = json!({"phase": "Active"});
            }
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(meta::name(obj));
        }
        ("", "PersistentVolume" | "PersistentVolumeClaim") => super::volumes::default_new(def, obj),
        _ => default_workload(def, obj),
    }
}

/// The workload defaults the API server fills in on every write (create,
/// update, patch), so that `kubectl get -o yaml` and `kubectl rollout
/// status` see what they would on a cluster. Pod template defaults are
/// left out: they would change nothing the simulator does.
pub fn default_workload(def: &ResourceDef, obj: &mut Value) {
    if def.group != "apps" || !obj["spec"].is_object() {
        return;
    }
    let spec = &mut obj["spec"];
    let mut fill = |key: &str, value: Value| {
        if spec[key].is_null() {
            spec[key] = value;
        }
    };
    match def.kind.as_str() {
        "Deployment" => {
            fill("replicas", json!(1));
            fill("revisionHistoryLimit", json!(10));
            fill("progressDeadlineSeconds", json!(600));
            fill(
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
        }
        "StatefulSet" => {
            fill("replicas", json!(1));
            fill("revisionHistoryLimit", json!(10));
            fill("podManagementPolicy", json!("OrderedReady"));
            fill(
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            fill(
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
        }
        "ReplicaSet" => fill("replicas", json!(1)),
        "DaemonSet" => {
            fill("revisionHistoryLimit", json!(10));
            fill(
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            );
        }
        _ => {}
    }
}

fn priority_of_class(store: &Store, class: &str) -> Option<i64> {
    if class.is_empty() {
        return None;
    }
    if let Some(pc) = store.get(&Gr::new("scheduling.k8s.io", "priorityclasses"), "", class) {
        return pc["value"].as_i64();
    }
    SYSTEM_PRIORITY_CLASSES
        .iter()
        .find(|(n, _)| *n == class)
        .map(|(_, v)| *v)
}

/// Rejects what the apiserver would reject with 422 Invalid.
pub fn check(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let name = meta::name(obj);
    let mut causes: Vec<(String, String)> = Vec::new();
    let name_ok = if def.kind == "Event" {
        !name.is_empty() && name.len() <= 253
    } else {
        meta::valid_subdomain(name)
    };
    if !name_ok {
        causes.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    }
    for (field, v) in [
        ("metadata.labels", &obj["metadata"]["labels"]),
        ("metadata.annotations", &obj["metadata"]["annotations"]),
    ] {
        if let Some(m) = v.as_object() {
            if m.values().any(|x| !x.is_string()) {
                causes.push((field.into(), "Invalid value: values must be strings".into()));
            }
        } else if !v.is_null() {
            causes.push((
                field.into(),
                "Invalid value: must be a map of strings".into(),
            ));
        }
    }
    match (def.group.as_str(), def.kind.as_str()) {
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            if let Err(why) = super::admission::check_policy(obj) {
                causes.push(("spec".into(), why));
            }
        }
        ("", "Node") => check_taints(&obj["spec"]["taints"], &mut causes),
        ("", "Pod") => {
            if obj["spec"]["containers"]
                .as_array()
                .is_none_or(|c| c.is_empty())
            {
                causes.push(("spec.containers".into(), "Required value".into()));
            }
            super::lifecycle::check_pod(&obj["spec"], &mut causes);
        }
        ("policy", "PodDisruptionBudget") => {
            let spec = &obj["spec"];
            if !spec["minAvailable"].is_null() && !spec["maxUnavailable"].is_null() {
                causes.push((
                    "spec".into(),
                    "Invalid value: minAvailable and maxUnavailable cannot be both set".into(),
                ));
            }
        }
        (super::lifecycle::GROUP, _) => super::lifecycle::check(def, obj, &mut causes),
        ("", "PersistentVolume" | "PersistentVolumeClaim")
        | (super::volumes::STORAGE_GROUP, "VolumeAttachment") => {
            super::volumes::check(def, obj, &mut causes)
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.gr(), name, &def.kind, causes))
    }
}

fn check_taints(taints: &Value, causes: &mut Vec<(String, String)>) {
    let Some(list) = taints.as_array() else {
        if !taints.is_null() {
            causes.push(("spec.taints".into(), "Invalid value: must be a list".into()));
        }
        return;
    };
    let mut seen = std::collections::HashSet::new();
    for (i, t) in list.iter().enumerate() {
        let key = t["key"].as_str().unwrap_or("");
        let effect = t["effect"].as_str().unwrap_or("");
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            causes.push((
                format!("spec.taints[{i}].key"),
                format!("Invalid value: {key:?}"),
            ));
        }
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            causes.push((
                format!("spec.taints[{i}].effect"),
                format!("Unsupported value: {effect:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""),
            ));
        }
        if let Some(v) = t.get("value")
            && !v.is_null()
            && v.as_str().is_none_or(|s| s.len() > 63)
        {
            causes.push((
                format!("spec.taints[{i}].value"),
                "Invalid value: must be a string of at most 63 characters".into(),
            ));
        }
        if !seen.insert((key.to_string(), effect.to_string())) {
            causes.push((
                format!("spec.taints[{i}]"),
                format!(
                    "Duplicate value: taints must be unique by key and effect pair ({key}:{effect})"
                ),
            ));
        }
    }
}
