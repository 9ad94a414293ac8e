//! Server-side printing: the `Table` kubectl asks for with
//! `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, with the columns a
//! real apiserver prints for the kinds the simulator serves, and CRD
//! additionalPrinterColumns for custom resources.

use serde_json::{Value, json};

use super::meta;
use super::resources::ResourceDef;

struct Col {
    name: &'static str,
    priority: i64,
    format: &'static str,
}

const fn col(name: &'static str, priority: i64) -> Col {
    Col {
        name,
        priority,
        format: "",
    }
}

/// Objects of one resource as a Table. `full` puts whole objects in the rows
/// (includeObject=Object); otherwise rows carry their metadata only.
pub fn to_table(def: &ResourceDef, objs: &[Value], rv: &str, full: bool) -> Value {
    let (mut defs, rows): (Vec<Value>, Vec<Vec<Value>>) = if def.custom {
        custom_table(def, objs)
    } else {
        let cols = builtin_columns(def);
        let defs = cols
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": "string", "format": if c.name == "Name" { "name" } else { c.format }, "description": "", "priority": c.priority})
            })
            .collect();
        let rows = objs.iter().map(|o| builtin_cells(def, o)).collect();
        (defs, rows)
    };
    if defs.is_empty() {
        defs.push(json!({"name": "Name", "type": "string", "format": "name", "description": "", "priority": 0}));
    }
    let rows: Vec<Value> = objs
        .iter()
        .zip(rows)
        .map(|(o, cells)| {
            let object = if full {
                o.clone()
            } else {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": defs,
        "rows": rows,
    })
}

fn builtin_columns(def: &ResourceDef) -> Vec<Col> {
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

fn age(o: &Value) -> String {
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

fn builtin_cells(def: &ResourceDef, o: &Value) -> Vec<Value> {
    let name = json!(meta::name(o));
    let st = &o["status"];
    let sp = &o["spec"];
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

fn custom_table(def: &ResourceDef, objs: &[Value]) -> (Vec<Value>, Vec<Vec<Value>>) {
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for c in &def.printer_columns {
        defs.push(json!({"name": c.name, "type": c.type_, "format": "", "description": c.description, "priority": c.priority}));
    }
    let no_columns = def.printer_columns.is_empty();
    if no_columns {
        defs.push(
            json!({"name": "Age", "type": "date", "format": "", "description": "", "priority": 0}),
        );
    }
    let rows = objs
        .iter()
        .map(|o| {
            let mut cells = vec![json!(meta::name(o))];
            for c in &def.printer_columns {
                let v = json_path(o, &c.json_path);
                let cell = match (c.type_.as_str(), v) {
                    ("date", Some(Value::String(t))) => {
                        json!(meta::age_secs(&t).map(human_duration).unwrap_or(t))
                    }
                    (_, Some(v)) => v,
                    (_, None) => Value::Null,
                };
                cells.push(cell);
            }
            if no_columns {
                cells.push(json!(age(o)));
            }
            cells
        })
        .collect();
    (defs, rows)
}

/// The simple JSONPath subset CRD printer columns use: `.a.b`, `.a[0].b`
/// and `.a[?(@.k=="v")].b`.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let mut cur = obj.clone();
    let mut rest = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('.');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let idx = &r[..end];
            rest = r[end + 1..].trim_start_matches('.');
            if let Some(filter) = idx.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = filter.split_once("==")?;
                let v = v.trim().trim_matches('"').trim_matches('\'');
                cur = cur
                    .as_array()?
                    .iter()
                    .find(|e| e[k.trim()].as_str() == Some(v))?
                    .clone();
            } else {
                cur = cur.get(idx.parse::<usize>().ok()?)?.clone();
            }
            continue;
        }
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        cur = cur.get(&rest[..end])?.clone();
        rest = rest[end..].trim_start_matches('.');
    }
    Some(cur)
}

/// Durations the way kubectl prints ages ("45s", "3m12s", "5h", "2d3h").
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else {
        format!("{d}d")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths() {
        let o = json!({"spec": {"stage": "Drain"}, "status": {"nodes": [{"nodeName": "a", "phase": "Drained"}, {"nodeName": "b"}]}});
        assert_eq!(json_path(&o, ".spec.stage"), Some(json!("Drain")));
        assert_eq!(
            json_path(&o, ".status.nodes[0].phase"),
            Some(json!("Drained"))
        );
        assert_eq!(
            json_path(&o, ".status.nodes[?(@.nodeName==\"b\")].nodeName"),
            Some(json!("b"))
        );
        assert_eq!(json_path(&o, ".status.missing"), None);
        assert_eq!(json_path(&o, ".status.nodes[9]"), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        for (secs, want) in [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (4 * 3600 + 60, "4h1m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (20 * 86400, "20d"),
        ] {
            assert_eq!(human_duration(secs), want);
        }
    }
}
