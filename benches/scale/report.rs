//! The simulator's row, as the bench has always printed it, and the
//! verdicts of the simulator's run.

use super::rollout::Rollout;
use super::usage::Usage;

/// One N on the simulator.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Row {
    pub n: usize,
    pub pods_per_node: usize,
    pub idle: Usage,
    pub idle_secs: f64,
    pub drain: Usage,
    pub drain_secs: f64,
    /// Nodes whose turn of the rolling reboot is done.
    pub done: usize,
    pub rollout: Rollout,
    pub largest_nm: usize,
    pub largest_nd: usize,
    /// The simulator's CPU seconds from the agents' start to the end.
    pub sim_cpu: f64,
    pub agents_cpu: f64,
    pub rss_sim_kib: u64,
    pub rss_with_agents_kib: u64,
    /// Writes to the simulator's store (its resourceVersions) while idle
    /// and over the rolling reboot: what etcd would have written.
    #[serde(default)]
    pub idle_writes: u64,
    #[serde(default)]
    pub drain_writes: u64,
    /// The simulator's CPU seconds while idle and over the rolling reboot.
    #[serde(default)]
    pub sim_cpu_idle: f64,
    #[serde(default)]
    pub sim_cpu_drain: f64,
}

pub fn print_row(r: &Row) {
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
    r.rollout.print();
    print_usage_detail(&r.drain);
}

/// Where an agent's rolling-reboot bytes and requests went, and its 409s.
pub fn print_usage_detail(u: &Usage) {
    println!("    drain bytes per agent by resource: {}", u.breakdown());
    println!("    drain requests per agent by kind: {}", u.by_kind());
    let listed = |m: &std::collections::BTreeMap<String, f64>| {
        let mut v: Vec<(&String, &f64)> = m.iter().filter(|(_, c)| **c > 0.0).collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        let v: Vec<String> = v.iter().map(|(p, c)| format!("{p} {c:.2}")).collect();
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    println!(
        "    drain conflicts (409) per agent: {}; refused 429: {:.2} ({})",
        listed(&u.conflicts),
        u.throttled,
        listed(&u.throttled_by)
    );
}

pub fn verdict(ok: bool) -> &'static str {
    if ok { "holds" } else { "DOES NOT HOLD" }
}

/// The simulator run's verdicts: `rows` in order of N, `more` the smallest
/// N again with more pods a node.
pub fn sim_verdicts(rows: &[Row], more: &Row) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
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
    for r in rows {
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
