//! Turns of a rolling maintenance that end with a reboot
//! (`spec.waitForReboot`). What a node's turn has reached is kept on the
//! Node itself, in two annotations its agent writes, so an agent that
//! restarts (as it does when the node reboots) reads it back with the
//! Node:
//!
//! - `maintd.io/reboot-turn`: the turn under way: the object's uid, the
//!   node's boot ID when it took its slot, and when;
//! - `maintd.io/turns-done`: the objects (uids) this node's turn is over
//!   for, newest last, at most [`MAX_DONE`].
//!
//! A turn is over once the node's `status.nodeInfo.bootID` differs from
//! the recorded one and the node is Ready: it rebooted and came back.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{DEFAULT_REBOOT_TIMEOUT_SECONDS, NodeMaintenance, OnRebootTimeout};

/// The turn under way on this node.
pub const TURN_ANNOTATION: &str = "maintd.io/reboot-turn";
/// The objects this node's turn is over for.
pub const DONE_ANNOTATION: &str = "maintd.io/turns-done";
/// How many finished turns a node remembers: the oldest goes first. An
/// object is rolled out once; sixteen at once on one node is plenty.
pub const MAX_DONE: usize = 16;

/// A turn under way, as recorded on the Node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// The NodeMaintenance's uid.
    pub uid: String,
    /// Its name, for people reading the Node.
    #[serde(default)]
    pub object: String,
    /// The node's boot ID when the turn started.
    #[serde(rename = "bootID")]
    pub boot_id: String,
    /// When the turn started (the slot was taken).
    pub since: Timestamp,
}

/// A rolling maintenance whose turns end with a reboot, as one node's
/// agent needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RebootTurn {
    pub uid: String,
    pub object: String,
    /// The object's `maxConcurrentDrains`: how many slots its group has.
    pub slots: u32,
    pub timeout: std::time::Duration,
    pub on_timeout: OnRebootTimeout,
}

impl RebootTurn {
    /// The turn `nm` asks for, if its turns end with a reboot.
    pub fn of(nm: &NodeMaintenance) -> Option<RebootTurn> {
        let w = nm.spec.wait_for_reboot.as_ref()?;
        let slots = u32::try_from(nm.spec.max_concurrent_drains?.max(1)).unwrap_or(1);
        let secs = w
            .timeout_seconds
            .unwrap_or(DEFAULT_REBOOT_TIMEOUT_SECONDS)
            .clamp(
                super::MIN_REBOOT_TIMEOUT_SECONDS,
                super::MAX_REBOOT_TIMEOUT_SECONDS,
            );
        Some(RebootTurn {
            uid: nm.metadata.uid.clone().unwrap_or_default(),
            object: nm.metadata.name.clone().unwrap_or_default(),
            slots,
            timeout: crate::bounds::seconds(secs),
            on_timeout: w.on_timeout,
        })
    }

    /// The record a node writes when it takes its slot for this turn.
    pub fn record(&self, node: &Value, now: Timestamp) -> TurnRecord {
        TurnRecord {
            uid: self.uid.clone(),
            object: self.object.clone(),
            boot_id: boot_id(node).unwrap_or_default().to_string(),
            since: now,
        }
    }
}

/// Where one node's turn of one object stands.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnState {
    /// Not started: the node waits for (or drains towards) its slot.
    NotStarted,
    /// Started (slot taken) at the recorded boot, which is still the
    /// node's.
    Started(TurnRecord),
    /// The node booted again since the turn started, and is not Ready yet.
    RebootedNotReady(TurnRecord),
    /// The node booted again since the turn started and is Ready: the turn
    /// is over, to be recorded as done.
    Rebooted(TurnRecord),
    /// Over and recorded.
    Done,
}

/// Where `node`'s turn of the object with `uid` stands.
pub fn state(uid: &str, node: &Value) -> TurnState {
    if done(node).iter().any(|u| u == uid) {
        return TurnState::Done;
    }
    let Some(rec) = record(node).filter(|r| r.uid == uid) else {
        return TurnState::NotStarted;
    };
    match boot_id(node) {
        // A node that reports no boot ID cannot show a reboot.
        Some(b) if !b.is_empty() && !rec.boot_id.is_empty() && b != rec.boot_id => {
            if ready(node) {
                TurnState::Rebooted(rec)
            } else {
                TurnState::RebootedNotReady(rec)
            }
        }
        _ => TurnState::Started(rec),
    }
}

/// The turn under way on `node`, if its annotation reads as one.
pub fn record(node: &Value) -> Option<TurnRecord> {
    let raw = node["metadata"]["annotations"][TURN_ANNOTATION].as_str()?;
    serde_json::from_str(raw).ok()
}

/// The uids `node`'s turns are over for.
pub fn done(node: &Value) -> Vec<String> {
    node["metadata"]["annotations"][DONE_ANNOTATION]
        .as_str()
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The node's boot ID, as its kubelet reports it.
pub fn boot_id(node: &Value) -> Option<&str> {
    node["status"]["nodeInfo"]["bootID"].as_str()
}

/// Whether the node's Ready condition is True.
pub fn ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The annotations that start a turn (a merge patch of them).
pub fn start_patch(rec: &TurnRecord) -> Value {
    let text = serde_json::to_string(rec).unwrap_or_default();
    json!({TURN_ANNOTATION: text})
}

/// The annotations that end `node`'s turn of `uid` (a merge patch of them): it joins the done
/// list (the oldest dropped past [`MAX_DONE`]) and the turn under way is
/// cleared if it is this one.
pub fn done_patch(node: &Value, uid: &str) -> Value {
    let mut list = done(node);
    list.retain(|u| u != uid);
    list.push(uid.to_string());
    let skip = list.len().saturating_sub(MAX_DONE);
    let mut annotations = json!({DONE_ANNOTATION: list[skip..].join(" ")});
    if record(node).is_some_and(|r| r.uid == uid) {
        annotations[TURN_ANNOTATION] = Value::Null;
    }
    annotations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(annotations: Value, boot: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": "n", "annotations": annotations},
            "status": {
                "nodeInfo": {"bootID": boot},
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            },
        })
    }

    fn rec(uid: &str, boot: &str) -> TurnRecord {
        TurnRecord {
            uid: uid.into(),
            object: "roll".into(),
            boot_id: boot.into(),
            since: "2026-11-26T04:00:00Z".parse().unwrap(),
        }
    }

    fn annotated(r: &TurnRecord) -> Value {
        start_patch(r)
    }

    #[test]
    fn a_turn_is_over_once_the_node_booted_again_and_is_ready() {
        let r = rec("u1", "boot-a");
        assert_eq!(
            state("u1", &node(json!({}), "boot-a", true)),
            TurnState::NotStarted
        );
        assert_eq!(
            state("u1", &node(annotated(&r), "boot-a", true)),
            TurnState::Started(r.clone())
        );
        assert_eq!(
            state("u1", &node(annotated(&r), "boot-b", false)),
            TurnState::RebootedNotReady(r.clone())
        );
        assert_eq!(
            state("u1", &node(annotated(&r), "boot-b", true)),
            TurnState::Rebooted(r.clone())
        );
        // Another object's turn on the same node is its own.
        assert_eq!(
            state("u2", &node(annotated(&r), "boot-b", true)),
            TurnState::NotStarted
        );
        // A turn recorded without a boot ID, or a node that reports none,
        // never shows a reboot.
        let blind = node(annotated(&rec("u1", "")), "boot-b", true);
        assert_eq!(state("u1", &blind), TurnState::Started(rec("u1", "")));
        assert_eq!(
            state("u1", &node(annotated(&r), "", true)),
            TurnState::Started(r.clone())
        );
    }

    #[test]
    fn ending_a_turn_lists_it_done_clears_it_and_keeps_the_newest_sixteen() {
        let r = rec("u1", "boot-a");
        let mut n = node(annotated(&r), "boot-b", true);
        let p = done_patch(&n, "u1");
        assert_eq!(p[DONE_ANNOTATION], "u1");
        assert!(p[TURN_ANNOTATION].is_null());
        assert!(
            p.as_object().unwrap().contains_key(TURN_ANNOTATION),
            "the record is removed: {p}"
        );
        n["metadata"]["annotations"][DONE_ANNOTATION] = p[DONE_ANNOTATION].clone();
        n["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(TURN_ANNOTATION);
        assert_eq!(state("u1", &n), TurnState::Done);
        // Another object's end leaves a turn under way alone.
        let other = done_patch(&node(annotated(&r), "boot-a", true), "u9");
        assert!(!other.as_object().unwrap().contains_key(TURN_ANNOTATION));
        let many: Vec<String> = (0..20).map(|i| format!("u{i}")).collect();
        let n = node(json!({DONE_ANNOTATION: many.join(" ")}), "b", true);
        let p = done_patch(&n, "u3");
        let list: Vec<&str> = p[DONE_ANNOTATION].as_str().unwrap().split(' ').collect();
        assert_eq!(list.len(), MAX_DONE);
        assert_eq!(list.last(), Some(&"u3"), "{list:?}");
        assert!(!list.contains(&"u0"), "the oldest went: {list:?}");
    }

    #[test]
    fn an_unreadable_record_is_no_turn() {
        let n = node(json!({TURN_ANNOTATION: "{not json"}), "b", true);
        assert_eq!(record(&n), None);
        assert_eq!(state("u1", &n), TurnState::NotStarted);
    }
}
