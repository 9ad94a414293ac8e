//! The real control plane's figures, per N, with the simulator's for the
//! same scenario beside them (a `*` marks a difference of more than 25 %),
//! and the verdicts of issue 40's goals.

use super::real::RealRow;
use super::report::{Row, print_usage_detail, verdict};

/// One line of the table: the real figure, the simulator's, their ratio.
fn line(label: &str, real: f64, sim: Option<f64>, digits: usize) {
    // No "-0.00" for a difference of nothing.
    let (real, sim) = (real + 0.0, sim.map(|s| s + 0.0));
    let sim_s = sim.map_or("-".to_string(), |s| format!("{s:.digits$}"));
    let (ratio, flag) = match sim {
        Some(s) if s.abs() > 1e-9 && real.abs() > 1e-9 => {
            let r = real / s;
            (
                format!("{r:.2}"),
                if !(0.8..=1.25).contains(&r) { " *" } else { "" },
            )
        }
        Some(s) if (s.abs() > 1e-9) != (real.abs() > 1e-9) => ("-".to_string(), " *"),
        _ => ("-".to_string(), ""),
    };
    println!("    {label:<62} {real:>12.digits$} {sim_s:>12} {ratio:>7}{flag}");
}

/// API server CPU, ms a minute per agent, above the same cluster without agents.
fn idle_cpu_per_agent(r: &RealRow) -> f64 {
    (r.idle.apiserver_cpu_per_min() - r.base.apiserver_cpu_per_min()) * 1000.0 / r.n as f64
}

pub fn print_real(r: &RealRow, sim: Option<&Row>) {
    let n = r.n as f64;
    println!();
    println!(
        "N={} on the real control plane: {} bare pods a node + a DaemonSet; deploy/{}; cluster up and Ready in {:.0} s, agents up in {:.0} s; load average at start {}, at end {}",
        r.n,
        r.pods_per_node,
        if r.api_priority {
            " with deploy/api-priority/ (maintd's own priority level)"
        } else {
            " (agents in workload-low)"
        },
        r.setup_secs,
        r.agents_start_secs,
        r.load_start,
        r.load_end
    );
    println!(
        "    {:<62} {:>12} {:>12} {:>7}",
        "", "real", "simulator", "ratio"
    );
    let per_min = |x: f64, secs: f64| x * 60.0 / secs.max(1e-9);
    let s_idle = |f: &dyn Fn(&Row) -> f64| sim.map(|s| per_min(f(s), s.idle_secs));
    println!("  idle ({:.0} s), per agent:", r.idle.secs);
    line(
        "requests a minute",
        per_min(r.idle_usage.requests, r.idle.secs),
        s_idle(&|s| s.idle.requests),
        2,
    );
    line(
        "  of which not watches, a minute",
        per_min(r.idle_usage.not_watches(), r.idle.secs),
        s_idle(&|s| s.idle.not_watches()),
        2,
    );
    line(
        "watch events a minute",
        per_min(r.idle_usage.events, r.idle.secs),
        s_idle(&|s| s.idle.events),
        2,
    );
    line(
        "bytes received a minute",
        per_min(r.idle_usage.bytes, r.idle.secs),
        s_idle(&|s| s.idle.bytes),
        0,
    );
    line("watches open", r.watches_idle, None, 2);
    line(
        "TCP connections (this process's sockets per agent)",
        r.agent_sockets as f64 / n,
        None,
        2,
    );
    line(
        "429s received",
        r.idle_usage.throttled,
        sim.map(|s| s.idle.throttled),
        2,
    );
    println!("  rolling reboot, per agent:");
    let u = &r.drain_usage;
    line("requests", u.requests, sim.map(|s| s.drain.requests), 1);
    line("watch events", u.events, sim.map(|s| s.drain.events), 1);
    line("bytes received", u.bytes, sim.map(|s| s.drain.bytes), 0);
    line(
        "409s received",
        u.conflicts.values().sum(),
        sim.map(|s| s.drain.conflicts.values().sum()),
        2,
    );
    line(
        "429s received",
        u.throttled,
        sim.map(|s| s.drain.throttled),
        2,
    );
    line(
        "most watches one agent had open at once",
        r.watches_most as f64,
        None,
        0,
    );
    println!("  API server (the simulator: its own thread), divided by N:");
    line(
        "idle: CPU ms a minute per agent, above no agents",
        idle_cpu_per_agent(r),
        sim.map(|s| per_min(s.sim_cpu_idle, s.idle_secs) * 1000.0 / n),
        3,
    );
    line(
        "  (no agents: CPU ms a minute per node)",
        r.base.apiserver_cpu_per_min() * 1000.0 / n,
        None,
        3,
    );
    println!(
        "      API server CPU s a minute, halves of each window: no agents {:.2} / {:.2}, with agents {:.2} / {:.2}",
        r.base_halves.0, r.base_halves.1, r.idle_halves.0, r.idle_halves.1
    );
    line(
        "rolling reboot: CPU ms per node",
        r.drain.apiserver_cpu * 1000.0 / n,
        sim.map(|s| s.sim_cpu_drain * 1000.0 / n),
        1,
    );
    let above = r.drain.apiserver_cpu - r.base.apiserver_cpu / r.base.secs.max(1e-9) * r.drain.secs;
    line(
        "  above the same time without agents",
        above * 1000.0 / n,
        None,
        1,
    );
    line(
        "resident memory KiB per node (with agents)",
        r.idle.apiserver_rss_kib as f64 / n,
        sim.map(|s| s.rss_sim_kib as f64 / n),
        1,
    );
    line(
        "  of which the agents add",
        (r.idle.apiserver_rss_kib as f64 - r.base.apiserver_rss_kib as f64) / n,
        None,
        1,
    );
    line(
        "open files per agent",
        (r.idle.apiserver_open_files as f64 - r.base.apiserver_open_files as f64) / n,
        None,
        2,
    );
    println!("  etcd (the simulator: its store's writes), divided by N:");
    line(
        "idle: writes a minute per agent, above no agents",
        (r.idle.writes_per_sec() - r.base.writes_per_sec()) * 60.0 / n,
        sim.map(|s| per_min(s.idle_writes as f64, s.idle_secs) / n),
        3,
    );
    line(
        "  (no agents: writes a minute per node)",
        r.base.writes_per_sec() * 60.0 / n,
        None,
        2,
    );
    line(
        "rolling reboot: writes per node",
        r.drain.etcd_writes / n,
        sim.map(|s| s.drain_writes as f64 / n),
        1,
    );
    line(
        "database bytes per node (end)",
        r.drain.etcd_db_bytes / n,
        None,
        0,
    );
    line(
        "  grown since before the agents, per node",
        (r.drain.etcd_db_bytes - r.base.etcd_db_bytes) / n,
        None,
        0,
    );
    println!("  the rest of the control plane in the rolling reboot, CPU ms per node:");
    line("etcd", r.drain.etcd_cpu * 1000.0 / n, None, 1);
    line(
        "kube-controller-manager",
        r.drain.kcm_cpu * 1000.0 / n,
        None,
        1,
    );
    line(
        "kube-scheduler",
        r.drain.scheduler_cpu * 1000.0 / n,
        None,
        1,
    );
    line(
        "kwok (the fake kubelets)",
        r.drain.kwok_cpu * 1000.0 / n,
        None,
        1,
    );
    line(
        "the agents (this process)",
        r.agents_cpu_drain * 1000.0 / n,
        sim.map(|s| s.agents_cpu * 1000.0 / n),
        1,
    );
    line(
        "the agents' memory, KiB per agent",
        r.rss_with_agents_kib
            .saturating_sub(r.rss_before_agents_kib) as f64
            / n,
        sim.map(|s| s.rss_with_agents_kib.saturating_sub(s.rss_sim_kib) as f64 / n),
        0,
    );
    let (ro, so) = (&r.rollout, sim.map(|s| &s.rollout));
    println!("  rolling reboot through {} slots:", ro.slots);
    line("wall time, s", ro.wall_secs, so.map(|s| s.wall_secs), 1);
    line("ideal, s", ro.ideal_secs(), so.map(|s| s.ideal_secs()), 1);
    line("wall / ideal", ro.ratio(), so.map(|s| s.ratio()), 3);
    line(
        "most nodes unschedulable at once",
        ro.most_unschedulable as f64,
        so.map(|s| s.most_unschedulable as f64),
        0,
    );
    line(
        "largest NodeMaintenance, bytes",
        r.largest_nm as f64,
        sim.map(|s| s.largest_nm as f64),
        0,
    );
    line(
        "largest NodeDrain, bytes",
        r.largest_nd as f64,
        sim.map(|s| s.largest_nd as f64),
        0,
    );
    ro.print();
    print_usage_detail(u);
    println!(
        "    idle requests per agent by kind: {}",
        r.idle_usage.by_kind()
    );
}

/// The goals of issue 40 against the real control plane's rows (in order
/// of N); `stopped` says which N did not fit and why.
pub fn real_verdicts(rows: &[RealRow], stopped: &[(usize, String)]) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    println!();
    println!(
        "Verdicts on the real control plane (N={} against N={}):",
        last.n, first.n
    );
    // An idle agent's requests are its watches made again as they end,
    // each after 30 to 60 minutes (4 watches: about one request in 11
    // minutes): a minute's window at a small N often holds none, and a
    // ratio against nothing means nothing. Idle requests are compared
    // against that rate at least.
    let renewals_per_sec = 4.0 / (45.0 * 60.0);
    for (what, a, b) in [
        (
            "idle requests",
            (first.idle_usage.requests / first.idle.secs).max(renewals_per_sec),
            last.idle_usage.requests / last.idle.secs,
        ),
        (
            "idle bytes",
            first.idle_usage.bytes / first.idle.secs,
            last.idle_usage.bytes / last.idle.secs,
        ),
        (
            "idle watch events",
            first.idle_usage.events / first.idle.secs,
            last.idle_usage.events / last.idle.secs,
        ),
        (
            "rolling-reboot requests",
            first.drain_usage.requests,
            last.drain_usage.requests,
        ),
        (
            "rolling-reboot bytes",
            first.drain_usage.bytes,
            last.drain_usage.bytes,
        ),
        (
            "rolling-reboot watch events",
            first.drain_usage.events,
            last.drain_usage.events,
        ),
    ] {
        let ratio = b / a.max(1e-9);
        println!(
            "  {what} per agent: {ratio:.2}x (at most 1.5x: {})",
            verdict(ratio <= 1.5)
        );
    }
    for r in rows {
        let extra = idle_cpu_per_agent(r);
        // What the machine cannot tell from nothing: how far the API
        // server's CPU moves between two halves of one window, with
        // nothing changing (the larger spread of the two windows).
        let spread = |(a, b): (f64, f64)| (a - b).abs();
        let noise = spread(r.base_halves).max(spread(r.idle_halves)) * 1000.0 / r.n as f64;
        let renewals = r.idle_usage.not_watches() * r.n as f64;
        println!(
            "  N={}: idle API server CPU per agent per minute above an empty cluster with the same nodes: {extra:.3} ms (measurable above {noise:.3} ms: {}); requests other than watches while idle: {renewals:.0} ({})",
            r.n,
            verdict(extra <= noise),
            verdict(renewals < 0.5)
        );
    }
    match rows.iter().find(|r| r.n == 1000) {
        Some(r) => println!(
            "  rolling reboot of 1,000 nodes through {} slots: {:.3}x its ideal (at most 1.1x: {})",
            r.rollout.slots,
            r.rollout.ratio(),
            verdict(r.rollout.ratio() <= 1.1)
        ),
        None => {
            println!("  rolling reboot of 1,000 nodes: not run (MAINTD_SCALE_NODES has no 1000)")
        }
    }
    for r in rows {
        println!(
            "  N={}: most nodes unschedulable at once {} of {} slots ({})",
            r.n,
            r.rollout.most_unschedulable,
            r.rollout.slots,
            verdict(r.rollout.most_unschedulable <= r.rollout.slots + r.rollout.ahead)
        );
    }
    for (n, why) in stopped {
        println!("  N={n} does not fit this machine: {why}");
    }
    println!("  the largest N measured: {}", last.n);
}
