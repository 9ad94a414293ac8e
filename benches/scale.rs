//! What each agent costs as the cluster grows: N agents in one process
//! against the simulator, for N = 10, 100 and 1,000
//! (`MAINTD_SCALE_NODES=10,100`). The agents share one runtime, each with
//! its own client and watches; the simulator runs on a runtime of its own,
//! on its own thread, so its CPU time is measured apart from theirs.
//!
//! (a) idle for `MAINTD_SCALE_IDLE_SECONDS` (default 60; the simulator
//!     sends a bookmark a minute, as an API server does);
//! (b) a rolling reboot: one NodeMaintenance selecting all N nodes moves to
//!     Drain with `maxConcurrentDrains` a tenth of N and
//!     `waitForReboot` (600 s), so a tenth of the nodes take their turn at
//!     once: a node takes a slot, is cordoned and drained, and keeps slot
//!     and cordon until it has rebooted; then it is uncordoned and the slot
//!     goes to the next node. The bench is the updater: it reboots a node
//!     (NotReady for 30 s, then Ready with a new boot ID) once its
//!     NodeDrain says Drained and its turn record holds its current boot
//!     ID. The rollout is over when every node lists the object as done
//!     and is schedulable. `MAINTD_SCALE_PODS` pods a node (default 3).
//!     `MAINTD_SCALE_CORDON_AHEAD=M` (default 0, at most 1000) sets the
//!     object's `cordonAhead`: the next M nodes are cordoned before their
//!     turn. `MAINTD_SCALE_ORDERS=K` (default 1, at most 100) labels the
//!     nodes in K drain orders (`maintd.io/drain-order`, in blocks of
//!     N/K by name), taken one after the other.
//!     `MAINTD_SCALE_REBOOT_MS` (default 30000, 10 to 600000) sets
//!     how long a rebooting node stays NotReady: 30 s is a fast real
//!     reboot (most take minutes). A turn's fixed costs (the writes
//!     between one node's uncordon and the next node's cordon, a second
//!     or so on two cores shared by N agents and the simulator) weigh
//!     more against a shorter turn: 200 ms gives a quick run whose ratio
//!     says how much those costs are, not what a fleet would see.
//!
//! Per N it prints requests per agent per minute (idle), requests, watch
//! events and bytes received per agent (idle and rolling reboot), the
//! largest NodeMaintenance and NodeDrain objects, the simulator's CPU time
//! and the agents', the process's memory before and with the agents. Of
//! the rolling reboot, from a look at the store's Nodes every 50 ms: the
//! fleet's wall time (first node cordoned to last uncordoned) against its
//! ideal (every node's turn, added up, over the slots: a turn runs from
//! the node taking its slot, or its cordon if later, to its uncordon), the
//! most nodes unschedulable at once against slots + cordonAhead, each step of a
//! turn, and where the slots stood idle. It panics, with no figures, if
//! the rollout does not finish in 1200 s, if a node was never seen
//! cordoned, if a node was cordoned before every node of a lower drain
//! order was back in scheduling, if more nodes were unschedulable at once than slots +
//! cordonAhead, or if the wall time beats its ideal (only possible with
//! more turns at once than slots, or a wrong measurement). Then the
//! smallest N again with three times the pods, to tell the requests per
//! pod from the constant, and the figures the design holds to, each with
//! whether it holds. Run with `cargo bench --bench scale`.

use std::time::{Duration, Instant};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Writer};
use maintd_sim::{SimCluster, SimConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How long a rebooting node stays NotReady unless `MAINTD_SCALE_REBOOT_MS`
/// says otherwise: a fast real reboot.
const DEFAULT_REBOOT_MS: u64 = 30_000;

/// The simulator's threads are named so, and measured apart.
const SIM_THREAD: &str = "sim-apiserver";

/// CPU seconds of this process's threads, split into the simulator's and
/// everyone else's, from /proc/self/task/*/stat.
fn cpu_split() -> (f64, f64) {
    let (mut sim, mut rest) = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0.0, 0.0);
    };
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map(|(_, c)| c).unwrap_or("");
        let f: Vec<&str> = tail.split_whitespace().collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let secs = (ticks(11) + ticks(12)) / 100.0;
        if comm.starts_with(SIM_THREAD) {
            sim += secs;
        } else {
            rest += secs;
        }
    }
    (sim, rest)
}

/// The process's resident memory, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn create(sim: &SimCluster, gr: &Gr, ns: Option<&str>, obj: Value) {
    let def = sim.state.store().resource(gr).expect("resource served");
    let writer = Writer {
        manager: "bench".into(),
        force: true,
        user: None,
    };
    verbs::create(&sim.state, &def, ns, obj, &writer, false).expect("created");
}

/// Agent requests and what they received, per agent, from the audit log.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct Usage {
    requests: f64,
    events: f64,
    bytes: f64,
    /// Bytes per agent by resource (the plural in the path).
    by_resource: std::collections::BTreeMap<String, f64>,
    /// Requests per agent answered 409 Conflict (a write based on a
    /// version that had moved on), by path.
    conflicts: std::collections::BTreeMap<String, f64>,
    /// Requests per agent by kind and collection: `LIST pods`, `WATCH
    /// leases`, `PATCH nodes/status`.
    calls: std::collections::BTreeMap<String, f64>,
}

/// The resource of a request path and its subresource, without names:
/// `nodes`, `nodes/status`, `leases`.
fn collection_of(path: &str) -> String {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match seg.first() {
        Some(&"api") => seg.get(2..).unwrap_or_default(),
        Some(&"apis") => seg.get(3..).unwrap_or_default(),
        _ => &seg[..],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        _ => rest,
    };
    match rest {
        [plural, _, sub, ..] => format!("{plural}/{sub}"),
        [plural, ..] => plural.to_string(),
        [] => path.to_string(),
    }
}

/// What a request did, by kind and collection: a GET without a name is a
/// LIST, a watch a WATCH.
fn call_of(r: &maintd_sim::audit::RequestRecord) -> String {
    let collection = collection_of(&r.path);
    let named = collection.contains('/')
        || r.path.trim_end_matches('/').rsplit('/').next() != Some(collection.as_str());
    let kind = match r.method.as_str() {
        _ if r.watch => "WATCH",
        "GET" if !named => "LIST",
        m => m,
    };
    format!("{kind} {collection}")
}

impl Usage {
    fn of_agents(sim: &SimCluster, n: usize) -> Usage {
        let all = sim.state.audit.requests();
        let requests = all
            .iter()
            .filter(|r| r.user_agent.starts_with("maintd/"))
            .count();
        let mut conflicts = std::collections::BTreeMap::new();
        let mut calls = std::collections::BTreeMap::new();
        for r in all.iter().filter(|r| r.user_agent.starts_with("maintd/")) {
            if r.code == 409 {
                *conflicts.entry(collection_of(&r.path)).or_insert(0.0) += 1.0 / n as f64;
            }
            *calls.entry(call_of(r)).or_insert(0.0) += 1.0 / n as f64;
        }
        let (mut events, mut bytes) = (0u64, 0u64);
        for (ua, s) in sim.state.audit.sent() {
            if ua.starts_with("maintd/") {
                events += s.watch_events;
                bytes += s.bytes;
            }
        }
        let mut by_resource = std::collections::BTreeMap::new();
        for ((ua, resource), s) in sim.state.audit.sent_by_resource() {
            if ua.starts_with("maintd/") {
                *by_resource.entry(resource).or_insert(0.0) += s.bytes as f64 / n as f64;
            }
        }
        Usage {
            requests: requests as f64 / n as f64,
            events: events as f64 / n as f64,
            bytes: bytes as f64 / n as f64,
            by_resource,
            conflicts,
            calls,
        }
    }

    fn since(self, before: Usage) -> Usage {
        let minus = |mut now: std::collections::BTreeMap<String, f64>,
                     then: &std::collections::BTreeMap<String, f64>| {
            for (k, v) in then {
                *now.entry(k.clone()).or_insert(0.0) -= v;
            }
            now
        };
        let by_resource = minus(self.by_resource, &before.by_resource);
        let conflicts = minus(self.conflicts, &before.conflicts);
        let calls = minus(self.calls, &before.calls);
        Usage {
            requests: self.requests - before.requests,
            events: self.events - before.events,
            bytes: self.bytes - before.bytes,
            by_resource,
            conflicts,
            calls,
        }
    }

    /// The resources that made up most of the bytes, largest first.
    fn breakdown(&self) -> String {
        let mut v: Vec<_> = self
            .by_resource
            .iter()
            .filter(|(_, b)| **b >= 1.0)
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        v.iter()
            .map(|(r, b)| format!("{r} {:.1} kB", *b / 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    n: usize,
    pods_per_node: usize,
    idle: Usage,
    idle_secs: f64,
    drain: Usage,
    drain_secs: f64,
    /// Nodes whose turn of the rolling reboot is done.
    done: usize,
    rollout: Rollout,
    largest_nm: usize,
    largest_nd: usize,
    sim_cpu: f64,
    agents_cpu: f64,
    rss_sim_kib: u64,
    rss_with_agents_kib: u64,
}

/// The rolling reboot as the bench saw it, looking at the Nodes, NodeDrains
/// and slot Leases in the simulator's store every 50 ms.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct Rollout {
    /// The object's `maxConcurrentDrains`.
    slots: usize,
    /// The object's `cordonAhead`.
    ahead: usize,
    /// How long each rebooting node stayed NotReady.
    #[serde(default)]
    reboot_ms: u64,
    /// How many drain orders the nodes were labelled in.
    #[serde(default)]
    orders: usize,
    /// Nodes cordoned before every node of a lower order was back.
    #[serde(default)]
    out_of_order: usize,
    /// From the first node seen cordoned to the last seen uncordoned.
    wall_secs: f64,
    /// Every node's time unschedulable, added up.
    unschedulable_secs: f64,
    /// Every node's turn, added up: from taking its slot (or its cordon,
    /// if later) to its uncordon. The same as the time unschedulable when
    /// no node is cordoned ahead.
    turn_secs: f64,
    /// The most nodes seen unschedulable in one look.
    most_unschedulable: usize,
    /// Nodes never seen cordoned: their time is not measured.
    never_cordoned: usize,
    /// Nodes seen cordoned more than once (a turn taken again).
    cordoned_again: usize,
    /// How far apart the looks were, ms.
    look_mean_ms: f64,
    look_max_ms: f64,
    /// The fewest and most nodes one slot was held by.
    holds_per_slot: (usize, usize),
    /// Where a node's turn goes, step by step.
    steps: Vec<Step>,
    /// Slot-seconds a slot had no node taking its turn, by why; together
    /// they are `wall_secs × slots − turn_secs`.
    idle: Vec<(String, f64)>,
}

/// One step of the nodes' turns: how long it took, over the nodes (or
/// slot handovers) it was seen for, in seconds.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct Step {
    what: String,
    count: usize,
    mean: f64,
    p50: f64,
    p90: f64,
    max: f64,
}

impl Step {
    fn of(what: &str, mut v: Vec<f64>) -> Step {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        Step {
            what: what.to_string(),
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len().max(1) as f64,
            p50: at(0.5),
            p90: at(0.9),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

impl Rollout {
    /// The wall time if the slots had always been full: every node's turn,
    /// shared by the slots.
    fn ideal_secs(&self) -> f64 {
        self.turn_secs / self.slots.max(1) as f64
    }

    fn ratio(&self) -> f64 {
        self.wall_secs / self.ideal_secs()
    }

    /// Refuses figures that cannot be true: a bench that prints numbers for
    /// a rollout it did not see is worse than none.
    fn check(&self, n: usize) {
        assert!(
            self.never_cordoned == 0,
            "N={n}: {} NODES WERE NEVER SEEN CORDONED: either their turn never cordoned them or a 50 ms look missed it; their time out of scheduling is not measured, so there is no ideal to compare with",
            self.never_cordoned
        );
        assert!(
            self.wall_secs > 0.0 && self.turn_secs > 0.0,
            "N={n}: NO TURN MEASURED (wall {:.3} s, sum {:.3} s)",
            self.wall_secs,
            self.turn_secs
        );
        assert!(
            self.most_unschedulable <= self.slots + self.ahead,
            "N={n}: {} NODES WERE UNSCHEDULABLE AT ONCE, more than {} slots + {} cordoned ahead",
            self.most_unschedulable,
            self.slots,
            self.ahead
        );
        assert!(
            self.out_of_order == 0,
            "N={n}: {} NODES WERE CORDONED BEFORE EVERY NODE OF A LOWER DRAIN ORDER WAS BACK IN SCHEDULING ({} orders)",
            self.out_of_order,
            self.orders
        );
        let ratio = self.ratio();
        assert!(
            ratio >= 1.0,
            "N={n}: THE ROLLING REBOOT BEAT ITS IDEAL ({ratio:.3}x) with {} slots: more turns at once than slots, or a wrong measurement",
            self.slots,
        );
    }
}

/// The slot Leases of the bench's NodeMaintenance "rolling".
const SLOT_PREFIX: &str = "maintd-reboot-nm-rolling-";

/// What the bench saw of one node, in seconds since the object was made.
#[derive(Default)]
struct NodeSeen {
    /// Spells out of scheduling: from the look that first saw the node
    /// cordoned to the one that first saw it schedulable again (`None`
    /// while it still is not).
    cordons: Vec<(f64, Option<f64>)>,
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
struct Watch {
    t0: Instant,
    last_look: Option<Instant>,
    looks: Vec<f64>,
    nodes: std::collections::BTreeMap<String, NodeSeen>,
    slots: std::collections::BTreeMap<String, Vec<Hold>>,
    unschedulable_now: usize,
    most_unschedulable: usize,
}

impl Watch {
    fn new(t0: Instant) -> Watch {
        Watch {
            t0,
            last_look: None,
            looks: Vec::new(),
            nodes: Default::default(),
            slots: Default::default(),
            unschedulable_now: 0,
            most_unschedulable: 0,
        }
    }

    /// One look: notes cordons, uncordons, turns done and slot holders,
    /// and calls `reboot` for each node drained and holding its turn at
    /// the boot it has now (once a node). True once every node's turn is
    /// done and every node is schedulable.
    fn look(
        &mut self,
        sim: &SimCluster,
        drains: &[std::sync::Arc<Value>],
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
        let nodes = sim.state.store().list(&Gr::nodes(), None);
        let leases = sim
            .state
            .store()
            .list(&Gr::new("coordination.k8s.io", "leases"), Some("maintd"));
        let mut unschedulable = 0;
        let mut over = !nodes.is_empty();
        for node in &nodes {
            let name = node["metadata"]["name"].as_str().unwrap_or_default();
            let seen = self.nodes.entry(name.to_string()).or_default();
            let cordoned = node["spec"]["unschedulable"] == true;
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
        for lease in &leases {
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

    fn done_count(&self) -> usize {
        self.nodes.values().filter(|s| s.done.is_some()).count()
    }

    fn rebooted_count(&self) -> usize {
        self.nodes.values().filter(|s| s.rebooted.is_some()).count()
    }

    fn holders_now(&self) -> Vec<String> {
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
    fn summary(&self, slots: usize, ahead: usize, reboot_ms: u64, orders: usize) -> Rollout {
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
fn drain_order(i: usize, n: usize, orders: usize) -> usize {
    (i * orders.max(1) / n.max(1)).min(orders.max(1) - 1)
}

fn nodedrains(sim: &SimCluster) -> Vec<std::sync::Arc<Value>> {
    sim.state
        .store()
        .list(&Gr::new("maintd.io", "nodedrains"), None)
}

/// Runs one N on `agents` (a runtime of its own for the agents); the
/// simulator runs on `sim_rt`.
fn run(
    sim_rt: &tokio::runtime::Runtime,
    agents: &tokio::runtime::Runtime,
    n: usize,
    pods_per_node: usize,
    idle_secs: u64,
) -> Row {
    let sim = sim_rt.block_on(async {
        SimCluster::start(SimConfig {
            bookmark_interval: Duration::from_secs(60),
            ..SimConfig::default()
        })
        .await
        .expect("sim")
    });
    for crd in [
        maintd::api::crd().unwrap(),
        maintd::api::nodedrain_crd().unwrap(),
    ] {
        create(&sim, &Gr::crds(), None, serde_json::to_value(crd).unwrap());
    }
    create(
        &sim,
        &Gr::namespaces(),
        None,
        json!({"metadata": {"name": "maintd"}}),
    );
    let orders: usize = std::env::var("MAINTD_SCALE_ORDERS")
        .ok()
        .map(|v| {
            v.parse()
                .ok()
                .filter(|k| (1..=100).contains(k))
                .expect("MAINTD_SCALE_ORDERS: a number of drain orders, 1 to 100")
        })
        .unwrap_or(1);
    for i in 0..n {
        let node = format!("node-{i:05}");
        let mut labels = json!({"pool": "all", "kubernetes.io/hostname": node});
        if orders > 1 {
            labels["maintd.io/drain-order"] = json!(drain_order(i, n, orders).to_string());
        }
        create(
            &sim,
            &Gr::new("", "nodes"),
            None,
            json!({"metadata": {"name": node, "labels": labels},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        for p in 0..pods_per_node {
            create(
                &sim,
                &Gr::new("", "pods"),
                Some("default"),
                json!({"metadata": {"name": format!("app-{i:05}-{p}"), "namespace": "default",
                                    "annotations": {"sim.maintd.io/shutdown-seconds": "0.2"}},
                       "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example/app:1"}]}}),
            );
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let rss_sim = rss_kib();
    let (sim_cpu0, rest_cpu0) = cpu_split();

    let stop = CancellationToken::new();
    // Clients are made in the agents' runtime, where their requests run.
    let _in_agents = agents.enter();
    let mut handles = Vec::new();
    for i in 0..n {
        let node = format!("node-{i:05}");
        let agent = Agent::new(
            Config::for_node(&node, std::env::temp_dir().join("maintd-scale-none")),
            maintd::testbed::agent_client(&sim, &node),
        );
        handles.push((node, agent.clone()));
        agents.spawn(agent.run(stop.clone()));
    }
    // Settle: every agent has listed and written its NodeDrain.
    let t = Instant::now();
    let mut said = Instant::now();
    while nodedrains(&sim).len() < n && t.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(200));
        if said.elapsed() > Duration::from_secs(10) {
            let have = nodedrains(&sim);
            eprintln!("  N={n}: {} of {n} agents reported", have.len());
            for (node, agent) in &handles {
                if !have.iter().any(|d| d["metadata"]["name"] == node.as_str()) {
                    let views: Vec<String> = agent
                        .views()
                        .iter()
                        .map(|(name, v)| {
                            format!("{name}: synced {} error {:?}", v.synced(), v.last_error())
                        })
                        .collect();
                    eprintln!(
                        "    {node}: {:?}; {}",
                        agent.progress().status().phase,
                        views.join("; ")
                    );
                }
            }
            said = Instant::now();
        }
    }
    std::thread::sleep(Duration::from_secs(2));
    let rss_with_agents = rss_kib();

    let before = Usage::of_agents(&sim, n);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_secs));
    let idle = Usage::of_agents(&sim, n).since(before);
    let idle_elapsed = t.elapsed().as_secs_f64();

    // The rolling reboot: one object over every node, a tenth at a time,
    // each turn ending with the node's reboot.
    let before = Usage::of_agents(&sim, n);
    let t = Instant::now();
    let nms = Gr::new("maintd.io", "nodemaintenances");
    let slots = (n / 10).max(1);
    let ahead: usize = std::env::var("MAINTD_SCALE_CORDON_AHEAD")
        .ok()
        .map(|v| {
            v.parse()
                .ok()
                .filter(|a| *a <= 1000)
                .expect("MAINTD_SCALE_CORDON_AHEAD: a number of nodes, 0 to 1000")
        })
        .unwrap_or(0);
    let reboot_ms: u64 = std::env::var("MAINTD_SCALE_REBOOT_MS")
        .ok()
        .map(|v| {
            v.parse()
                .ok()
                .filter(|ms| (10..=600_000).contains(ms))
                .expect("MAINTD_SCALE_REBOOT_MS: milliseconds, 10 to 600000")
        })
        .unwrap_or(DEFAULT_REBOOT_MS);
    create(
        &sim,
        &nms,
        None,
        json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
               "metadata": {"name": "rolling"},
               "spec": {"nodeSelector": {"matchLabels": {"pool": "all"}}, "stage": "Drain",
                        "maxConcurrentDrains": slots,
                        "cordonAhead": ahead,
                        "waitForReboot": {"timeoutSeconds": 600}}}),
    );
    let uid = sim
        .state
        .store()
        .get(&nms, "", "rolling")
        .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_string))
        .expect("the NodeMaintenance has a uid");
    let mut watch = Watch::new(t);
    let mut largest_nm = 0usize;
    let mut largest_nd = 0usize;
    let mut polls = 0u64;
    let deadline = Instant::now() + Duration::from_secs(1200);
    let timed_out = loop {
        let all = nodedrains(&sim);
        if polls.is_multiple_of(4) {
            if let Some(o) = sim.state.store().get(&nms, "", "rolling") {
                largest_nm = largest_nm.max(serde_json::to_vec(&*o).map(|v| v.len()).unwrap_or(0));
            }
            largest_nd = all
                .iter()
                .map(|o| serde_json::to_vec(&**o).map(|v| v.len()).unwrap_or(0))
                .max()
                .unwrap_or(0)
                .max(largest_nd);
        }
        polls += 1;
        let over = watch.look(&sim, &all, &uid, |node| {
            // The updater's part: the node is drained and holds its turn
            // at the boot it has now, so it reboots.
            let _in_sim = sim_rt.enter();
            sim.reboot_node(node, Duration::from_millis(reboot_ms))
                .is_some()
        });
        if over {
            break false;
        }
        if Instant::now() > deadline {
            break true;
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  N={n}: {} of {n} turns done, {} unschedulable now, {} rebooted, after {:.0}s",
                watch.done_count(),
                watch.unschedulable_now,
                watch.rebooted_count(),
                t.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if timed_out {
        panic!(
            "N={n}: THE ROLLING REBOOT DID NOT FINISH within 1200 s: {} of {n} turns done, {} rebooted, {} unschedulable now, {} never seen cordoned; slot holders now: {:?}. No figures for a dead rollout.",
            watch.done_count(),
            watch.rebooted_count(),
            watch.unschedulable_now,
            n - watch
                .nodes
                .values()
                .filter(|s| !s.cordons.is_empty())
                .count(),
            watch.holders_now()
        );
    }
    let done = watch.done_count();
    let rollout = watch.summary(slots, ahead, reboot_ms, orders);
    rollout.check(n);
    let drain_secs = t.elapsed().as_secs_f64();
    // The last aggregates and NodeDrain writes land within a few seconds.
    std::thread::sleep(Duration::from_secs(6));
    if let Some(o) = sim.state.store().get(&nms, "", "rolling") {
        largest_nm = largest_nm.max(serde_json::to_vec(&*o).map(|v| v.len()).unwrap_or(0));
    }
    let drain = Usage::of_agents(&sim, n).since(before);
    let (sim_cpu1, rest_cpu1) = cpu_split();
    stop.cancel();
    std::thread::sleep(Duration::from_secs(1));
    Row {
        n,
        pods_per_node,
        idle,
        idle_secs: idle_elapsed,
        drain,
        drain_secs,
        done,
        rollout,
        largest_nm,
        largest_nd,
        sim_cpu: sim_cpu1 - sim_cpu0,
        agents_cpu: rest_cpu1 - rest_cpu0,
        rss_sim_kib: rss_sim,
        rss_with_agents_kib: rss_with_agents,
    }
}

fn print_row(r: &Row) {
    println!(
        "N={:5} pods/node={}  idle {:.0}s: {:.2} req/agent/min, {:.1} events, {:.0} B/agent  |  rolling reboot {:.1}s ({} of {} turns done): {:.1} req/agent, {:.1} events, {:.0} B/agent  |  largest NodeMaintenance {} B, NodeDrain {} B  |  CPU: simulator {:.1}s, agents {:.1}s ({:.1} ms/agent)  |  RSS: simulator and objects {} MiB, with agents {} MiB ({:.0} KiB/agent)",
        r.n,
        r.pods_per_node,
        r.idle_secs,
        r.idle.requests * 60.0 / r.idle_secs,
        r.idle.events,
        r.idle.bytes,
        r.drain_secs,
        r.done,
        r.n,
        r.drain.requests,
        r.drain.events,
        r.drain.bytes,
        r.largest_nm,
        r.largest_nd,
        r.sim_cpu,
        r.agents_cpu,
        r.agents_cpu * 1000.0 / r.n as f64,
        r.rss_sim_kib / 1024,
        r.rss_with_agents_kib / 1024,
        r.rss_with_agents_kib.saturating_sub(r.rss_sim_kib) as f64 / r.n as f64,
    );
    let ro = &r.rollout;
    println!(
        "    rolling reboot: wall time {:.1} s (first cordon to last uncordon), ideal {:.1} s ({:.1} s of turns in all ÷ {} slots; {:.1} s unschedulable): {:.2}x; most nodes unschedulable at once {} of {} slots + {} cordoned ahead; nodes cordoned more than once {}; looks every {:.0} ms (at most {:.0} ms); reboots {} ms NotReady; drain orders {} (nodes out of order {})",
        ro.wall_secs,
        ro.ideal_secs(),
        ro.turn_secs,
        ro.slots,
        ro.unschedulable_secs,
        ro.ratio(),
        ro.most_unschedulable,
        ro.slots,
        ro.ahead,
        ro.cordoned_again,
        ro.look_mean_ms,
        ro.look_max_ms,
        ro.reboot_ms,
        ro.orders.max(1),
        ro.out_of_order,
    );
    println!("    a turn, step by step (s: mean / p50 / p90 / max):");
    for s in &ro.steps {
        println!(
            "      {:<42} {:>6.2} / {:>6.2} / {:>6.2} / {:>6.2}  ({} seen)",
            s.what, s.mean, s.p50, s.p90, s.max, s.count
        );
    }
    let idle_total: f64 = ro.idle.iter().map(|(_, v)| v).sum();
    println!(
        "    slot time with no node taking its turn: {:.1} slot-s = {:.2}x of the ideal (each slot held by {} to {} nodes):",
        idle_total,
        idle_total / ro.turn_secs.max(f64::MIN_POSITIVE),
        ro.holds_per_slot.0,
        ro.holds_per_slot.1
    );
    for (what, v) in &ro.idle {
        println!(
            "      {what:<42} {v:>8.1} slot-s  +{:.3}x",
            v / ro.turn_secs.max(f64::MIN_POSITIVE)
        );
    }
    println!(
        "    drain bytes per agent by resource: {}",
        r.drain.breakdown()
    );
    let mut calls: Vec<(&String, &f64)> =
        r.drain.calls.iter().filter(|(_, c)| **c >= 0.05).collect();
    calls.sort_by(|a, b| b.1.total_cmp(a.1));
    println!(
        "    drain requests per agent by kind: {}",
        calls
            .iter()
            .map(|(k, c)| format!("{k} {c:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let conflicts: Vec<String> = r
        .drain
        .conflicts
        .iter()
        .filter(|(_, c)| **c > 0.0)
        .map(|(p, c)| format!("{p} {c:.2}"))
        .collect();
    println!(
        "    drain conflicts (409) per agent: {}",
        if conflicts.is_empty() {
            "none".to_string()
        } else {
            conflicts.join(", ")
        }
    );
}

fn verdict(ok: bool) -> &'static str {
    if ok { "holds" } else { "DOES NOT HOLD" }
}

/// One N in a process of its own, so its memory and CPU figures are its
/// own: the bench runs itself with `MAINTD_SCALE_ONE=N,PODS,IDLE` and reads
/// the row it prints last.
fn run_apart(n: usize, pods: usize, idle: u64) -> Row {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::process::Command::new(exe)
        .env("MAINTD_SCALE_ONE", format!("{n},{pods},{idle}"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the bench runs itself");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text.lines().rev().find_map(|l| {
        l.strip_prefix("ROW ")
            .and_then(|j| serde_json::from_str(j).ok())
    });
    row.unwrap_or_else(|| panic!("N={n} printed no row:\n{text}"))
}

/// The child's part: one N, its row printed as JSON.
fn run_one(spec: &str) {
    let v: Vec<u64> = spec.split(',').filter_map(|s| s.parse().ok()).collect();
    let [n, pods, idle] = v[..] else {
        panic!("MAINTD_SCALE_ONE={spec}: want N,PODS,IDLE");
    };
    let sim_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(SIM_THREAD)
        .enable_all()
        .build()
        .expect("the simulator's runtime");
    let agents = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("agents")
        .enable_all()
        .build()
        .expect("the agents' runtime");
    let row = run(&sim_rt, &agents, n as usize, pods as usize, idle);
    println!("ROW {}", serde_json::to_string(&row).expect("a row"));
}

fn main() {
    if let Ok(spec) = std::env::var("MAINTD_SCALE_ONE") {
        run_one(&spec);
        return;
    }
    let ns: Vec<usize> = std::env::var("MAINTD_SCALE_NODES")
        .unwrap_or_else(|_| "10,100,1000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let idle: u64 = std::env::var("MAINTD_SCALE_IDLE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let pods: usize = std::env::var("MAINTD_SCALE_PODS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rows = Vec::new();
    for &n in &ns {
        let row = run_apart(n, pods, idle);
        row.rollout.check(n);
        print_row(&row);
        rows.push(row);
    }
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    // The smallest N again, with three times the pods: what a pod adds.
    let more = run_apart(first.n, pods * 3, idle.min(10));
    more.rollout.check(more.n);
    print_row(&more);
    let per_pod = (more.drain.requests - first.drain.requests)
        / ((more.pods_per_node - first.pods_per_node) as f64);
    let constant = first.drain.requests - per_pod * first.pods_per_node as f64;

    let idle_ratio = last.idle.bytes / first.idle.bytes.max(1.0);
    let drain_ratio = last.drain.bytes / first.drain.bytes.max(1.0);
    println!();
    println!("N={} against N={}:", last.n, first.n);
    println!(
        "  idle bytes per agent: {:.2}x (at most 1.5x: {})",
        idle_ratio,
        verdict(idle_ratio <= 1.5)
    );
    println!(
        "  rolling-reboot bytes per agent: {:.2}x (at most 1.5x: {})",
        drain_ratio,
        verdict(drain_ratio <= 1.5)
    );
    println!(
        "  largest NodeMaintenance at N={}: {} B (at most 64 KiB: {})",
        last.n,
        last.largest_nm,
        verdict(last.largest_nm <= 64 * 1024)
    );
    println!(
        "  requests per agent in the rolling reboot: {:.2} per pod drained + {:.1} (at most 3 per pod: {})",
        per_pod,
        constant,
        verdict(per_pod <= 3.0)
    );
    let ratio = last.rollout.ratio();
    println!(
        "  rolling reboot wall time against ideal at N={}: {:.2}x (at most 1.1x: {})",
        last.n,
        ratio,
        verdict(ratio <= 1.1)
    );
    for r in &rows {
        println!(
            "  most nodes unschedulable at once at N={}: {} of {} slots + {} cordoned ahead ({})",
            r.n,
            r.rollout.most_unschedulable,
            r.rollout.slots,
            r.rollout.ahead,
            verdict(r.rollout.most_unschedulable <= r.rollout.slots + r.rollout.ahead)
        );
    }
    println!(
        "  simulator CPU per agent: {:.1} ms at N={}, {:.1} ms at N={}",
        first.sim_cpu * 1000.0 / first.n as f64,
        first.n,
        last.sim_cpu * 1000.0 / last.n as f64,
        last.n
    );
}
