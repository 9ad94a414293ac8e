//! Which NodeMaintenance objects apply to a node, and what they add up to.

use std::collections::BTreeMap;

use serde_json::Value;

use super::turns::{RebootTurn, TurnState};
use super::{NodeMaintenance, Stage, validate};
use crate::drain::plan::{PlanEntry, selector_matches};

/// What the NodeMaintenance objects selecting one node ask of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Effective {
    /// The furthest stage asked for: `Idle`, `Cordon` or `Drain`.
    pub stage: Stage,
    /// The drain plan of the oldest object at that stage; `None` when it
    /// has none (maintd's default plan).
    pub entries: Option<Vec<PlanEntry>>,
    /// Its stage timeout, if it sets one.
    pub stage_timeout_seconds: Option<i64>,
    /// The drain slots the node must take before it evicts: the oldest
    /// object's name and its `maxConcurrentDrains`. Set only when every
    /// object at the winning stage limits its drains: one that does not
    /// asks for the drain now.
    pub drain_slots: Option<(String, u32)>,
    /// How many nodes that object cordons ahead of their turn
    /// (`cordonAhead`; 0 with no drain slots).
    pub cordon_ahead: u32,
    /// The drain slots' turns end with a reboot (`waitForReboot` of the
    /// object that gives the slots).
    pub turn: Option<super::turns::RebootTurn>,
    /// That turn's node has booted again and is not Ready yet: it stays
    /// cordoned and evicts nothing until it is.
    pub rebooted_not_ready: bool,
    /// Every object at the winning stage is `planned`: the drain waits for
    /// the agent's policy.
    pub planned: bool,
    /// Names of the objects at that stage, oldest first: the first one
    /// supplies the plan.
    pub from: Vec<String>,
    /// The `reason` of the first object.
    pub reason: String,
}

impl Effective {
    /// Whether the node must be cordoned (Cordon or Drain).
    pub fn active(&self) -> bool {
        matches!(self.stage, Stage::Cordon | Stage::Drain)
    }

    /// Whether the plan must run (Drain).
    pub fn evict(&self) -> bool {
        self.stage == Stage::Drain
    }

    /// One line for status and events, e.g.
    /// `NodeMaintenance kernel (stage Drain; also: other)`.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "NodeMaintenance {} (stage {})",
            self.from.first().map(String::as_str).unwrap_or("?"),
            self.stage
        );
        if self.from.len() > 1 {
            s.pop();
            s.push_str(&format!("; also: {})", self.from[1..].join(", ")));
        }
        s
    }
}

fn labels(node: &Value) -> BTreeMap<String, String> {
    node["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `nm` names `node` (by `nodeName`) or its `nodeSelector` matches
/// the node's labels. A malformed selector selects nothing.
pub fn selects(nm: &NodeMaintenance, node: &Value) -> bool {
    let name = node["metadata"]["name"].as_str();
    match (&nm.spec.node_name, &nm.spec.node_selector) {
        (Some(n), None) => name == Some(n.as_str()),
        (None, Some(sel)) => selector_matches(sel, &labels(node)).unwrap_or(false),
        // Both or neither: invalid, selects nothing.
        _ => false,
    }
}

/// The one request that the valid objects selecting `node` add up to.
///
/// The furthest stage wins (`Idle < Cordon < Drain`); objects at `Complete`
/// (done), invalid ones and rolling ones whose turn on this node is over
/// (it rebooted: see [`super::turns`]) are left out. The plan comes from the oldest
/// object at the winning stage (creationTimestamp, then name; one without a
/// timestamp counts as newest). `None` when no object asks anything.
pub fn effective<'a>(
    objs: impl IntoIterator<Item = &'a NodeMaintenance>,
    node: &Value,
) -> Option<Effective> {
    let mut candidates: Vec<&NodeMaintenance> = objs
        .into_iter()
        .filter(|nm| nm.spec.stage.rank().is_some() && validate(nm).is_ok() && selects(nm, node))
        .filter(|nm| !turn_over(nm, node))
        .collect();
    let top = candidates
        .iter()
        .filter_map(|nm| nm.spec.stage.rank())
        .max()?;
    candidates.retain(|nm| nm.spec.stage.rank() == Some(top));
    candidates.sort_by(|a, b| {
        let key = |nm: &NodeMaintenance| {
            let ts = nm.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (
                ts.is_none(),
                ts,
                nm.metadata.name.clone().unwrap_or_default(),
            )
        };
        key(a).cmp(&key(b))
    });
    let first = candidates.first()?;
    let limited = candidates
        .iter()
        .all(|nm| nm.spec.max_concurrent_drains.is_some());
    let turn = limited.then(|| RebootTurn::of(first)).flatten();
    let rebooted_not_ready = turn.as_ref().is_some_and(|t| {
        matches!(
            super::turns::state(&t.uid, node),
            TurnState::RebootedNotReady(_)
        )
    });
    Some(Effective {
        stage: first.spec.stage.clone(),
        entries: (!first.spec.drain_plan.is_empty()).then(|| first.spec.drain_plan.clone()),
        stage_timeout_seconds: first.spec.stage_timeout_seconds,
        turn,
        rebooted_not_ready,
        drain_slots: limited.then(|| {
            let max = first.spec.max_concurrent_drains.unwrap_or(1).max(1);
            (
                first.metadata.name.clone().unwrap_or_default(),
                u32::try_from(max).unwrap_or(1),
            )
        }),
        cordon_ahead: if limited {
            u32::try_from(first.spec.cordon_ahead.unwrap_or(0)).unwrap_or(0)
        } else {
            0
        },
        planned: candidates.iter().all(|nm| nm.spec.planned),
        reason: first.spec.reason.clone(),
        from: candidates
            .iter()
            .map(|nm| nm.metadata.name.clone().unwrap_or_default())
            .collect(),
    })
}

/// Whether `nm` is a rolling maintenance whose turn on `node` is over: the
/// node rebooted since it took its slot (and is Ready), or that was
/// recorded.
fn turn_over(nm: &NodeMaintenance, node: &Value) -> bool {
    let Some(t) = RebootTurn::of(nm) else {
        return false;
    };
    matches!(
        super::turns::state(&t.uid, node),
        TurnState::Done | TurnState::Rebooted(_)
    )
}
