//! Server-side printing: the `Table` kubectl asks for with
//! `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`, with the columns a
//! real apiserver prints for the kinds the simulator serves, and CRD
//! additionalPrinterColumns for custom resources.

use serde_json::{Value, json};

use super::meta;
use super::resources::ResourceDef;

mod builtin;
mod storage;
use builtin::{age, builtin_cells, builtin_columns};

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
