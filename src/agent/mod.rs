//! The agent: watches its Node and its pods, works out from the triggers
//! what the node should be (drained or not), and drives the drain engine
//! and its undo. It holds no state of its own beyond what it sees: killed
//! and restarted at any moment, it resumes from the cluster and the disk.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cluster::{ClusterOps, TaintSpec};
use crate::config::Config;
use crate::drain::executor::{DrainOptions, Drainer};
use crate::drain::plan::PlanOptions;
use crate::drain::progress::{EventKind, Progress};
use crate::drain::static_pods::StaticPodStash;
use crate::index::{Index, WatchTarget};
use crate::inhibitor::{InhibitWhat, InhibitorConfig, InhibitorStatus, ShutdownEvent};
use crate::logind::BusAddress;
use crate::trigger::local::LocalRequests;
use crate::trigger::maintenance::MaintenanceTrigger;

mod fleet;
pub use fleet::AgentDrain;
mod medik8s;
mod shutdown;
mod undo;
use crate::trigger::shutdown::{ActiveShutdown, ShutdownTrigger};
use crate::trigger::{self, Desired};

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
}

/// What woke the agent's loop.
enum Wake {
    Node,
    Logind(ShutdownEvent),
    Drained,
    Deadline,
}

struct Running {
    desired: Desired,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Agent {
    /// Builds the agent. `client` should have kube's default retry turned
    /// off (the drain paces its own retries).
    pub fn new(config: Config, client: kube::Client) -> Agent {
        let ops = ClusterOps::new(client, &config.node);
        let stash = Some(StaticPodStash::new(
            config.static_pod_dir.clone(),
            config.static_pod_stash.clone(),
        ));
        Agent {
            drainer: Drainer {
                ops,
                pods: Index::new(),
                budgets: Index::new(),
                stash,
                progress: Progress::new(&config.node),
                taint: TaintSpec::draining(),
                memory: Default::default(),
            },
            node: Index::new(),
            local: LocalRequests::new(),
            maintenance: MaintenanceTrigger::new(),
            medik8s: config.medik8s.then(MaintenanceTrigger::medik8s),
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
        }
    }

    /// What the triggers want now.
    fn desired(&self, shutdown: Option<ActiveShutdown>) -> Desired {
        let mut d = Desired::default();
        if let Some(sd) = shutdown {
            d.sources.push("shutdown".into());
            d.evict = true;
            d.deadline = Some(sd.deadline);
        }
        if let Some(node) = self.node.by_name(&self.config.node) {
            if let Some(t) = trigger::taint::find(&node, &self.config.drain_taints) {
                d.sources.push(t.describe());
                d.evict = true;
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
            d.sources.push(format!("local: {}", req.reason));
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
    pub async fn run(self, stop: CancellationToken) {
        let client = self.drainer.ops.client().clone();
        tokio::spawn(self.drainer.pods.clone().run(
            client.clone(),
            WatchTarget {
                path: "/api/v1/pods".into(),
                field_selector: Some(format!("spec.nodeName={}", self.config.node)),
            },
            stop.clone(),
        ));
        tokio::spawn(self.node.clone().run(
            client,
            WatchTarget {
                path: "/api/v1/nodes".into(),
                field_selector: Some(format!("metadata.name={}", self.config.node)),
            },
            stop.clone(),
        ));
        tokio::spawn(self.drainer.budgets.clone().run(
            self.drainer.ops.client().clone(),
            WatchTarget {
                path: "/apis/policy/v1/poddisruptionbudgets".into(),
                field_selector: None,
            },
            stop.clone(),
        ));
        tokio::spawn(
            self.maintenance
                .clone()
                .run(self.drainer.ops.client().clone(), stop.clone()),
        );
        if let Some(m) = &self.medik8s {
            tokio::spawn(
                m.clone()
                    .run(self.drainer.ops.client().clone(), stop.clone()),
            );
        }
        let (pods, node, maintenance, medik8s) = (
            self.drainer.pods.clone(),
            self.node.clone(),
            self.maintenance.clone(),
            self.medik8s.clone(),
        );
        tokio::select! {
            // All of them first: a restarted agent that judged before seeing
            // the NodeMaintenance objects would undo the drain it was doing.
            _ = async {
                pods.wait_until(Index::synced).await;
                node.wait_until(Index::synced).await;
                maintenance.wait_ready().await;
                if let Some(m) = &medik8s {
                    m.wait_ready().await;
                }
            } => {}
            _ = stop.cancelled() => return,
        }
        tracing::info!(node = %self.config.node, "watching the node and its pods");
        let mut shutdown = self.config.shutdown.as_ref().map(|st| {
            let mut cfg = InhibitorConfig::new(&self.config.node);
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
            client: self.drainer.ops.client().clone(),
            node: self.config.node.clone(),
            progress: self.drainer.progress.clone(),
            maintenance: self.maintenance.clone(),
            medik8s: self.medik8s.clone(),
            node_index: self.node.clone(),
            writes: metrics.status_writes.clone(),
        };
        tokio::spawn(reporter.run(stop.clone()));
        let recorder = crate::report::events::EventRecorder {
            client: self.drainer.ops.client().clone(),
            node: self.config.node.clone(),
            progress: self.drainer.progress.clone(),
            series_every: crate::report::events::SERIES_WRITE_EVERY,
        };
        recorder.spawn(stop.clone());
        self.start_endpoints(&stop, inhibitor, metrics).await;
        let mut running: Option<Running> = None;
        let mut node_changes = self.node.changes();
        let mut maintenance_changes = self.maintenance.index.changes();
        let mut medik8s_changes = self.medik8s.as_ref().map(|m| m.index.changes());
        let mut local_slot: Option<crate::coordination::SlotGuard> = None;
        let mut slot_retry: Option<tokio::time::Instant> = None;
        let mut release_retry: Option<tokio::time::Instant> = None;
        let mut local_changes = self.local.subscribe();
        let mut progress = self.progress().subscribe();
        let mut warned_value: Option<String> = None;
        loop {
            let mut desired = self.desired(shutdown.as_ref().and_then(ShutdownTrigger::active));
            self.publish_triggers(&desired);
            // A local drain on its own waits for a reboot slot; the slot goes
            // back when the local request does.
            let planned = desired.sources.iter().any(|s| fleet::is_planned_local(s));
            if planned
                && desired.sources.iter().all(|s| fleet::is_planned_local(s))
                && local_slot.is_none()
            {
                match self.take_local_slot(&stop).await {
                    Ok(guard) => {
                        slot_retry = None;
                        local_slot = Some(guard);
                    }
                    Err(why) => {
                        self.progress().update(|st| {
                            st.last_error = Some(why.clone());
                            st.blockers = vec![crate::drain::progress::Blocker {
                                namespace: String::new(),
                                pod: String::new(),
                                reason: why.clone(),
                            }];
                        });
                        slot_retry = Some(tokio::time::Instant::now() + Duration::from_secs(5));
                        desired = Desired::default();
                    }
                }
            } else if !planned
                && let Some(guard) = local_slot.take()
                && let Err(e) = guard.release().await
            {
                self.warn(format!("giving back the reboot slot: {e}"));
            }
            if let Some(node) = self.node.by_name(&self.config.node)
                && let Some(t) = trigger::taint::find(&node, &self.config.drain_taints)
                && let Some(w) = t.odd_value_warning()
                && warned_value.as_deref() != Some(w.as_str())
            {
                self.warn(w.clone());
                warned_value = Some(w);
            }
            let held = desired.active();
            match (&running, held) {
                // Triggers came or went but want the same drain: it goes on.
                (Some(r), true) if same_drain(&r.desired, &desired) => {}
                (Some(_), _) => {
                    if let Some(r) = running.take() {
                        r.cancel.cancel();
                        let _ = r.task.await;
                    }
                    if !desired.active() {
                        self.undo_until_done(&stop).await;
                    }
                    continue;
                }
                (None, true) => {
                    let cancel = stop.child_token();
                    let drainer = self.drainer.clone();
                    let opts = self.options(&desired);
                    let c = cancel.clone();
                    let task = tokio::spawn(async move { drainer.run(opts, c).await });
                    running = Some(Running {
                        desired,
                        cancel,
                        task,
                    });
                }
                (None, false) => {
                    if self.has_leftovers() {
                        self.undo_until_done(&stop).await;
                    }
                }
            }
            // A medik8s object being deleted waits on its operator's
            // finalizer; once the node is not held for it, let it go (not
            // while a shutdown waits: that has the loop's full attention).
            let shutting_down = shutdown
                .as_ref()
                .and_then(ShutdownTrigger::active)
                .is_some();
            if !shutting_down {
                release_retry = (!self.release_medik8s_objects(held).await)
                    .then(|| tokio::time::Instant::now() + Duration::from_secs(5));
            }
            let deadline = shutdown
                .as_ref()
                .and_then(ShutdownTrigger::release_deadline);
            let retry_at = slot_retry.into_iter().chain(release_retry).min();
            let wake = tokio::select! {
                _ = async {
                    match retry_at {
                        Some(t) => tokio::time::sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let now = tokio::time::Instant::now();
                    slot_retry = slot_retry.filter(|t| *t > now);
                    release_retry = release_retry.filter(|t| *t > now);
                    Wake::Node
                },
                r = node_changes.changed() => if r.is_err() { return } else { Wake::Node },
                // The sender lives in self.local, so this never closes.
                _ = local_changes.changed() => Wake::Node,
                _ = maintenance_changes.changed() => Wake::Node,
                _ = async {
                    match medik8s_changes.as_mut() {
                        Some(rx) => rx.changed().await,
                        None => std::future::pending().await,
                    }
                } => Wake::Node,
                ev = async {
                    match shutdown.as_mut() {
                        Some(s) => s.next().await,
                        None => std::future::pending().await,
                    }
                } => Wake::Logind(ev),
                ev = progress.recv() => match ev {
                    // Failed: every stage's time ran out; what is left
                    // goes down with the node, so holding on gains nothing.
                    Ok(ev) if matches!(ev.event, EventKind::DrainCompleted | EventKind::DrainFailed) => Wake::Drained,
                    _ => Wake::Node,
                },
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => Wake::Deadline,
                _ = stop.cancelled() => {
                    if let Some(r) = running.take() {
                        r.cancel.cancel();
                        let _ = r.task.await;
                    }
                    return;
                }
            };
            let Some(sd) = shutdown.as_mut() else {
                continue;
            };
            match wake {
                Wake::Logind(ev) => self.on_logind(sd, &ev),
                Wake::Drained => {
                    let why = if self.progress().status().phase
                        == crate::drain::progress::Phase::Failed
                    {
                        "the drain did all it could in the time it had; the pods left go down with the node"
                    } else {
                        "the node is drained"
                    };
                    self.release(sd, why).await
                }
                Wake::Deadline => {
                    let left = self.progress().status().pods_remaining;
                    let mut ev = self.progress().event(EventKind::DrainFailed);
                    ev.message = format!(
                        "the shutdown budget is nearly spent with {left} pods left; releasing the lock so the shutdown is not held past logind's limit"
                    );
                    self.progress()
                        .update(|st| st.last_error = Some(ev.message.clone()));
                    self.progress().emit(ev);
                    self.release(sd, "the drain's share of the shutdown budget ran out")
                        .await;
                }
                Wake::Node => {}
            }
        }
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
            inhibitor,
            local: false,
            local_requests: self.local.clone(),
            metrics,
            fleetlock: Some(self.fleetlock(stop).await),
        };
        crate::http::start(ep, self.config.listen, self.config.listen_local, stop).await;
    }
}

/// Whether two wishes of the triggers ask for the same drain: only the plan,
/// the deadline and how stages run count, not which triggers ask (a drain
/// re-planned for those carries over what it learned, see DrainMemory).
fn same_drain(a: &Desired, b: &Desired) -> bool {
    a.evict == b.evict
        && a.entries == b.entries
        && a.deadline == b.deadline
        && a.stage_timeout == b.stage_timeout
}
