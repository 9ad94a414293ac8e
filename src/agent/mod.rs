//! The agent: watches its Node and its pods, works out from the triggers
//! what the node should be (drained or not), and drives the drain engine
//! and its undo. It holds no state of its own beyond what it sees: killed
//! and restarted at any moment, it resumes from the cluster and the disk.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::cluster::{ClusterOps, TaintSpec};
use crate::config::Config;
use crate::drain::budget_watches::BudgetWatches;
use crate::drain::eviction_requests::EvictionRequests;
use crate::drain::executor::{DrainOptions, Drainer};
use crate::drain::plan::PlanOptions;
use crate::drain::progress::{EventKind, Progress};
use crate::drain::static_pods::StaticPodStash;
use crate::index::{ApiHealth, Index, WatchGuard, WatchTarget};
use crate::inhibitor::{InhibitWhat, InhibitorConfig, InhibitorStatus};
use crate::logind::BusAddress;
use crate::trigger::local::LocalRequests;
use crate::trigger::maintenance::MaintenanceTrigger;

mod cordon;
mod fleet;
pub use fleet::AgentDrain;
mod medik8s;
pub(crate) mod medik8s_lease;
mod order;
mod planned;
mod reconcile;
mod shutdown;
mod turns;
mod undo;
use crate::trigger::local::LocalSource;
use crate::trigger::shutdown::{ActiveShutdown, ShutdownTrigger};
use crate::trigger::{self, Desired};

#[derive(Clone)]
pub struct Agent {
    pub config: Config,
    pub drainer: Drainer,
    pub node: Index,
    /// Drain requests made on the local endpoint (`maintd drain`).
    pub local: LocalRequests,
    /// NodeMaintenance objects that select this node.
    pub maintenance: MaintenanceTrigger,
    /// medik8s' NodeMaintenance objects (only with `--medik8s`).
    pub medik8s: Option<MaintenanceTrigger>,
    /// When the API server last answered this agent.
    pub health: ApiHealth,
    /// The status writer's Lease, with the rolling maintenances' published
    /// drain order (see [`crate::api::order`]).
    pub writer_lease: Index,
    /// How long this agent has seen each Lease it coordinates through
    /// unchanged: what says a hold has lapsed (see
    /// [`crate::coordination::LeaseClock`]).
    pub lease_clock: crate::coordination::LeaseClock,
    /// The guards this agent's parts hold on its slots: a slot one part
    /// took up again is not given back for another (see
    /// [`crate::coordination::SlotHolds`]).
    pub slot_holds: crate::coordination::SlotHolds,
}

impl Agent {
    /// Builds the agent. `client` should have kube's default retry turned
    /// off (the drain paces its own retries).
    pub fn new(config: Config, client: kube::Client) -> Agent {
        let health = ApiHealth::default();
        // A call the API server refuses is the status's last error while
        // the drain has none of its own: it says what to fix.
        let progress = Progress::with_refusals(&config.node, health.refusals.clone());
        // Every call the agent makes is bounded and tells `health`.
        let client = crate::client::guarded(client, config.api.call_timeout, health.clone());
        let guard = watch_guard(&config, &health);
        let pods = Index::new();
        let budgets = BudgetWatches::new(client.clone(), guard).with_pods(pods.clone());
        let node = Index::new();
        let requests = EvictionRequests::new(
            client.clone(),
            &config.node,
            config.eviction_requests,
            config.eviction_request_progress_timeout,
        );
        let ops = ClusterOps::new(client, &config.node).with_view(node.clone());
        let mut stash = StaticPodStash::new(
            config.static_pods.dir.clone(),
            config.static_pod_stash.clone(),
        );
        if let Some(helper) = &config.node_helper {
            stash = stash.through_helper(helper.clone());
        }
        Agent {
            drainer: Drainer {
                ops,
                pods,
                budgets,
                stash: Some(stash),
                progress,
                taint: TaintSpec::draining(),
                memory: Default::default(),
                requests,
            },
            node,
            local: LocalRequests::new(),
            maintenance: MaintenanceTrigger::new(),
            medik8s: config.medik8s.then(MaintenanceTrigger::medik8s),
            health,
            writer_lease: Index::new(),
            lease_clock: Default::default(),
            slot_holds: Default::default(),
            config,
        }
    }

    pub fn progress(&self) -> &Progress {
        &self.drainer.progress
    }

    fn options(&self, desired: &Desired) -> DrainOptions {
        DrainOptions {
            entries: desired.entries.clone(),
            plan: PlanOptions {
                own_pod: self.config.own_pod.clone(),
                drain_taint_key: self.drainer.taint.key.clone(),
                drain_taint_effect: self.drainer.taint.effect.clone(),
            },
            concurrency: self.config.concurrency,
            stage_timeout: desired.stage_timeout.or(self.config.stage_timeout),
            on_timeout: self.config.on_stage_timeout,
            cordon: true,
            evict: desired.evict,
            deadline: desired.deadline,
            volume_detach_timeout: self.config.volume_detach_timeout,
            // Set by the loop for the drain of a turn just started.
            turn: None,
        }
    }

    /// What the triggers want now.
    fn desired(&self, shutdown: Option<ActiveShutdown>) -> Desired {
        let mut d = Desired::default();
        if let Some(sd) = shutdown {
            d.sources
                .push(if sd.sleep { "suspend" } else { "shutdown" }.into());
            d.evict = true;
            d.urgent = true;
            d.deadline = Some(sd.deadline);
        }
        if let Some(node) = self.node.by_name(&self.config.node) {
            if let Some(t) = trigger::taint::find(&node, &self.config.drain_taints) {
                d.sources.push(t.describe());
                d.evict = true;
                d.urgent = true;
            }
            trigger::maintenance::contribute(
                self.maintenance.evaluate(&node).effective.as_ref(),
                &mut d,
            );
        }
        if let Some(m) = &self.medik8s {
            let requests = trigger::medik8s::requests(&m.index.all(), &self.config.node);
            trigger::medik8s::contribute(&requests, &mut d);
        }
        // In memory only: a local request does not survive an agent restart
        // (see trigger/local.rs); `maintd drain --wait` re-sends it.
        if let Some(req) = self.local.current() {
            let fleetlock = req.source == LocalSource::FleetLock;
            let prefix = if fleetlock {
                trigger::FLEETLOCK_PREFIX
            } else {
                trigger::LOCAL_PREFIX
            };
            let source = format!("{prefix}{}", req.reason);
            if fleetlock {
                d.urgent = true;
            } else {
                d.policy = true;
                d.slot_asks.push(trigger::SlotAsk {
                    group: crate::coordination::DEFAULT_GROUP.into(),
                    max: self.config.reboot_slots,
                    release_when_drained: false,
                    turn: None,
                    what: "a reboot slot".into(),
                    ahead: 0,
                });
            }
            d.sources.push(source);
            d.evict = true;
            d.deadline = match (d.deadline, req.deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        d
    }

    /// Puts the active triggers and the deadline into the status snapshot.
    fn publish_triggers(&self, desired: &Desired) {
        let deadline = desired.deadline.map(|d| {
            let left = d.saturating_duration_since(tokio::time::Instant::now());
            let at = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(left.as_secs() as i64))
                .unwrap_or_else(|_| jiff::Timestamp::now());
            at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
        });
        let st = self.progress().status();
        if st.triggers != desired.sources || st.deadline.is_some() != deadline.is_some() {
            self.progress().update(|st| {
                st.triggers = desired.sources.clone();
                st.deadline = deadline;
            });
        }
    }

    /// Runs until `stop`. Stopping does not undo: a restarted agent resumes
    /// the drain it finds.
    ///
    /// Nothing here waits on the API server: the watches start in the
    /// background, the shutdown lock is taken and the endpoints served at
    /// once, so a node booting while the control plane is away still holds
    /// its lock, answers its liveness probe and handles a shutdown.
    pub async fn run(self, stop: CancellationToken) {
        let client = self.drainer.ops.client().clone();
        let node = &self.config.node;
        let guard = self.watch_guard();
        let watches = [
            (
                self.drainer.pods.clone(),
                WatchTarget::new(
                    "/api/v1/pods",
                    Some(format!("spec.nodeName={node}")),
                    guard.clone(),
                )
                .trimmed_with(crate::index::trim_pod),
            ),
            (
                self.node.clone(),
                // Its managedFields say who uncordoned it.
                WatchTarget::new(
                    "/api/v1/nodes",
                    Some(format!("metadata.name={node}")),
                    guard,
                )
                .keeping_managed_fields(),
            ),
        ];
        // Budgets are watched only while a pod is blocked by one.
        self.drainer.budgets.stop_with(&stop);
        for (index, target) in watches {
            tokio::spawn(index.run(client.clone(), target, stop.clone()));
        }
        tokio::spawn(self.maintenance.clone().run(
            client.clone(),
            self.watch_guard(),
            stop.clone(),
        ));
        if let Some(m) = &self.medik8s {
            tokio::spawn(
                m.clone()
                    .run(client.clone(), self.watch_guard(), stop.clone()),
            );
            tokio::spawn(
                self.clone()
                    .keep_medik8s_lease(client.clone(), stop.clone()),
            );
        }
        let shutdown = self.config.shutdown.as_ref().map(|st| {
            let mut cfg = InhibitorConfig::new(&self.config.node);
            cfg.helper = self.config.node_helper.clone();
            if let Some(bus) = &st.bus {
                cfg.bus = BusAddress::Address(bus.clone());
            }
            if st.sleep {
                cfg.what = InhibitWhat::ShutdownSleep;
            }
            ShutdownTrigger::start(cfg, st.margin)
        });
        let inhibitor = shutdown.as_ref().map(ShutdownTrigger::watch_status);
        let metrics = crate::metrics::Metrics::new();
        tokio::spawn(metrics.clone().feed(
            self.progress().clone(),
            inhibitor.clone(),
            stop.clone(),
        ));
        let reporter = crate::report::StatusReporter {
            client: client.clone(),
            node: self.config.node.clone(),
            progress: self.drainer.progress.clone(),
            maintenance: self.maintenance.clone(),
            medik8s: self.medik8s.clone(),
            node_index: self.node.clone(),
            node_writes: self.drainer.ops.node_writes(),
            inhibitor: inhibitor.clone(),
            writes: metrics.status_writes.clone(),
        };
        tokio::spawn(reporter.run(stop.clone()));
        let writer = crate::report::writer::StatusWriter {
            client: client.clone(),
            leases: self.writer_lease.clone(),
            node: self.config.node.clone(),
            namespace: self.namespace(),
            maintenance: self.maintenance.clone(),
            guard: self.watch_guard(),
            writes: metrics.nodemaintenance_status_writes.clone(),
            holding: metrics.status_writer.clone(),
            objects: metrics.nodemaintenances.clone(),
            clock: self.lease_clock.clone(),
        };
        let writer = tokio::spawn(writer.run(stop.clone()));
        let recorder = crate::report::events::EventRecorder {
            client,
            node: self.config.node.clone(),
            progress: self.drainer.progress.clone(),
            series_every: crate::report::events::SERIES_WRITE_EVERY,
            pod_events: self.config.pod_events,
        };
        recorder.spawn(stop.clone());
        let notifier = crate::report::notify::Notifier {
            node: self.config.node.clone(),
            progress: self.drainer.progress.clone(),
            // Checked when the flags were read.
            webhooks: self
                .config
                .notify_urls
                .iter()
                .filter_map(|u| crate::report::notify::Webhook::parse(u).ok())
                .collect(),
            blocked_after: self.config.notify_blocked_after,
            counted: metrics.notifications.clone(),
        };
        notifier.spawn(stop.clone());
        self.start_endpoints(&stop, inhibitor, metrics).await;
        tracing::info!(node = %self.config.node, "watching the node and its pods");
        let sp = &self.config.static_pods;
        tracing::info!(dir = %sp.dir.display(), from = %sp.from, "static pod directory");
        if let Some(w) = &sp.warning {
            // Logged, a Warning Event on the Node, and in the status.
            self.warn(w.clone());
        }
        reconcile::Reconciler::new(self, shutdown).run(stop).await;
        // The status writer gives its Lease back as it stops: a bounded
        // wait for that write.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    }

    /// The agent's namespace, where its Leases live (`maintd` when it runs
    /// outside a pod).
    pub fn namespace(&self) -> String {
        self.config
            .own_pod
            .as_ref()
            .map(|(ns, _)| ns.clone())
            .unwrap_or_else(|| crate::preflight::DEFAULT_NAMESPACE.into())
    }

    /// How this agent's watches guard against dead connections.
    fn watch_guard(&self) -> WatchGuard {
        watch_guard(&self.config, &self.health)
    }

    /// Whether every trigger that can ask for a drain has been heard from:
    /// until then, "nothing asks" may only mean "not known yet", and
    /// nothing may be undone.
    fn triggers_known(&self) -> bool {
        self.node.synced()
            && self.drainer.pods.synced()
            && self.maintenance.ready()
            && self.medik8s.as_ref().is_none_or(MaintenanceTrigger::ready)
    }

    /// The agent's views of the cluster, by name, for readiness and status:
    /// budget views only while their watches exist.
    pub fn views(&self) -> Vec<(String, Index)> {
        let mut v = vec![
            ("node".to_string(), self.node.clone()),
            ("pods".to_string(), self.drainer.pods.clone()),
            ("nodemaintenances".to_string(), self.maintenance.view()),
        ];
        if let Some(m) = &self.medik8s {
            v.push(("medik8s nodemaintenances".to_string(), m.view()));
        }
        v.extend(self.drainer.budgets.views());
        v
    }

    fn warn(&self, message: String) {
        let mut ev = self.progress().event(EventKind::Warning);
        ev.message = message;
        self.progress().emit(ev);
    }

    /// Starts the HTTP listeners (see http::start).
    async fn start_endpoints(
        &self,
        stop: &CancellationToken,
        inhibitor: Option<tokio::sync::watch::Receiver<InhibitorStatus>>,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) {
        let ep = crate::http::Endpoint {
            node: self.config.node.clone(),
            progress: self.drainer.progress.clone(),
            pods: self.drainer.pods.clone(),
            node_index: self.node.clone(),
            views: {
                let agent = self.clone();
                Arc::new(move || agent.views())
            },
            inhibitor,
            role: crate::http::Role::ReadOnly,
            local_requests: self.local.clone(),
            metrics,
            fleetlock: Some(self.fleetlock(stop)),
            static_pods: self.config.static_pods.clone(),
            api: self.health.clone(),
            listen_errors: Default::default(),
        };
        let listeners = crate::http::Listeners {
            readonly: self.config.listen,
            local: self.config.listen_local.clone(),
            local_group: self.config.node_helper.is_some(),
            fleetlock: self.config.listen_fleetlock,
        };
        crate::http::start(ep, &listeners, stop).await;
    }
}

/// How the agent's watches guard against dead connections.
fn watch_guard(config: &Config, health: &ApiHealth) -> WatchGuard {
    WatchGuard {
        idle_timeout: config.api.watch_idle_timeout,
        stale_after: config.api.stale_after,
        health: health.clone(),
    }
}
