//! What is written into a NodeMaintenance's status, as server-side apply
//! bodies, decided purely from what the writer sees.
//!
//! One agent at a time writes it (the holder of the status-writer Lease,
//! field manager [`STATUS_WRITER_MANAGER`]): the counts of the selected
//! nodes by phase and the nodes that need attention, aggregated from the
//! nodes' own `NodeDrain` objects, and the `Valid` condition. The object's
//! size does not grow with the node count.

use serde_json::{Value, json};

use super::nodedrain::NodeDrainStatus;

/// Field manager of everything maintd writes into a NodeMaintenance's
/// status.
pub const STATUS_WRITER_MANAGER: &str = "maintd/status-writer";
/// Condition type saying whether the agents accept the object.
pub const VALID_CONDITION: &str = "Valid";
/// The most nodes `status.attention` lists.
pub const MAX_ATTENTION: usize = 50;

fn apply_body(name: &str, status: Value) -> Value {
    json!({
        "apiVersion": "maintd.io/v1alpha1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "status": status,
    })
}

/// The most nodes of the drain order going now that the status names.
pub const MAX_ORDER_NODES: usize = 10;

fn clamp(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The aggregates of the NodeMaintenance `name` from the nodes' reports:
/// counts by phase of the nodes that say `name` selects them, and the
/// first [`MAX_ATTENTION`] (by name) of those blocked or failed, with what
/// blocks them. Pure; the caller adds the time and writes it.
pub fn aggregate<'a>(name: &str, drains: impl IntoIterator<Item = &'a NodeDrainStatus>) -> Value {
    let mut counts = [0usize; 6];
    let mut attention: Vec<(&str, &str, Option<String>)> = Vec::new();
    let drains: Vec<&NodeDrainStatus> = drains.into_iter().collect();
    let order = super::order::lowest(
        drains
            .iter()
            .copied()
            .filter(|d| d.pending_turn.as_deref() == Some(name)),
    )
    .remove(name);
    // Who the higher orders wait for: named, so a node that cannot finish
    // (or whose agent stopped) is found without reading every NodeDrain.
    let mut order_nodes: Vec<&str> = drains
        .iter()
        .filter(|d| d.pending_turn.as_deref() == Some(name))
        .filter(|d| {
            order.is_some_and(|(low, _)| d.drain_order.clamp(0, super::order::MAX_ORDER) == low)
        })
        .map(|d| d.node_name.as_str())
        .collect();
    order_nodes.sort_unstable();
    order_nodes.truncate(MAX_ORDER_NODES);
    for d in drains {
        if !d.maintenances.iter().any(|m| m == name) {
            continue;
        }
        counts[0] += 1;
        // Idle (selected, nothing asked yet) counts as selected only.
        let slot = match d.phase.as_str() {
            "Cordoned" => 1,
            "Draining" => 2,
            "Blocked" => 3,
            "Drained" => 4,
            "Failed" => 5,
            _ => 0,
        };
        if slot > 0 {
            counts[slot] += 1;
        }
        if slot == 3 || slot == 5 {
            let blocker = d
                .blockers
                .first()
                .map(|b| {
                    if b.pod.is_empty() {
                        b.reason.clone()
                    } else {
                        format!("{}/{}: {}", b.namespace, b.pod, b.reason)
                    }
                })
                .or_else(|| d.last_error.clone());
            attention.push((&d.node_name, &d.phase, blocker));
        }
    }
    attention.sort_by(|a, b| a.0.cmp(b.0));
    let total = attention.len();
    let listed: Vec<Value> = attention
        .into_iter()
        .take(MAX_ATTENTION)
        .map(|(node, phase, blocker)| {
            let mut e = json!({"nodeName": node, "phase": phase});
            if let Some(b) = blocker {
                // A blocker's message can be long; the list stays bounded.
                e["blocker"] = json!(b.chars().take(256).collect::<String>());
            }
            e
        })
        .collect();
    let mut out = json!({
        "selectedNodes": clamp(counts[0]),
        "cordonedNodes": clamp(counts[1]),
        "drainingNodes": clamp(counts[2]),
        "blockedNodes": clamp(counts[3]),
        "drainedNodes": clamp(counts[4]),
        "failedNodes": clamp(counts[5]),
        "attention": listed,
        "attentionTotal": clamp(total),
    });
    if let Some((lowest, left)) = order {
        out["drainOrder"] = json!(lowest);
        out["drainOrderNodesLeft"] = json!(clamp(left));
        out["drainOrderNodes"] = json!(order_nodes);
    }
    out
}

/// The apply body for the aggregates (see [`aggregate`]) and the `Valid`
/// condition, stamped with `now` (RFC 3339).
pub fn status_apply_body(
    name: &str,
    mut aggregates: Value,
    valid: Option<Value>,
    now: &str,
) -> Value {
    aggregates["updatedAt"] = json!(now);
    if let Some(c) = valid {
        aggregates["conditions"] = json!([c]);
    }
    apply_body(name, aggregates)
}

/// The `Valid` condition for `obj` given `verdict` (from
/// [`super::validate`] or [`super::parse`]), keeping the transition time
/// of the condition the object already has when nothing changed. Works on
/// the raw object, so an object that does not even decode still gets it.
/// The longest message a Kubernetes Condition (metav1.Condition) holds.
pub const CONDITION_MESSAGE_MAX: usize = 32768;

pub fn valid_condition(obj: &Value, verdict: &Result<(), Vec<String>>, now: &str) -> Value {
    let (status, reason, message) = match verdict {
        Ok(()) => (
            "True",
            "Accepted",
            "the maintd agents act on this object".to_string(),
        ),
        // A problem may quote the object (a stage, a decoder's words), which
        // can be long: the message keeps to what a Condition holds.
        Err(problems) => (
            "False",
            "Invalid",
            crate::outbound::shorten(&problems.join("; "), CONDITION_MESSAGE_MAX),
        ),
    };
    let current = obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == VALID_CONDITION));
    let since = current
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now);
    let mut condition = json!({
        "type": VALID_CONDITION, "status": status, "reason": reason,
        "message": message, "lastTransitionTime": since,
    });
    if let Some(g) = obj["metadata"]["generation"].as_i64() {
        condition["observedGeneration"] = json!(g);
    }
    condition
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::nodedrain::NodeDrainBlocker;

    fn drain(node: &str, phase: &str, of: &[&str]) -> NodeDrainStatus {
        NodeDrainStatus {
            node_name: node.into(),
            phase: phase.into(),
            maintenances: of.iter().map(|s| s.to_string()).collect(),
            blockers: if phase == "Blocked" {
                vec![NodeDrainBlocker {
                    namespace: "default".into(),
                    pod: format!("web-{node}"),
                    reason: "budget web".into(),
                }]
            } else {
                vec![]
            },
            last_error: (phase == "Failed").then(|| "pods left".to_string()),
            ..Default::default()
        }
    }

    /// An invalid object whose problems quote a long value still gets a
    /// Valid condition Kubernetes takes. Found by the `nodemaintenance`
    /// fuzz target.
    #[test]
    fn a_long_problem_fits_the_condition() {
        let obj = json!({"metadata": {"name": "m"}, "spec": {"nodeName": "n", "stage": "x".repeat(40_000)}});
        let verdict = crate::api::parse(&obj).and_then(|nm| crate::api::validate(&nm));
        let condition = valid_condition(&obj, &verdict, "2026-01-01T00:00:00Z");
        let message = condition["message"].as_str().unwrap();
        assert_eq!(condition["status"], "False");
        assert!(
            message.starts_with("spec.stage \"xxx"),
            "{}",
            &message[..40]
        );
        assert_eq!(message.chars().count(), CONDITION_MESSAGE_MAX);
    }

    #[test]
    fn counts_by_phase_only_the_nodes_the_object_selects() {
        let drains = [
            drain("a", "Drained", &["m"]),
            drain("b", "Blocked", &["m", "other"]),
            drain("c", "Draining", &["m"]),
            drain("d", "Cordoned", &["m"]),
            drain("g", "Idle", &["m"]),
            drain("e", "Failed", &["m"]),
            drain("f", "Drained", &["other"]),
        ];
        let a = aggregate("m", &drains);
        assert_eq!(a["selectedNodes"], 6);
        assert_eq!(
            (
                &a["cordonedNodes"],
                &a["drainingNodes"],
                &a["blockedNodes"],
                &a["drainedNodes"],
                &a["failedNodes"]
            ),
            (&json!(1), &json!(1), &json!(1), &json!(1), &json!(1))
        );
        assert_eq!(
            a["attention"],
            json!([
                {"nodeName": "b", "phase": "Blocked", "blocker": "default/web-b: budget web"},
                {"nodeName": "e", "phase": "Failed", "blocker": "pods left"},
            ])
        );
        assert_eq!(a["attentionTotal"], 2);
    }

    #[test]
    fn the_attention_list_is_bounded_whatever_the_node_count() {
        let drains: Vec<NodeDrainStatus> = (0..5000)
            .map(|i| drain(&format!("node-{i:05}"), "Blocked", &["m"]))
            .collect();
        let a = aggregate("m", &drains);
        assert_eq!(a["attention"].as_array().unwrap().len(), MAX_ATTENTION);
        assert_eq!(a["attention"][0]["nodeName"], "node-00000");
        assert_eq!(a["attentionTotal"], 5000);
        assert_eq!(a["blockedNodes"], 5000);
        let body = status_apply_body("m", a, None, "2026-01-01T00:00:00Z");
        let size = serde_json::to_vec(&body).unwrap().len();
        assert!(size < 64 * 1024, "{size} bytes");
    }

    #[test]
    fn a_rolling_object_names_the_order_going_now_and_its_first_ten_nodes() {
        let mut drains: Vec<NodeDrainStatus> = (0..30)
            .map(|i| {
                let mut d = drain(&format!("node-{i:02}"), "Idle", &["m"]);
                d.drain_order = if i < 12 { 3 } else { 7 };
                d.pending_turn = Some("m".into());
                d
            })
            .collect();
        // Done with its turn, of another object's, or none: not counted.
        drains[0].pending_turn = None;
        drains[1].pending_turn = Some("other".into());
        let a = aggregate("m", &drains);
        assert_eq!(a["drainOrder"], 3);
        assert_eq!(a["drainOrderNodesLeft"], 10);
        let named: Vec<String> = (2..12).map(|i| format!("node-{i:02}")).collect();
        assert_eq!(a["drainOrderNodes"], json!(named));
        let many: Vec<NodeDrainStatus> = (0..5000)
            .map(|i| {
                let mut d = drain(&format!("node-{i:05}"), "Idle", &["m"]);
                d.pending_turn = Some("m".into());
                d
            })
            .collect();
        let a = aggregate("m", &many);
        assert_eq!(a["drainOrderNodesLeft"], 5000);
        assert_eq!(
            a["drainOrderNodes"].as_array().unwrap().len(),
            MAX_ORDER_NODES
        );
        // Nothing pending: no order at all.
        let a = aggregate("m", &drains[..2]);
        assert!(a.get("drainOrder").is_none() && a.get("drainOrderNodes").is_none());
    }

    #[test]
    fn the_valid_condition_keeps_its_transition_time_while_it_holds() {
        let obj = json!({
            "metadata": {"name": "m", "generation": 3},
            "status": {"conditions": [{"type": "Valid", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        });
        let c = valid_condition(&obj, &Err(vec!["bad".into()]), "2026-02-02T00:00:00Z");
        assert_eq!(c["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(c["message"], "bad");
        assert_eq!(c["observedGeneration"], 3);
        let c = valid_condition(&obj, &Ok(()), "2026-02-02T00:00:00Z");
        assert_eq!(
            (&c["status"], &c["lastTransitionTime"]),
            (&json!("True"), &json!("2026-02-02T00:00:00Z"))
        );
    }
}
