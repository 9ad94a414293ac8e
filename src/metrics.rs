//! Prometheus metrics (prometheus-client), served as OpenMetrics text on
//! `GET /metrics`. They are fed from the drain's progress events and the
//! shutdown lock's status watch by one task the agent starts, so the drain
//! engine knows nothing about them.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::drain::progress::{DrainEvent, EventKind, Phase, PodState, Progress};

/// Every phase, for the one-hot `maintd_drain_phase`.
const PHASES: [Phase; 6] = [
    Phase::Idle,
    Phase::Cordoned,
    Phase::Draining,
    Phase::Blocked,
    Phase::Drained,
    Phase::Failed,
];
use crate::inhibitor::InhibitorStatus;

type Labels = Vec<(String, String)>;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The agent's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    /// 1 while a drain runs or holds the node drained, else 0.
    pub drain_active: Gauge,
    /// Seconds from drain_started to drain_completed.
    pub drain_duration: Histogram,
    /// Evictions by outcome: evicted, blocked (429), error. The drain
    /// reports a blocked or failing pod once per new reason, not on every
    /// retry, so blocked/error count (pod, reason) pairs;
    /// `maintd_eviction_attempts_total` counts every request.
    pub evictions: Family<Labels, Counter>,
    /// Every eviction request sent, retries included.
    pub eviction_attempts: Counter,
    /// Pods of each stage of the current plan not yet gone (no series, and
    /// so no HELP/TYPE lines either, while there is no plan).
    pub pods_remaining: Family<Labels, Gauge>,
    /// 1 while logind's shutdown delay lock is held.
    pub inhibitor_held: Gauge,
    /// logind's InhibitDelayMaxUSec, in seconds.
    pub inhibit_delay_budget: Gauge<f64, AtomicU64>,
    /// Status writes of this agent's own reporting (its NodeDrain, the
    /// Node condition, medik8s status), counted by `report/`.
    pub status_writes: Counter,
    /// NodeMaintenance status writes made as the status writer.
    pub nodemaintenance_status_writes: Counter,
    /// 1 while this agent holds the status-writer Lease.
    pub status_writer: Gauge,
    /// The NodeMaintenance objects this agent sees.
    pub nodemaintenances: Gauge,
    /// 1 for the drain's phase now, 0 for the others.
    pub drain_phase: Family<Labels, Gauge>,
    /// 1 when the agent is configured to hold logind's shutdown lock.
    pub inhibitor_configured: Gauge,
    /// When logind began preparing the shutdown maintd delays (Unix
    /// seconds), 0 when none is.
    pub shutdown_started: Gauge<f64, AtomicU64>,
    /// 1 for what a planned drain waits for now (window, blocking_pods,
    /// alerts, slot), 0 for the others.
    pub waiting: Family<Labels, Gauge>,
    /// Connections open now, by listener (readonly, local, fleetlock).
    pub http_connections: Family<Labels, Gauge>,
    /// Connections closed at once because the listener had its most open.
    pub http_connections_refused: Family<Labels, Counter>,
    /// Notifications (`--notify-url`) by outcome: sent, failed (after its
    /// tries), dropped (the receiver's queue was full).
    pub notifications: Family<Labels, Counter>,
    /// Reboots a drain waited for, by outcome: confirmed (a new boot ID),
    /// overdue (none in time).
    pub reboots: Family<Labels, Counter>,
    /// Pods refused now, by namespace and the budget that refuses them
    /// (empty when the refusal names none); a budget's series stays at 0
    /// once it no longer blocks, until the drain is undone.
    pub pods_blocked: Family<Labels, Gauge>,
    blocked_seen: Mutex<std::collections::BTreeSet<(String, String)>>,
    started: Mutex<Option<Instant>>,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let drain_active = Gauge::default();
        registry.register(
            "maintd_drain_active",
            "Whether this node is being drained or held drained by maintd (1) or not (0)",
            drain_active.clone(),
        );
        let drain_duration = Histogram::new(exponential_buckets(1.0, 2.0, 12));
        registry.register(
            "maintd_drain_duration_seconds",
            "Time from the start of a drain until every pod of its plan was gone",
            drain_duration.clone(),
        );
        let evictions = Family::<Labels, Counter>::default();
        registry.register(
            // The encoder adds the _total suffix of a counter.
            "maintd_evictions",
            "Evictions by outcome: evicted; blocked (429, e.g. a PodDisruptionBudget); queued (waiting its turn behind a budget this drain moves pods through); error; once per pod and new reason",
            evictions.clone(),
        );
        let eviction_attempts = Counter::default();
        registry.register(
            "maintd_eviction_attempts",
            "Eviction requests sent, retries included",
            eviction_attempts.clone(),
        );
        let pods_remaining = Family::<Labels, Gauge>::default();
        registry.register(
            "maintd_pods_remaining",
            "Pods of the current drain plan not yet gone, by 1-based stage number",
            pods_remaining.clone(),
        );
        let inhibitor_held = Gauge::default();
        registry.register(
            "maintd_inhibitor_held",
            "Whether maintd holds logind's shutdown delay lock (1) or not (0)",
            inhibitor_held.clone(),
        );
        let inhibit_delay_budget = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "maintd_inhibit_delay_budget_seconds",
            "logind's InhibitDelayMaxUSec: how long a shutdown waits for maintd",
            inhibit_delay_budget.clone(),
        );
        let status_writes = Counter::default();
        registry.register(
            "maintd_status_writes",
            "Writes of this node's own status: its NodeDrain, the Node condition, medik8s status",
            status_writes.clone(),
        );
        let nodemaintenance_status_writes = Counter::default();
        registry.register(
            "maintd_nodemaintenance_status_writes",
            "NodeMaintenance status (aggregate) writes made by this agent as the status writer",
            nodemaintenance_status_writes.clone(),
        );
        let status_writer = Gauge::default();
        registry.register(
            "maintd_status_writer",
            "Whether this agent holds the maintd-status-writer Lease and writes NodeMaintenance status (1) or not (0)",
            status_writer.clone(),
        );
        let nodemaintenances = Gauge::default();
        registry.register(
            "maintd_nodemaintenances",
            "NodeMaintenance objects this agent sees (whichever nodes they select)",
            nodemaintenances.clone(),
        );
        let drain_phase = Family::<Labels, Gauge>::default();
        registry.register(
            "maintd_drain_phase",
            "The drain's phase: 1 for the current one (Idle, Cordoned, Draining, Blocked, Drained, Failed), 0 for the others",
            drain_phase.clone(),
        );
        for phase in PHASES {
            drain_phase
                .get_or_create(&vec![("phase".into(), format!("{phase:?}"))])
                .set(i64::from(phase == Phase::Idle));
        }
        let inhibitor_configured = Gauge::default();
        registry.register(
            "maintd_inhibitor_configured",
            "Whether maintd is set to hold logind's shutdown delay lock (1) or not (0)",
            inhibitor_configured.clone(),
        );
        let shutdown_started = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "maintd_shutdown_started_timestamp_seconds",
            "When logind began preparing the shutdown maintd delays (Unix time), 0 when none is",
            shutdown_started.clone(),
        );
        let waiting = Family::<Labels, Gauge>::default();
        registry.register(
            "maintd_planned_drain_waiting",
            "Whether a planned drain of this node waits (1) for this reason: window, blocking_pods, alerts or slot",
            waiting.clone(),
        );
        let http_connections = Family::<Labels, Gauge>::default();
        registry.register(
            "maintd_http_connections",
            "Connections open now on each of maintd's listeners (readonly, local, fleetlock)",
            http_connections.clone(),
        );
        let http_connections_refused = Family::<Labels, Counter>::default();
        registry.register(
            "maintd_http_connections_refused",
            "Connections closed at once because their listener had as many open as it serves",
            http_connections_refused.clone(),
        );
        let notifications = Family::<Labels, Counter>::default();
        registry.register(
            "maintd_notifications",
            "Notifications to --notify-url receivers by outcome: sent, failed (after every try), dropped (the receiver was too far behind)",
            notifications.clone(),
        );
        for outcome in ["sent", "failed", "dropped"] {
            notifications
                .get_or_create(&vec![("outcome".into(), outcome.into())])
                .inc_by(0);
        }
        let reboots = Family::<Labels, Counter>::default();
        registry.register(
            "maintd_reboots",
            "Reboots a drain waited for (a rolling maintenance's turn, a FleetLock slot), by outcome: confirmed (the node booted again), overdue (it did not in time)",
            reboots.clone(),
        );
        for outcome in ["confirmed", "overdue"] {
            reboots
                .get_or_create(&vec![("outcome".into(), outcome.into())])
                .inc_by(0);
        }
        let pods_blocked = Family::<Labels, Gauge>::default();
        registry.register(
            "maintd_pods_blocked",
            "Pods of the drain refused now, by namespace and the PodDisruptionBudget that refuses them (budget empty when the refusal names none)",
            pods_blocked.clone(),
        );
        for kind in crate::policy::HoldKind::ALL {
            waiting
                .get_or_create(&vec![("reason".into(), kind.label().into())])
                .set(0);
        }
        let build_info = Family::<Labels, Gauge>::default();
        build_info
            .get_or_create(&vec![(
                "version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )])
            .set(1);
        registry.register(
            "maintd_build_info",
            "The maintd build; always 1",
            build_info,
        );
        for outcome in ["evicted", "blocked", "queued", "error"] {
            let _ = evictions.get_or_create(&vec![("outcome".into(), outcome.into())]);
        }
        Arc::new(Metrics {
            registry,
            drain_active,
            drain_duration,
            evictions,
            eviction_attempts,
            pods_remaining,
            inhibitor_held,
            inhibit_delay_budget,
            status_writes,
            nodemaintenance_status_writes,
            status_writer,
            nodemaintenances,
            drain_phase,
            inhibitor_configured,
            shutdown_started,
            waiting,
            http_connections,
            http_connections_refused,
            notifications,
            reboots,
            pods_blocked,
            blocked_seen: Mutex::default(),
            started: Mutex::new(None),
        })
    }

    /// The metrics as OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an empty answer would show it.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Applies one progress event.
    pub fn on_event(&self, ev: &DrainEvent, progress: &Progress) {
        let outcome = |o: &str| {
            self.evictions
                .get_or_create(&vec![("outcome".into(), o.into())])
                .inc();
        };
        match ev.event {
            EventKind::DrainStarted => {
                self.forget_blocked();
                self.drain_active.set(1);
                *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            }
            EventKind::DrainCompleted => {
                if let Some(t) = self
                    .started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                {
                    self.drain_duration.observe(t.elapsed().as_secs_f64());
                }
            }
            EventKind::DrainCancelled | EventKind::UndoCompleted => {
                self.forget_blocked();
                self.drain_active.set(0);
                self.started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
            }
            EventKind::PodEvicting => {
                self.eviction_attempts.inc();
            }
            EventKind::PodEvicted => outcome("evicted"),
            EventKind::PodBlocked => outcome("blocked"),
            EventKind::PodQueued => outcome("queued"),
            EventKind::RebootConfirmed | EventKind::RebootOverdue => {
                let o = if ev.event == EventKind::RebootConfirmed {
                    "confirmed"
                } else {
                    "overdue"
                };
                self.reboots
                    .get_or_create(&vec![("outcome".into(), o.into())])
                    .inc();
            }
            EventKind::PodError => outcome("error"),
            _ => {}
        }
        self.set_remaining(progress);
    }

    /// Pods remaining per stage, from the status snapshot. Stages of an
    /// older plan are dropped so they do not linger as stale series.
    fn set_remaining(&self, progress: &Progress) {
        let st = progress.status();
        for phase in PHASES {
            self.drain_phase
                .get_or_create(&vec![("phase".into(), format!("{phase:?}"))])
                .set(i64::from(phase == st.phase));
        }
        for kind in crate::policy::HoldKind::ALL {
            self.waiting
                .get_or_create(&vec![("reason".into(), kind.label().into())])
                .set(i64::from(st.waiting_for == Some(kind)));
        }
        self.set_blocked(&st.blockers);
        self.pods_remaining.clear();
        for s in &st.stages {
            let left = s.pods.iter().filter(|p| p.state != PodState::Gone).count();
            self.pods_remaining
                .get_or_create(&vec![("stage".into(), s.stage.to_string())])
                .set(left as i64);
        }
    }

    /// Blocked pods by (namespace, budget), from the status' blockers.
    fn set_blocked(&self, blockers: &[crate::drain::progress::Blocker]) {
        let mut now = std::collections::BTreeMap::<(String, String), i64>::new();
        for b in blockers {
            let budget = crate::drain::executor::blocking_budget(&b.reason).unwrap_or_default();
            *now.entry((b.namespace.clone(), budget.to_string()))
                .or_default() += 1;
        }
        let mut seen = self.blocked_seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.extend(now.keys().cloned());
        for key in seen.iter() {
            let labels = vec![
                ("namespace".into(), key.0.clone()),
                ("budget".into(), key.1.clone()),
            ];
            self.pods_blocked
                .get_or_create(&labels)
                .set(now.get(key).copied().unwrap_or(0));
        }
    }

    /// A new drain (or none) starts with no blocked series.
    fn forget_blocked(&self) {
        self.blocked_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.pods_blocked.clear();
    }

    fn on_inhibitor(&self, st: &InhibitorStatus) {
        self.inhibitor_held.set(i64::from(st.held));
        let started = self.shutdown_started.get();
        if st.preparing && started == 0.0 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            self.shutdown_started.set(now.as_secs_f64());
        } else if !st.preparing && started != 0.0 {
            self.shutdown_started.set(0.0);
        }
        if let Some(b) = st.budget {
            self.inhibit_delay_budget.set(b.as_secs_f64());
        }
    }

    /// Feeds the metrics until `stop`.
    pub async fn feed(
        self: Arc<Self>,
        progress: Progress,
        mut inhibitor: Option<watch::Receiver<InhibitorStatus>>,
        stop: CancellationToken,
    ) {
        let mut events = progress.subscribe();
        if let Some(i) = &inhibitor {
            self.inhibitor_configured.set(1);
            self.on_inhibitor(&i.borrow());
        }
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ev) => self.on_event(&ev, &progress),
                    // Missed events only cost counter precision; the gauges
                    // are re-read from the snapshot.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.set_remaining(&progress),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                r = async {
                    match inhibitor.as_mut() {
                        Some(i) => i.changed().await,
                        None => std::future::pending().await,
                    }
                } => match (r, inhibitor.as_mut()) {
                    (Ok(()), Some(i)) => self.on_inhibitor(&i.borrow_and_update()),
                    _ => inhibitor = None,
                },
                _ = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_metric_with_its_conventional_name() {
        let m = Metrics::new();
        let p = Progress::new("node-a");
        m.on_event(&p.event(EventKind::DrainStarted), &p);
        m.on_event(&p.event(EventKind::PodBlocked), &p);
        m.on_event(&p.event(EventKind::DrainCompleted), &p);
        let text = m.encode();
        for name in [
            "maintd_drain_active 1",
            "maintd_drain_duration_seconds_count 1",
            "maintd_evictions_total{outcome=\"blocked\"} 1",
            "maintd_evictions_total{outcome=\"evicted\"} 0",
            "maintd_inhibitor_held 0",
            "# TYPE maintd_inhibit_delay_budget_seconds gauge",
            "maintd_status_writes_total 0",
            "maintd_eviction_attempts_total 0",
            "maintd_build_info{version=",
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
    }

    #[test]
    fn the_phase_and_a_shutdown_under_way_are_what_alerts_read() {
        let m = Metrics::new();
        let p = Progress::new("node-a");
        assert!(m.encode().contains("maintd_drain_phase{phase=\"Idle\"} 1"));
        p.update(|st| st.phase = Phase::Blocked);
        m.on_event(&p.event(EventKind::PodBlocked), &p);
        let text = m.encode();
        assert!(
            text.contains("maintd_drain_phase{phase=\"Blocked\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("maintd_drain_phase{phase=\"Idle\"} 0"),
            "{text}"
        );

        let mut st = InhibitorStatus {
            held: true,
            preparing: true,
            budget: Some(std::time::Duration::from_secs(90)),
            token: "t".into(),
            competing: vec![],
            last_error: None,
        };
        m.on_inhibitor(&st);
        let started = m.shutdown_started.get();
        assert!(started > 1.0e9, "a Unix time: {started}");
        m.on_inhibitor(&st);
        assert_eq!(m.shutdown_started.get(), started, "kept while it goes on");
        st.preparing = false;
        m.on_inhibitor(&st);
        assert_eq!(m.shutdown_started.get(), 0.0, "none once cancelled");
    }

    #[test]
    fn blocked_pods_are_counted_by_the_budget_that_refuses_them() {
        use crate::drain::progress::Blocker;
        let m = Metrics::new();
        let p = Progress::new("node-a");
        let blocker = |ns: &str, pod: &str, reason: &str| Blocker {
            namespace: ns.into(),
            pod: pod.into(),
            reason: reason.into(),
        };
        let web = "The disruption budget web needs 2 healthy pods and has 2 currently";
        m.on_event(&p.event(EventKind::DrainStarted), &p);
        p.update(|st| {
            st.blockers = vec![
                blocker("shop", "web-0", web),
                blocker("shop", "web-1", web),
                blocker("bank", "web-0", web),
                blocker("shop", "vm", "admission webhook \"virt\" denied"),
            ]
        });
        m.on_event(&p.event(EventKind::PodBlocked), &p);
        let text = m.encode();
        for line in [
            "maintd_pods_blocked{namespace=\"shop\",budget=\"web\"} 2",
            "maintd_pods_blocked{namespace=\"bank\",budget=\"web\"} 1",
            "maintd_pods_blocked{namespace=\"shop\",budget=\"\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        // No longer blocking: 0, until the drain is undone.
        p.update(|st| st.blockers = vec![blocker("bank", "web-0", web)]);
        m.on_event(&p.event(EventKind::PodGone), &p);
        let text = m.encode();
        assert!(
            text.contains("maintd_pods_blocked{namespace=\"shop\",budget=\"web\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("maintd_pods_blocked{namespace=\"bank\",budget=\"web\"} 1"),
            "{text}"
        );
        p.update(|st| st.blockers.clear());
        m.on_event(&p.event(EventKind::UndoCompleted), &p);
        assert!(
            !m.encode().contains("maintd_pods_blocked{"),
            "{}",
            m.encode()
        );
    }
}
