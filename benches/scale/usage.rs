//! What the agents sent and received, per agent: from the simulator's
//! audit, or from the counters around each agent's client on the real API
//! server (the same kinds, counted the same way: requests by kind and
//! collection, answers' bytes by resource, watch events).

use std::collections::BTreeMap;

use maintd_sim::SimCluster;

use crate::counting::{Counts, call_of, collection_of};

/// Agent requests and what they received, per agent.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub requests: f64,
    pub events: f64,
    pub bytes: f64,
    /// Bytes per agent by resource (the plural in the path).
    pub by_resource: BTreeMap<String, f64>,
    /// Requests per agent answered 409 Conflict (a write based on a
    /// version that had moved on), by path.
    pub conflicts: BTreeMap<String, f64>,
    /// Requests per agent by kind and collection: `LIST pods`, `WATCH
    /// leases`, `PATCH nodes/status`.
    pub calls: BTreeMap<String, f64>,
    /// Requests per agent answered 429 Too Many Requests.
    #[serde(default)]
    pub throttled: f64,
    /// The same, by kind and collection (the real API server's only).
    #[serde(default)]
    pub throttled_by: BTreeMap<String, f64>,
}

fn per_agent<K: Clone + Ord>(m: &BTreeMap<K, u64>, n: usize) -> BTreeMap<K, f64> {
    m.iter()
        .map(|(k, v)| (k.clone(), *v as f64 / n as f64))
        .collect()
}

impl Usage {
    /// Everything the agents (User-Agent `maintd/…`) did so far, from the
    /// simulator's audit.
    pub fn of_agents(sim: &SimCluster, n: usize) -> Usage {
        let all = sim.state.audit.requests();
        let mut counts = Counts::default();
        for r in all.iter().filter(|r| r.user_agent.starts_with("maintd/")) {
            match r.code {
                409 => *counts.conflicts.entry(collection_of(&r.path)).or_insert(0) += 1,
                429 => counts.throttled += 1,
                _ => {}
            }
            *counts
                .calls
                .entry(call_of(&r.method, &r.path, r.watch))
                .or_insert(0) += 1;
        }
        for (ua, s) in sim.state.audit.sent() {
            if ua.starts_with("maintd/") {
                counts.events += s.watch_events;
            }
        }
        for ((ua, resource), s) in sim.state.audit.sent_by_resource() {
            if ua.starts_with("maintd/") {
                *counts.bytes.entry(resource).or_insert(0) += s.bytes;
            }
        }
        Usage::of_counts(&counts, n)
    }

    /// What N agents' clients counted, added up, per agent.
    pub fn of_counts(c: &Counts, n: usize) -> Usage {
        let n = n.max(1);
        Usage {
            requests: c.requests() as f64 / n as f64,
            events: c.events as f64 / n as f64,
            bytes: c.total_bytes() as f64 / n as f64,
            by_resource: per_agent(&c.bytes, n),
            conflicts: per_agent(&c.conflicts, n),
            calls: per_agent(&c.calls, n),
            throttled: c.throttled as f64 / n as f64,
            throttled_by: per_agent(&c.throttled_by, n),
        }
    }

    pub fn since(self, before: Usage) -> Usage {
        let minus = |mut now: BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            for (k, v) in then {
                *now.entry(k.clone()).or_insert(0.0) -= v;
            }
            now.retain(|_, v| v.abs() > 1e-9);
            now
        };
        Usage {
            requests: self.requests - before.requests,
            events: self.events - before.events,
            bytes: self.bytes - before.bytes,
            by_resource: minus(self.by_resource, &before.by_resource),
            conflicts: minus(self.conflicts, &before.conflicts),
            calls: minus(self.calls, &before.calls),
            throttled: self.throttled - before.throttled,
            throttled_by: minus(self.throttled_by, &before.throttled_by),
        }
    }

    /// The resources that made up most of the bytes, largest first.
    pub fn breakdown(&self) -> String {
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

    /// The requests by kind, most first (those of at least 0.05 an agent).
    pub fn by_kind(&self) -> String {
        let mut calls: Vec<(&String, &f64)> =
            self.calls.iter().filter(|(_, c)| **c >= 0.05).collect();
        calls.sort_by(|a, b| b.1.total_cmp(a.1));
        calls
            .iter()
            .map(|(k, c)| format!("{k} {c:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Requests of any kind but a watch (per agent).
    pub fn not_watches(&self) -> f64 {
        self.calls
            .iter()
            .filter(|(k, _)| !k.starts_with("WATCH "))
            .map(|(_, v)| v)
            .sum()
    }
}
