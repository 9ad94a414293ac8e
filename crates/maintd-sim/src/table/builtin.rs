//! The columns a real apiserver prints for the built-in kinds the simulator
//! serves, and the cells of one object's row.

use serde_json::{Value, json};

use super::human_duration;
use crate::meta;
use crate::resources::ResourceDef;

pub(super) struct Col {
    pub(super) name: &'static str,
    pub(super) priority: i64,
    pub(super) format: &'static str,
}

pub(super) const fn col(name: &'static str, priority: i64) -> Col {
    Col {
        name,
        priority,
        format: "",
    }
}

pub(super) fn builtin_columns(def: &ResourceDef) -> Vec<Col> {
    if let Some(cols) = super::storage::columns(&def.group, &def.plural) {
        return cols;
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => vec![
            col("Name", 0),
            col("Ready", 0),
            col("Status", 0),
            col("Restarts", 0),
            col("Age", 0),
            col("IP", 1),
            col("Node", 1),
            col("Nominated Node", 1),
            col("Readiness Gates", 1),
        ],
        ("", "nodes") => vec![
            col("Name", 0),
            col("Status", 0),
            col("Roles", 0),
            col("Age", 0),
            col("Version", 0),
            col("Internal-IP", 1),
            col("External-IP", 1),
            col("OS-Image", 1),
            col("Kernel-Version", 1),
            col("Container-Runtime", 1),
        ],
        ("", "namespaces") => vec![col("Name", 0), col("Status", 0), col("Age", 0)],
        ("apps", "daemonsets") => vec![
            col("Name", 0),
            col("Desired", 0),
            col("Current", 0),
            col("Ready", 0),
            col("Up-to-date", 0),
            col("Available", 0),
            col("Node Selector", 0),
            col("Age", 0),
        ],
        ("apps", "replicasets") => vec![
            col("Name", 0),
            col("Desired", 0),
            col("Current", 0),
            col("Ready", 0),
            col("Age", 0),
        ],
        ("apps", "deployments") => vec![
            col("Name", 0),
            col("Ready", 0),
            col("Up-to-date", 0),
            col("Available", 0),
            col("Age", 0),
            col("Containers", 1),
            col("Images", 1),
            col("Selector", 1),
        ],
        ("apps", "statefulsets") => vec![
            col("Name", 0),
            col("Ready", 0),
            col("Age", 0),
            col("Containers", 1),
            col("Images", 1),
        ],
        ("policy", "poddisruptionbudgets") => vec![
            col("Name", 0),
            col("Min Available", 0),
            col("Max Unavailable", 0),
            col("Allowed Disruptions", 0),
            col("Age", 0),
        ],
        ("coordination.k8s.io", "leases") => vec![col("Name", 0), col("Holder", 0), col("Age", 0)],
        ("scheduling.k8s.io", "priorityclasses") => vec![
            col("Name", 0),
            col("Value", 0),
            col("Global-Default", 0),
            col("Age", 0),
        ],
        (_, "events") => vec![
            col("Last Seen", 0),
            col("Type", 0),
            col("Reason", 0),
            col("Object", 0),
            col("Message", 0),
        ],
        ("apiextensions.k8s.io", _) => vec![col("Name", 0), col("Created At", 0)],
        _ => vec![col("Name", 0), col("Age", 0)],
    }
}

pub(super) fn age(o: &Value) -> String {
    o["metadata"]["creationTimestamp"]
        .as_str()
        .and_then(meta::age_secs)
        .map(human_duration)
        .unwrap_or_else(|| "<unknown>".into())
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<none>".into(),
        other => other.to_string(),
    }
}

pub(super) fn builtin_cells(def: &ResourceDef, o: &Value) -> Vec<Value> {
    let name = json!(meta::name(o));
    let st = &o["status"];
    let sp = &o["spec"];
    if let Some(cells) = super::storage::cells(&def.group, &def.plural, o) {
        return cells;
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => {
            let total = sp["containers"].as_array().map_or(0, |c| c.len());
            let ready = if meta::pod_ready(o) { total } else { 0 };
            let status = if meta::is_terminating(o) {
                "Terminating".to_string()
            } else if st["phase"] == "Succeeded" {
                "Completed".to_string()
            } else {
                st["phase"].as_str().unwrap_or("Unknown").to_string()
            };
            vec![
                name,
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(0),
                json!(age(o)),
                json!(st["podIP"].as_str().unwrap_or("<none>")),
                json!(sp["nodeName"].as_str().unwrap_or("<none>")),
                json!("<none>"),
                json!("<none>"),
            ]
        }
        ("", "nodes") => {
            let mut status = if meta::node_ready(o) {
                "Ready"
            } else {
                "NotReady"
            }
            .to_string();
            if sp["unschedulable"] == true {
                status.push_str(",SchedulingDisabled");
            }
            let roles: Vec<&str> = o["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            let roles = if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            };
            let addr = |t: &str| {
                st["addresses"]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x["type"] == t))
                    .map_or("<none>".to_string(), |x| s(&x["address"]))
            };
            let info = &st["nodeInfo"];
            vec![
                name,
                json!(status),
                json!(roles),
                json!(age(o)),
                json!(s(&info["kubeletVersion"])),
                json!(addr("InternalIP")),
                json!(addr("ExternalIP")),
                json!(s(&info["osImage"])),
                json!(s(&info["kernelVersion"])),
                json!(s(&info["containerRuntimeVersion"])),
            ]
        }
        ("", "namespaces") => vec![name, json!(s(&st["phase"])), json!(age(o))],
        ("apps", "daemonsets") => {
            let n = |k: &str| json!(st[k].as_i64().unwrap_or(0));
            let selector = sp["template"]["spec"]["nodeSelector"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", s(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|x| !x.is_empty())
                .unwrap_or_else(|| "<none>".into());
            vec![
                name,
                n("desiredNumberScheduled"),
                n("currentNumberScheduled"),
                n("numberReady"),
                n("updatedNumberScheduled"),
                n("numberAvailable"),
                json!(selector),
                json!(age(o)),
            ]
        }
        ("apps", "replicasets") => vec![
            name,
            json!(sp["replicas"].as_i64().unwrap_or(1)),
            json!(st["replicas"].as_i64().unwrap_or(0)),
            json!(st["readyReplicas"].as_i64().unwrap_or(0)),
            json!(age(o)),
        ],
        ("apps", "deployments") => {
            let (names, images) = containers(sp);
            vec![
                name,
                json!(ready_of(o)),
                json!(st["updatedReplicas"].as_i64().unwrap_or(0)),
                json!(st["availableReplicas"].as_i64().unwrap_or(0)),
                json!(age(o)),
                json!(names),
                json!(images),
                json!(selector(&sp["selector"])),
            ]
        }
        ("apps", "statefulsets") => {
            let (names, images) = containers(sp);
            vec![
                name,
                json!(ready_of(o)),
                json!(age(o)),
                json!(names),
                json!(images),
            ]
        }
        ("policy", "poddisruptionbudgets") => {
            let or_na = |v: &Value| if v.is_null() { "N/A".to_string() } else { s(v) };
            vec![
                name,
                json!(or_na(&sp["minAvailable"])),
                json!(or_na(&sp["maxUnavailable"])),
                json!(st["disruptionsAllowed"].as_i64().unwrap_or(0)),
                json!(age(o)),
            ]
        }
        ("coordination.k8s.io", "leases") => vec![
            name,
            json!(sp["holderIdentity"].as_str().unwrap_or("")),
            json!(age(o)),
        ],
        ("scheduling.k8s.io", "priorityclasses") => vec![
            name,
            json!(o["value"].as_i64().unwrap_or(0)),
            json!(o["globalDefault"].as_bool().unwrap_or(false)),
            json!(age(o)),
        ],
        (_, "events") => {
            let regarding = if o["regarding"].is_object() {
                &o["regarding"]
            } else {
                &o["involvedObject"]
            };
            let when = o["eventTime"]
                .as_str()
                .or(o["lastTimestamp"].as_str())
                .or(o["metadata"]["creationTimestamp"].as_str());
            vec![
                json!(
                    when.and_then(meta::age_secs)
                        .map(human_duration)
                        .unwrap_or_default()
                ),
                json!(s(&o["type"])),
                json!(s(&o["reason"])),
                json!(format!(
                    "{}/{}",
                    s(&regarding["kind"]).to_lowercase(),
                    s(&regarding["name"])
                )),
                json!(o["note"].as_str().or(o["message"].as_str()).unwrap_or("")),
            ]
        }
        ("apiextensions.k8s.io", _) => vec![name, json!(s(&o["metadata"]["creationTimestamp"]))],
        _ => vec![name, json!(age(o))],
    }
}

/// "ready/desired", as kubectl prints a Deployment's or StatefulSet's READY.
fn ready_of(o: &Value) -> String {
    format!(
        "{}/{}",
        o["status"]["readyReplicas"].as_i64().unwrap_or(0),
        o["spec"]["replicas"].as_i64().unwrap_or(1)
    )
}

/// The template's container names and images, comma-separated.
fn containers(spec: &Value) -> (String, String) {
    let cs = spec["template"]["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let join = |k: &str| {
        cs.iter()
            .map(|c| c[k].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    (join("name"), join("image"))
}

/// A label selector as kubectl prints it (`app=web,tier in (a,b)`).
fn selector(sel: &Value) -> String {
    let mut parts: Vec<String> = sel["matchLabels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", s(v))).collect())
        .unwrap_or_default();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = s(&e["key"]);
        let values: Vec<String> = e["values"]
            .as_array()
            .map(|vs| vs.iter().map(s).collect())
            .unwrap_or_default();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key,
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}
