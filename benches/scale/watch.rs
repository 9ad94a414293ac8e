//! The bench's look at a rolling reboot, every 50 ms: cordons, uncordons,
//! turns done and slot holders, from the Nodes, NodeDrains and Leases of
//! either API server, and the updater's part (a node drained and holding
//! its turn at the boot it has now is rebooted).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::rollout::{Rollout, Step};

/// The slot Leases of the bench's NodeMaintenance "rolling".
pub const SLOT_PREFIX: &str = "maintd-reboot-nm-rolling-";

/// What the bench saw of one node, in seconds since the object was made.
#[derive(Default, Debug)]
pub struct NodeSeen {
    /// Spells out of scheduling: from the look that first saw the node
    /// cordoned to the one that first saw it schedulable again (`None`
    /// while it still is not).
    pub cordons: Vec<(f64, Option<f64>)>,
    /// Its NodeDrain first said Drained.
    drained: Option<f64>,
    /// Its Node's `Drained` condition was first True.
    drained_condition: Option<f64>,
    /// The bench rebooted it.
    rebooted: Option<f64>,
    /// Its turn was first listed done.
    done: Option<f64>,
}

/// One hold of a slot Lease.
struct Hold {
    node: String,
    from: f64,
    to: Option<f64>,
}

/// The bench's look at the rollout, every 50 ms.
pub struct Watch {
    t0: Instant,
    last_look: Option<Instant>,
    looks: Vec<f64>,
    pub nodes: std::collections::BTreeMap<String, NodeSeen>,
    slots: std::collections::BTreeMap<String, Vec<Hold>>,
    pub unschedulable_now: usize,
    most_unschedulable: usize,
    /// Since when each node has been seen cordoned while no slot Lease
    /// named it.
    unslotted_since: std::collections::BTreeMap<String, f64>,
    /// Nodes seen cordoned with no slot for longer than
    /// [`UNSLOTTED_FOR`], each as the bench saw it then (at most 20).
    pub unslotted: Vec<String>,
}

/// How long a node may be seen cordoned with no slot before the bench
/// notes it: the bench's watches of Nodes and Leases are two streams, and
/// one may show a cordon before the other shows the slot taken.
const UNSLOTTED_FOR: f64 = 2.0;

impl Watch {
    pub fn new(t0: Instant) -> Watch {
        Watch {
            t0,
            last_look: None,
            looks: Vec::new(),
            nodes: Default::default(),
            slots: Default::default(),
            unschedulable_now: 0,
            most_unschedulable: 0,
            unslotted_since: Default::default(),
            unslotted: Vec::new(),
        }
    }

    /// One look at the Nodes, NodeDrains and Leases (of namespace maintd)
    /// as they are now: notes cordons, uncordons, turns done and slot
    /// holders, and calls `reboot` for each node drained and holding its
    /// turn at the boot it has now (once a node). True once every node's
    /// turn is done and every node is schedulable.
    pub fn look(
        &mut self,
        nodes: &[Arc<Value>],
        drains: &[Arc<Value>],
        leases: &[Arc<Value>],
        uid: &str,
        mut reboot: impl FnMut(&str) -> bool,
    ) -> bool {
        use maintd::api::turns;
        let at = Instant::now();
        if let Some(last) = self.last_look {
            self.looks.push((at - last).as_secs_f64());
        }
        self.last_look = Some(at);
        let now = (at - self.t0).as_secs_f64();
        let phase: std::collections::HashMap<&str, &str> = drains
            .iter()
            .filter_map(|d| {
                Some((
                    d["metadata"]["name"].as_str()?,
                    d["status"]["phase"].as_str()?,
                ))
            })
            .collect();
        let mut unschedulable = 0;
        let mut over = !nodes.is_empty();
        let slotted: std::collections::BTreeMap<&str, &str> = leases
            .iter()
            .filter_map(|l| {
                let name = l["metadata"]["name"].as_str()?;
                let holder = l["spec"]["holderIdentity"].as_str()?;
                (name.starts_with(SLOT_PREFIX) && !holder.is_empty()).then_some((holder, name))
            })
            .collect();
        for node in nodes {
            let name = node["metadata"]["name"].as_str().unwrap_or_default();
            let cordoned = node["spec"]["unschedulable"] == true;
            if cordoned && !slotted.contains_key(name) {
                let since = *self.unslotted_since.entry(name.to_string()).or_insert(now);
                if now - since > UNSLOTTED_FOR && self.unslotted.len() < 20 {
                    let noted = self
                        .unslotted
                        .iter()
                        .any(|u| u.starts_with(&format!("{name} ")));
                    if !noted {
                        let seen = self.nodes.get(name);
                        self.unslotted.push(format!(
                            "{name} cordoned with no slot since {since:.1} s (seen at {now:.1} s); its annotations {}; taints {}; the bench saw it: {seen:?}; slot holds naming it: {:?}",
                            node["metadata"]["annotations"],
                            node["spec"]["taints"],
                            self.slots
                                .iter()
                                .flat_map(|(slot, hs)| hs.iter().filter(|h| h.node == name).map(move |h| (slot.clone(), h.from, h.to)))
                                .collect::<Vec<_>>()
                        ));
                    }
                }
            } else {
                self.unslotted_since.remove(name);
            }
            let seen = self.nodes.entry(name.to_string()).or_default();
            let open = seen.cordons.last().is_some_and(|(_, to)| to.is_none());
            if cordoned {
                unschedulable += 1;
                if !open {
                    seen.cordons.push((now, None));
                }
            } else if open && let Some(last) = seen.cordons.last_mut() {
                last.1 = Some(now);
            }
            let done = turns::done(node).iter().any(|u| u == uid);
            if done && seen.done.is_none() {
                seen.done = Some(now);
            }
            let condition = node["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Drained" && c["status"] == "True")
            });
            if condition && seen.drained_condition.is_none() {
                seen.drained_condition = Some(now);
            }
            let drained = phase.get(name) == Some(&"Drained");
            if drained && seen.drained.is_none() {
                seen.drained = Some(now);
            }
            let holds_turn = turns::record(node)
                .is_some_and(|r| r.uid == uid && Some(r.boot_id.as_str()) == turns::boot_id(node));
            if drained && !done && holds_turn && seen.rebooted.is_none() && reboot(name) {
                seen.rebooted = Some(now);
            }
            over &= done && !cordoned;
        }
        self.unschedulable_now = unschedulable;
        self.most_unschedulable = self.most_unschedulable.max(unschedulable);
        for lease in leases {
            let name = lease["metadata"]["name"].as_str().unwrap_or_default();
            if !name.starts_with(SLOT_PREFIX) {
                continue;
            }
            let holder = lease["spec"]["holderIdentity"]
                .as_str()
                .filter(|h| !h.is_empty());
            let holds = self.slots.entry(name.to_string()).or_default();
            let current = holds.last().filter(|h| h.to.is_none());
            if current.map(|h| h.node.as_str()) != holder {
                if let Some(h) = holds.last_mut().filter(|h| h.to.is_none()) {
                    h.to = Some(now);
                }
                if let Some(holder) = holder {
                    holds.push(Hold {
                        node: holder.to_string(),
                        from: now,
                        to: None,
                    });
                }
            }
        }
        over
    }

    pub fn done_count(&self) -> usize {
        self.nodes.values().filter(|s| s.done.is_some()).count()
    }

    pub fn rebooted_count(&self) -> usize {
        self.nodes.values().filter(|s| s.rebooted.is_some()).count()
    }

    pub fn holders_now(&self) -> Vec<String> {
        self.slots
            .values()
            .filter_map(|h| h.last().filter(|h| h.to.is_none()))
            .map(|h| h.node.clone())
            .collect()
    }

    /// Nodes of `orders` drain orders (see [`drain_order`]) first seen
    /// cordoned before the last node of a lower order was seen back.
    fn out_of_order(&self, orders: usize) -> usize {
        let n = self.nodes.len();
        let order = |name: &str| {
            let i = name
                .trim_start_matches("node-")
                .parse::<usize>()
                .unwrap_or(0);
            drain_order(i, n, orders)
        };
        let mut back = vec![f64::NEG_INFINITY; orders.max(1)];
        for (name, s) in &self.nodes {
            let last = s.cordons.last().and_then(|c| c.1).unwrap_or(f64::INFINITY);
            let g = order(name);
            back[g] = back[g].max(last);
        }
        self.nodes
            .iter()
            .filter(|(name, s)| {
                let first = s.cordons.first().map_or(f64::INFINITY, |c| c.0);
                back[..order(name)].iter().any(|b| first < *b)
            })
            .count()
    }

    /// The figures, once every turn is over.
    pub fn summary(&self, slots: usize, ahead: usize, reboot_ms: u64, orders: usize) -> Rollout {
        let spells = |s: &NodeSeen| -> f64 {
            s.cordons
                .iter()
                .map(|(from, to)| to.unwrap_or(*from) - from)
                .sum()
        };
        let first = |s: &NodeSeen| s.cordons.first().map(|c| c.0);
        let last = |s: &NodeSeen| s.cordons.last().and_then(|c| c.1);
        let start = self
            .nodes
            .values()
            .filter_map(first)
            .fold(f64::INFINITY, f64::min);
        let end = self
            .nodes
            .values()
            .filter_map(last)
            .fold(f64::NEG_INFINITY, f64::max);
        let gap = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        let mut steps: Vec<(&str, Vec<f64>)> = vec![
            ("slot taken → cordoned (< 0: cordoned ahead)", vec![]),
            ("cordoned → NodeDrain Drained", vec![]),
            ("cordoned → Node condition Drained", vec![]),
            ("NodeDrain Drained → rebooted", vec![]),
            ("rebooted → turn done (NotReady meanwhile)", vec![]),
            ("turn done → uncordoned (< 0: uncordon first)", vec![]),
            ("uncordoned → slot released", vec![]),
            ("slot released → next node takes it", vec![]),
        ];
        let mut idle = [
            ("before the slot's first cordon", 0.0),
            ("slot taken, node not yet cordoned", 0.0),
            ("node uncordoned, slot not yet released", 0.0),
            ("slot free between two nodes", 0.0),
            ("after the slot's last node (the tail)", 0.0),
            ("slot never held", 0.0),
        ];
        let (mut fewest, mut most) = (usize::MAX, 0);
        let mut held_slots = 0;
        let mut turn_secs = 0.0;
        for holds in self.slots.values() {
            fewest = fewest.min(holds.len());
            most = most.max(holds.len());
            held_slots += 1;
            let mut prev_out: Option<(f64, Option<f64>)> = None;
            for (i, h) in holds.iter().enumerate() {
                let Some(seen) = self.nodes.get(&h.node) else {
                    continue;
                };
                let (Some(c), Some(u)) = (first(seen), last(seen)) else {
                    continue;
                };
                // The turn: from the slot taken, or the cordon if later
                // (a node cordoned ahead was cordoned before).
                let busy = c.max(h.from);
                turn_secs += u - busy;
                if i == 0 {
                    idle[0].1 += busy - start;
                }
                if let Some((prev_u, prev_released)) = prev_out {
                    let released = prev_released.unwrap_or(h.from);
                    idle[2].1 += released - prev_u;
                    idle[3].1 += h.from - released;
                    steps[7].1.push(h.from - released);
                }
                idle[1].1 += busy - h.from;
                steps[0].1.push(c - h.from);
                steps[1].1.extend(gap(Some(c), seen.drained));
                steps[2].1.extend(gap(Some(c), seen.drained_condition));
                steps[3].1.extend(gap(seen.drained, seen.rebooted));
                steps[4].1.extend(gap(seen.rebooted, seen.done));
                steps[5].1.extend(gap(seen.done, Some(u)));
                steps[6].1.extend(gap(Some(u), h.to));
                prev_out = Some((u, h.to));
            }
            if let Some((u, _)) = prev_out {
                idle[4].1 += end - u;
            }
        }
        idle[5].1 = slots.saturating_sub(held_slots) as f64 * (end - start);
        let looks = &self.looks;
        Rollout {
            slots,
            ahead,
            reboot_ms,
            orders,
            out_of_order: self.out_of_order(orders),
            wall_secs: end - start,
            unschedulable_secs: self.nodes.values().map(spells).sum(),
            turn_secs,
            most_unschedulable: self.most_unschedulable,
            never_cordoned: self.nodes.values().filter(|s| s.cordons.is_empty()).count(),
            cordoned_again: self.nodes.values().filter(|s| s.cordons.len() > 1).count(),
            look_mean_ms: looks.iter().sum::<f64>() * 1000.0 / looks.len().max(1) as f64,
            look_max_ms: looks.iter().copied().fold(0.0, f64::max) * 1000.0,
            holds_per_slot: (fewest.min(most), most),
            steps: steps.into_iter().map(|(w, v)| Step::of(w, v)).collect(),
            idle: idle.iter().map(|(w, s)| (w.to_string(), *s)).collect(),
        }
    }
}

/// The drain order of node `i` of `n` in `orders` orders: blocks by name.
pub fn drain_order(i: usize, n: usize, orders: usize) -> usize {
    (i * orders.max(1) / n.max(1)).min(orders.max(1) - 1)
}
