//! What the agents write into a NodeMaintenance's status, as server-side
//! apply bodies, decided purely from the object as the watch last saw it.
//!
//! - Each agent applies only its own `nodes[]` entry, as `maintd/<node>`.
//! - `selectedNodes`/`drainedNodes` (the printer columns; a column cannot
//!   count) are kept by one agent: the one whose entry sorts first. It
//!   applies them as `maintd/summary` when they differ from what the entries
//!   say, so the counts converge once the entries settle, without every
//!   agent writing on every change.
//! - The `Valid` condition is applied as `maintd/validation` by any agent
//!   that finds it differs from what validation says; after the first
//!   write the others find nothing to do.

use serde_json::{Value, json};

use super::{NodeMaintenance, NodeStatus, Phase};

/// Field manager of the printer-column counts.
pub const SUMMARY_MANAGER: &str = "maintd/summary";
/// Field manager of the `Valid` condition.
pub const VALIDATION_MANAGER: &str = "maintd/validation";
/// Condition type saying whether the agents accept the object.
pub const VALID_CONDITION: &str = "Valid";

fn apply_body(name: &str, status: Value) -> Value {
    json!({
        "apiVersion": "maintd.io/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "status": status,
    })
}

/// The apply body for this agent's own entry (field manager `maintd/<node>`).
pub fn entry_apply_body(name: &str, entry: &NodeStatus) -> Value {
    apply_body(name, json!({"nodes": [entry]}))
}

/// (selected, drained) as the entries say.
pub fn counts(nm: &NodeMaintenance) -> (i32, i32) {
    let nodes = nm
        .status
        .as_ref()
        .map(|s| s.nodes.as_slice())
        .unwrap_or(&[]);
    let drained = nodes.iter().filter(|e| e.phase == Phase::Drained).count();
    (clamp(nodes.len()), clamp(drained))
}

fn clamp(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The apply body (as [`SUMMARY_MANAGER`]) that corrects the counts, if
/// `node` is the agent that keeps them and they are off.
pub fn summary_update(nm: &NodeMaintenance, node: &str) -> Option<Value> {
    let status = nm.status.as_ref()?;
    let keeper = status.nodes.iter().map(|e| e.node_name.as_str()).min()?;
    if keeper != node {
        return None;
    }
    let (selected, drained) = counts(nm);
    let stored = (status.selected_nodes, status.drained_nodes);
    (stored != (Some(selected), Some(drained))).then(|| {
        apply_body(
            nm.metadata.name.as_deref().unwrap_or_default(),
            json!({"selectedNodes": selected, "drainedNodes": drained}),
        )
    })
}

/// The apply body (as [`VALIDATION_MANAGER`]) that makes the `Valid`
/// condition say `verdict` (from [`super::validate`] or [`super::parse`]),
/// or None if it already does. Works on the raw object, so an object that
/// does not even decode still gets its condition. `now` is RFC 3339.
pub fn validation_update(
    obj: &Value,
    verdict: &Result<(), Vec<String>>,
    now: &str,
) -> Option<Value> {
    let (status, reason, message) = match verdict {
        Ok(()) => (
            "True",
            "Accepted",
            "the maintd agents act on this object".to_string(),
        ),
        Err(problems) => ("False", "Invalid", problems.join("; ")),
    };
    let current = obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == VALID_CONDITION));
    let same = current.is_some_and(|c| {
        c["status"] == status && c["reason"] == reason && c["message"] == message.as_str()
    });
    // A valid object with no condition needs none: absence is not a problem.
    if same || (current.is_none() && verdict.is_ok()) {
        return None;
    }
    let mut condition = json!({
        "type": VALID_CONDITION, "status": status, "reason": reason,
        "message": message, "lastTransitionTime": now,
    });
    if let Some(g) = obj["metadata"]["generation"].as_i64() {
        condition["observedGeneration"] = json!(g);
    }
    Some(apply_body(
        obj["metadata"]["name"].as_str().unwrap_or_default(),
        json!({"conditions": [condition]}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{parse, validate};

    fn with_entries(entries: &[(&str, &str)], stored: Option<(i32, i32)>) -> NodeMaintenance {
        let mut obj = json!({
            "metadata": {"name": "m"},
            "spec": {"nodeSelector": {}},
            "status": {"nodes": entries.iter().map(|(n, p)| json!({"nodeName": n, "phase": p})).collect::<Vec<_>>()},
        });
        if let Some((s, d)) = stored {
            obj["status"]["selectedNodes"] = json!(s);
            obj["status"]["drainedNodes"] = json!(d);
        }
        parse(&obj).unwrap()
    }

    #[test]
    fn only_the_first_node_keeps_the_counts_and_only_when_they_are_off() {
        let entries = [
            ("node-b", "Drained"),
            ("node-a", "Draining"),
            ("node-c", "Drained"),
        ];
        let nm = with_entries(&entries, None);
        let body = summary_update(&nm, "node-a").expect("node-a keeps the counts");
        assert_eq!(
            body["status"],
            json!({"selectedNodes": 3, "drainedNodes": 2})
        );
        assert_eq!(summary_update(&nm, "node-b"), None);
        assert_eq!(
            summary_update(&with_entries(&entries, Some((3, 2))), "node-a"),
            None
        );
        assert!(summary_update(&with_entries(&entries, Some((3, 1))), "node-a").is_some());
        assert_eq!(summary_update(&with_entries(&[], None), "node-a"), None);
    }

    #[test]
    fn the_valid_condition_is_written_once_and_says_what_is_wrong() {
        let obj = json!({"metadata": {"name": "m", "generation": 4}, "spec": {"stage": "Later"}});
        let verdict = parse(&obj).and_then(|nm| validate(&nm));
        let body = validation_update(&obj, &verdict, "2026-01-01T00:00:00Z").unwrap();
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str()
            ),
            (Some("Valid"), Some("False"), Some("Invalid"))
        );
        assert_eq!(c["observedGeneration"], 4);
        let msg = c["message"].as_str().unwrap();
        assert!(
            msg.contains("spec.stage \"Later\"")
                && msg.contains("neither nodeName nor nodeSelector"),
            "{msg}"
        );

        let mut written = obj.clone();
        written["status"] = body["status"].clone();
        assert_eq!(
            validation_update(&written, &verdict, "2026-01-02T00:00:00Z"),
            None,
            "already says so"
        );
        // Fixed: flips to True; a valid object never written needs nothing.
        let fixed = validation_update(&written, &Ok(()), "2026-01-02T00:00:00Z").unwrap();
        assert_eq!(fixed["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            validation_update(&obj, &Ok(()), "2026-01-02T00:00:00Z"),
            None
        );
    }
}
