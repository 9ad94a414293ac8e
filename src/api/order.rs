//! The order of a rolling maintenance (`maxConcurrentDrains`): nodes take
//! their drain turns group by group, by their `maintd.io/drain-order`
//! label (a whole number, 0 without the label), lowest first. Within one
//! group, first come, first served.
//!
//! No agent knows the other nodes, so the order goes through the one agent
//! that reads every `NodeDrain` (the status writer):
//! - each agent reports its node's order, and which rolling object it has
//!   a turn still to take or is taking ([`pending_turn`]);
//! - the writer publishes, per object, the lowest order of the nodes whose
//!   turn is pending ([`lowest`], [`to_publish`]), in an annotation of the
//!   `maintd-status-writer` Lease, which every agent watches already;
//! - a node of a higher order does not queue for a slot until the
//!   published order reaches its own ([`gate`]). Nodes of order 0 never
//!   wait for it: without labels, nothing changes.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Effective;
use super::nodedrain::NodeDrainStatus;

/// The Node label that places a node in a rolling maintenance's order.
pub const LABEL: &str = "maintd.io/drain-order";
/// The highest order a node may have.
pub const MAX_ORDER: i64 = 1000;
/// The status writer's Lease annotation with the orders it publishes.
pub const ANNOTATION: &str = "maintd.io/drain-order";
/// The most objects whose order the annotation carries (it stays small).
pub const MAX_PUBLISHED: usize = 100;

/// `node`'s drain order: its label's value, 0 without the label. A value
/// that is not a whole number from 0 to [`MAX_ORDER`] is an error naming
/// it; the node then counts as 0, with the nodes that have no label.
pub fn of_node(node: &Value) -> Result<i64, String> {
    let Some(v) = node["metadata"]["labels"].get(LABEL) else {
        return Ok(0);
    };
    let text = v.as_str().unwrap_or_default();
    match text.parse::<i64>() {
        Ok(n) if (0..=MAX_ORDER).contains(&n) => Ok(n),
        _ => Err(format!(
            "the label {LABEL}={text:?} is not a whole number from 0 to {MAX_ORDER}: this node takes its turns with the nodes of order 0 until it is fixed"
        )),
    }
}

/// The rolling object whose drain turn this node has still to take, or is
/// taking: the one whose drain slots `effective` asks for. Without
/// `waitForReboot` the turn is over once the node is drained; with it,
/// once it rebooted (then `effective` no longer has that object).
pub fn pending_turn(effective: Option<&Effective>, drained: bool) -> Option<String> {
    let e = effective.filter(|e| e.evict())?;
    let (name, _) = e.drain_slots.as_ref()?;
    (e.turn.is_some() || !drained).then(|| name.clone())
}

/// The rolling object whose turn on `node` is over while maintd's cordon
/// is still on the node (its uncordon on its way, or not yet sent by an
/// agent that has just started after the reboot): that turn still counts
/// as pending. Reported over at once, it would let the status writer
/// publish the next drain order, and a node of that order take a free
/// slot and be cordoned, before this one is back in scheduling. The turn
/// is the one recorded under way (rebooted since), or the last one ended.
pub fn ending_turn<'a>(
    rolling: impl IntoIterator<Item = &'a super::NodeMaintenance>,
    node: &Value,
) -> Option<String> {
    use super::turns::{self, RebootTurn, TurnState};
    if !node["metadata"]["annotations"][crate::cluster::CORDONED_ANNOTATION].is_string() {
        return None;
    }
    let last = turns::record(node)
        .map(|r| r.uid)
        .or_else(|| turns::done(node).pop())?;
    rolling
        .into_iter()
        .filter_map(RebootTurn::of)
        .find(|t| {
            t.uid == last
                && matches!(
                    turns::state(&t.uid, node),
                    TurnState::Rebooted(_) | TurnState::Done
                )
        })
        .map(|t| t.object)
}

/// The lowest order among the nodes whose turn of each object is pending,
/// and how many nodes of that order are left, by object name.
pub fn lowest<'a>(
    drains: impl IntoIterator<Item = &'a NodeDrainStatus>,
) -> BTreeMap<String, (i64, usize)> {
    let mut out: BTreeMap<String, (i64, usize)> = BTreeMap::new();
    for d in drains {
        let Some(name) = &d.pending_turn else {
            continue;
        };
        let order = d.drain_order.clamp(0, MAX_ORDER);
        out.entry(name.clone())
            .and_modify(|(low, left)| {
                if order < *low {
                    (*low, *left) = (order, 1);
                } else if order == *low {
                    *left += 1;
                }
            })
            .or_insert((order, 1));
    }
    out
}

/// How many nodes of the order going now (see [`lowest`]) wait for a
/// turn of each object (not holding a slot yet), by object name: those
/// that say so, and those whose turn is pending with nothing started (a
/// node says it waits only once it has waited a few seconds).
pub fn waiting<'a>(
    drains: impl IntoIterator<Item = &'a NodeDrainStatus>,
    lowest: &BTreeMap<String, (i64, usize)>,
) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for d in drains {
        let waits = d.waiting.is_some() || d.phase == "Idle";
        let Some(name) = d.pending_turn.as_ref().filter(|_| waits) else {
            continue;
        };
        if lowest
            .get(name)
            .is_some_and(|(low, _)| d.drain_order.clamp(0, MAX_ORDER) <= *low)
        {
            *out.entry(name.clone()).or_default() += 1;
        }
    }
    out
}

/// One object's published order: nodes of this order or lower may take
/// their turns. The uid tells an object from a later one of the same name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub uid: String,
    pub order: i64,
    /// Every node still waiting for a turn fits in the line: the nodes in
    /// line may take any slot, not only their own (the end of a rollout).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub any_slot: bool,
}

/// The published orders, by object name.
pub type Orders = BTreeMap<String, Published>;

/// The orders the writer's Lease (raw) carries; nothing when it carries
/// none or they do not decode.
pub fn read(lease: &Value) -> Orders {
    lease["metadata"]["annotations"][ANNOTATION]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// What the writer publishes now. `lowest` is [`lowest`] of the NodeDrain
/// objects; `uids` the objects' uids by name. An object already published
/// follows its lowest order at once. One not published yet waits until its
/// turns have been pending for `settle`: the agents report one by one, and
/// an order published before the lowest nodes reported would let higher
/// ones go first. `pending_since` remembers when each object (by uid) was
/// first seen with turns pending; objects that have none are forgotten.
pub fn to_publish(
    lowest: &BTreeMap<String, (i64, usize)>,
    any_slot: &std::collections::BTreeSet<String>,
    uids: &BTreeMap<String, String>,
    published: &Orders,
    pending_since: &mut HashMap<String, tokio::time::Instant>,
    now: tokio::time::Instant,
    settle: Duration,
) -> Orders {
    let mut out = Orders::new();
    let mut pending = Vec::new();
    for (name, (order, _)) in lowest {
        let Some(uid) = uids.get(name) else {
            continue;
        };
        pending.push(uid.clone());
        let since = *pending_since.entry(uid.clone()).or_insert(now);
        let known = published.get(name).is_some_and(|p| &p.uid == uid);
        if (known || since + settle <= now) && out.len() < MAX_PUBLISHED {
            out.insert(
                name.clone(),
                Published {
                    uid: uid.clone(),
                    order: *order,
                    any_slot: any_slot.contains(name),
                },
            );
        }
    }
    pending_since.retain(|uid, _| pending.contains(uid));
    out
}

/// Whether a node of order `order` may queue for a turn of object `name`
/// (uid `uid`) now, given what is published; otherwise why it waits.
pub fn gate(order: i64, name: &str, uid: &str, published: &Orders) -> Result<(), String> {
    if order <= 0 {
        return Ok(());
    }
    match published.get(name).filter(|p| p.uid == uid) {
        Some(p) if p.order >= order => Ok(()),
        Some(p) => Err(format!(
            "waiting for the nodes of drain order {} to take their turns of NodeMaintenance {name} first (this node's {LABEL} is {order})",
            p.order
        )),
        None => Err(format!(
            "waiting for the order of NodeMaintenance {name} to be published (this node's {LABEL} is {order}; the agents report their nodes' orders first)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(label: Option<&str>) -> Value {
        match label {
            Some(v) => json!({"metadata": {"name": "n", "labels": {LABEL: v}}}),
            None => json!({"metadata": {"name": "n"}}),
        }
    }

    /// A turn whose node rebooted counts as pending while maintd's
    /// cordon is still on the node, recorded under way or already ended;
    /// once the node is back in scheduling, or for another object's
    /// turn, it does not.
    #[test]
    fn a_turn_ends_when_its_node_is_back_in_scheduling() {
        let nm: super::super::NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": "roll", "uid": "u1"},
            "spec": {"stage": "Drain", "maxConcurrentDrains": 2,
                     "waitForReboot": {"timeoutSeconds": 600}},
        }))
        .unwrap();
        let node = |annotations: Value, booted: &str| {
            json!({
                "metadata": {"name": "n", "annotations": annotations},
                "status": {"nodeInfo": {"bootID": booted},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            })
        };
        let record = json!({"uid": "u1", "object": "roll", "bootID": "b1",
                            "since": "2026-11-29T11:00:00Z"})
        .to_string();
        let cordoned = crate::cluster::CORDONED_ANNOTATION;
        let rebooted = node(
            json!({cordoned: "true", crate::api::turns::TURN_ANNOTATION: record}),
            "b2",
        );
        assert_eq!(ending_turn([&nm], &rebooted).as_deref(), Some("roll"));
        let done = node(
            json!({cordoned: "true", crate::api::turns::DONE_ANNOTATION: "u0 u1"}),
            "b2",
        );
        assert_eq!(ending_turn([&nm], &done).as_deref(), Some("roll"));
        let back = node(json!({crate::api::turns::DONE_ANNOTATION: "u1"}), "b2");
        assert_eq!(ending_turn([&nm], &back), None);
        let other = node(
            json!({cordoned: "true", crate::api::turns::DONE_ANNOTATION: "u1 u9"}),
            "b2",
        );
        assert_eq!(
            ending_turn([&nm], &other),
            None,
            "the last turn ended is another object's"
        );
        let under_way = node(
            json!({cordoned: "true", crate::api::turns::TURN_ANNOTATION: record}),
            "b1",
        );
        assert_eq!(
            ending_turn([&nm], &under_way),
            None,
            "not rebooted yet: not ending"
        );
    }

    #[test]
    fn a_node_s_order_is_its_label_from_0_to_1000_and_0_without_one() {
        assert_eq!(of_node(&node(None)), Ok(0));
        assert_eq!(of_node(&node(Some("0"))), Ok(0));
        assert_eq!(of_node(&node(Some("7"))), Ok(7));
        assert_eq!(of_node(&node(Some("1000"))), Ok(1000));
        for bad in ["1001", "-1", "last", "", "2.5", "99999999999999999999"] {
            let e = of_node(&node(Some(bad))).unwrap_err();
            assert!(e.contains(LABEL) && e.contains("0 to 1000"), "{bad}: {e}");
        }
    }

    fn drain(name: &str, order: i64, pending: Option<&str>) -> NodeDrainStatus {
        NodeDrainStatus {
            node_name: name.into(),
            phase: "Idle".into(),
            drain_order: order,
            pending_turn: pending.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn the_lowest_order_counts_only_nodes_whose_turn_is_pending() {
        let drains = [
            drain("a", 5, Some("roll")),
            drain("b", 2, Some("roll")),
            drain("c", 2, Some("roll")),
            drain("d", 0, None),
            drain("e", 9, Some("other")),
            drain("f", 1, Some("other")),
            drain("g", 1, Some("other")),
            drain("h", 1, Some("other")),
        ];
        let low = lowest(&drains);
        assert_eq!(low["roll"], (2, 2));
        assert_eq!(low["other"], (1, 3));
        assert_eq!(low.len(), 2);
        assert!(lowest(&[drain("x", 3, None)]).is_empty());
    }

    #[test]
    fn an_object_is_published_once_its_turns_settled_then_follows_at_once() {
        let settle = Duration::from_secs(10);
        let none = std::collections::BTreeSet::new();
        let t0 = tokio::time::Instant::now();
        let uids = BTreeMap::from([("roll".to_string(), "u1".to_string())]);
        let mut since = HashMap::new();
        let low = BTreeMap::from([("roll".to_string(), (3, 1))]);
        // Not yet: the lowest nodes may not have reported.
        let out = to_publish(&low, &none, &uids, &Orders::new(), &mut since, t0, settle);
        assert!(out.is_empty());
        let later = t0 + Duration::from_secs(5);
        assert!(to_publish(&low, &none, &uids, &out, &mut since, later, settle).is_empty());
        let settled = t0 + settle;
        let out = to_publish(&low, &none, &uids, &out, &mut since, settled, settle);
        assert_eq!(
            out["roll"],
            Published {
                uid: "u1".into(),
                order: 3,
                any_slot: false,
            }
        );
        // Published: a new lowest order goes out at once.
        let low = BTreeMap::from([("roll".to_string(), (4, 2))]);
        let out = to_publish(&low, &none, &uids, &out, &mut since, settled, settle);
        assert_eq!(out["roll"].order, 4);
        // A later object of the same name settles anew.
        let uids2 = BTreeMap::from([("roll".to_string(), "u2".to_string())]);
        assert!(to_publish(&low, &none, &uids2, &out, &mut since, settled, settle).is_empty());
        // No turn pending: forgotten, and it settles again when turns come.
        assert!(
            to_publish(
                &BTreeMap::new(),
                &none,
                &uids,
                &out,
                &mut since,
                settled,
                settle
            )
            .is_empty()
        );
        assert!(since.is_empty());
        let fresh = |low: &BTreeMap<String, (i64, usize)>, since: &mut HashMap<_, _>, at| {
            to_publish(low, &none, &uids, &Orders::new(), since, at, settle)
        };
        assert!(fresh(&low, &mut since, settled).is_empty());
        // An object the writer does not see is not published.
        let low = BTreeMap::from([("gone".to_string(), (0, 1))]);
        assert!(fresh(&low, &mut since, settled + settle).is_empty());
    }

    #[test]
    fn nodes_in_line_may_take_any_slot_once_every_waiting_node_fits_in_the_line() {
        let mut drains = vec![
            drain("a", 0, Some("roll")),
            drain("b", 0, Some("roll")),
            drain("c", 0, Some("roll")),
            drain("d", 0, None),
        ];
        // a says it waits, b waits without saying so yet (its turn is
        // pending, nothing started); c is taking its turn; d has none.
        drains[0].waiting = Some("waiting for a drain slot, next in line".into());
        drains[2].phase = "Draining".into();
        drains[3].waiting = Some("waiting for the maintenance window".into());
        // A node of a later order waiting does not count: it goes later.
        let mut later = drain("e", 4, Some("roll"));
        later.waiting = Some("waiting for the nodes of drain order 0".into());
        drains.push(later);
        let low = lowest(&drains);
        assert_eq!(
            waiting(&drains, &low),
            BTreeMap::from([("roll".to_string(), 2)])
        );
        let uids = BTreeMap::from([("roll".to_string(), "u1".to_string())]);
        let published = Orders::from([(
            "roll".to_string(),
            Published {
                uid: "u1".into(),
                order: 0,
                any_slot: false,
            },
        )]);
        let any = std::collections::BTreeSet::from(["roll".to_string()]);
        let now = tokio::time::Instant::now();
        let out = to_publish(
            &low,
            &any,
            &uids,
            &published,
            &mut HashMap::new(),
            now,
            Duration::from_secs(10),
        );
        assert!(out["roll"].any_slot);
    }

    #[test]
    fn a_node_queues_once_the_published_order_reaches_its_own() {
        let published = Orders::from([(
            "roll".to_string(),
            Published {
                uid: "u1".into(),
                order: 2,
                any_slot: false,
            },
        )]);
        // Order 0 never waits, published or not.
        assert_eq!(gate(0, "roll", "u1", &Orders::new()), Ok(()));
        assert_eq!(gate(1, "roll", "u1", &published), Ok(()));
        assert_eq!(gate(2, "roll", "u1", &published), Ok(()));
        let e = gate(3, "roll", "u1", &published).unwrap_err();
        assert!(e.contains("drain order 2") && e.contains("is 3"), "{e}");
        // An order published for an earlier object of that name, or none.
        let e = gate(1, "roll", "u2", &published).unwrap_err();
        assert!(e.contains("to be published"), "{e}");
        assert!(gate(1, "other", "u1", &published).is_err());
    }

    #[test]
    fn the_orders_read_back_from_the_lease_and_garbage_reads_as_none() {
        let orders = Orders::from([(
            "roll".to_string(),
            Published {
                uid: "u1".into(),
                order: 4,
                any_slot: true,
            },
        )]);
        let text = serde_json::to_string(&orders).unwrap();
        let lease = json!({"metadata": {"annotations": {ANNOTATION: text}}});
        assert_eq!(read(&lease), orders);
        for bad in [
            json!({"metadata": {}}),
            json!({"metadata": {"annotations": {ANNOTATION: "{"}}}),
            json!({"metadata": {"annotations": {ANNOTATION: 5}}}),
        ] {
            assert!(read(&bad).is_empty(), "{bad}");
        }
    }

    fn effective(turn: bool, stage: super::super::Stage) -> Effective {
        Effective {
            stage,
            entries: None,
            stage_timeout_seconds: None,
            drain_slots: Some(("roll".into(), 2)),
            cordon_ahead: 0,
            turn: turn.then(|| super::super::turns::RebootTurn {
                uid: "u1".into(),
                object: "roll".into(),
                slots: 2,
                timeout: Duration::from_secs(600),
                on_timeout: Default::default(),
            }),
            rebooted_not_ready: false,
            planned: false,
            from: vec!["roll".into()],
            reason: String::new(),
        }
    }

    #[test]
    fn a_turn_is_pending_until_drained_or_with_a_reboot_until_rebooted() {
        use super::super::Stage;
        let plain = effective(false, Stage::Drain);
        assert_eq!(pending_turn(Some(&plain), false).as_deref(), Some("roll"));
        assert_eq!(pending_turn(Some(&plain), true), None);
        let reboot = effective(true, Stage::Drain);
        assert_eq!(pending_turn(Some(&reboot), true).as_deref(), Some("roll"));
        assert_eq!(
            pending_turn(Some(&effective(false, Stage::Cordon)), false),
            None
        );
        let mut unlimited = effective(false, Stage::Drain);
        unlimited.drain_slots = None;
        assert_eq!(pending_turn(Some(&unlimited), false), None);
        assert_eq!(pending_turn(None, false), None);
    }
}
