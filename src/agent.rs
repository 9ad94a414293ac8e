//! The agent: watches its Node and its pods, works out from the triggers
//! what the node should be (drained or not), and drives the drain engine
//! and its undo. It holds no state of its own beyond what it sees: killed
//! and restarted at any moment, it resumes from the cluster and the disk.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cluster::{CORDONED_ANNOTATION, ClusterOps, TaintSpec};
use crate::config::Config;
use crate::drain::executor::{DrainOptions, Drainer};
use crate::drain::plan::PlanOptions;
use crate::drain::progress::{EventKind, Progress};
use crate::drain::static_pods::StaticPodStash;
use crate::index::{Index, WatchTarget};
use crate::trigger::{self, Desired};

pub struct Agent {
    pub config: Config,
    pub drainer: Drainer,
    pub node: Index,
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
            },
            node: Index::new(),
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
            stage_timeout: self.config.stage_timeout,
            on_timeout: self.config.on_stage_timeout,
            cordon: true,
            evict: desired.evict,
            deadline: None,
        }
    }

    /// What the triggers want now.
    fn desired(&self) -> Desired {
        let mut d = Desired::default();
        if let Some(node) = self.node.by_name(&self.config.node)
            && let Some(t) = trigger::taint::find(&node, &self.config.drain_taints)
        {
            d.sources.push(t.describe());
            d.evict = true;
        }
        d
    }

    /// Whether the node or the disk still carry maintd's marks.
    fn has_leftovers(&self) -> bool {
        let marked = self.node.by_name(&self.config.node).is_some_and(|n| {
            n["metadata"]["annotations"][CORDONED_ANNOTATION].is_string()
                || n["spec"]["taints"].as_array().is_some_and(|ts| {
                    ts.iter()
                        .any(|t| t["key"] == self.drainer.taint.key.as_str())
                })
        });
        let stashed = self
            .drainer
            .stash
            .as_ref()
            .is_some_and(|s| s.stashed().map(|f| !f.is_empty()).unwrap_or(false));
        marked || stashed
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
        let (pods, node) = (self.drainer.pods.clone(), self.node.clone());
        tokio::select! {
            _ = async { pods.wait_until(Index::synced).await; node.wait_until(Index::synced).await } => {}
            _ = stop.cancelled() => return,
        }
        tracing::info!(node = %self.config.node, "watching the node and its pods");
        self.start_endpoints(&stop).await;
        let mut running: Option<Running> = None;
        let mut node_changes = self.node.changes();
        let mut warned_value: Option<String> = None;
        loop {
            let desired = self.desired();
            if let Some(node) = self.node.by_name(&self.config.node)
                && let Some(t) = trigger::taint::find(&node, &self.config.drain_taints)
                && let Some(w) = t.odd_value_warning()
                && warned_value.as_deref() != Some(w.as_str())
            {
                let mut ev = self.progress().event(EventKind::Warning);
                ev.message = w.clone();
                self.progress().emit(ev);
                warned_value = Some(w);
            }
            match (&running, desired.active()) {
                (Some(r), true) if r.desired == desired => {}
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
            tokio::select! {
                r = node_changes.changed() => if r.is_err() { return },
                _ = stop.cancelled() => {
                    if let Some(r) = running.take() {
                        r.cancel.cancel();
                        let _ = r.task.await;
                    }
                    return;
                }
            }
        }
    }

    /// Starts the HTTP listeners; a listener that cannot bind is reported
    /// and the agent goes on without it.
    async fn start_endpoints(&self, stop: &CancellationToken) {
        for (addr, local) in [
            (self.config.listen, false),
            (self.config.listen_local, true),
        ] {
            let Some(addr) = addr else { continue };
            match tokio::net::TcpListener::bind(addr).await {
                Ok(l) => {
                    tracing::info!(%addr, local, "serving the status endpoint");
                    let ep = crate::http::Endpoint {
                        node: self.config.node.clone(),
                        progress: self.drainer.progress.clone(),
                        pods: self.drainer.pods.clone(),
                        node_index: self.node.clone(),
                        local,
                    };
                    tokio::spawn(crate::http::serve(ep, l, stop.clone()));
                }
                Err(e) => tracing::error!(%addr, error = %e, "cannot listen; the endpoint is off"),
            }
        }
    }

    async fn undo_until_done(&self, stop: &CancellationToken) {
        let mut backoff = crate::index::Backoff::with(500, 10_000);
        while self.drainer.undo().await.is_err() {
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = stop.cancelled() => return,
            }
        }
        // Let the node watch catch up with the undo before judging leftovers.
        let node = self.node.clone();
        let name = self.config.node.clone();
        let key = self.drainer.taint.key.clone();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            node.wait_until(move |i| {
                i.by_name(&name).is_none_or(|n| {
                    !n["metadata"]["annotations"][CORDONED_ANNOTATION].is_string()
                        && !n["spec"]["taints"]
                            .as_array()
                            .is_some_and(|ts| ts.iter().any(|t| t["key"] == key.as_str()))
                })
            }),
        )
        .await;
    }
}
