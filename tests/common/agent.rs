//! The whole agent running against a simulated cluster, its events
//! collected for the test to read.

use std::sync::{Arc, Mutex};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::progress::{DrainEvent, EventKind, Progress};
use maintd::trigger::local::LocalRequests;
use maintd_sim::SimCluster;
use tokio_util::sync::CancellationToken;

pub struct RunningAgent {
    /// A handle on the running agent (its indexes and views are shared).
    pub agent: Agent,
    pub progress: Progress,
    /// The agent's local drain requests (what `maintd drain` sends).
    pub local: LocalRequests,
    pub events: Arc<Mutex<Vec<DrainEvent>>>,
    pub stop: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

/// Every event the agent emits from now on, kept for the test to read. A
/// collector that falls behind skips what it missed and goes on, instead of
/// stopping (which would make every later wait time out).
pub fn collect_events(progress: &Progress) -> Arc<Mutex<Vec<DrainEvent>>> {
    let events: Arc<Mutex<Vec<DrainEvent>>> = Arc::default();
    let mut rx = progress.subscribe();
    let sink = events.clone();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ev) => sink
                    .lock()
                    .unwrap()
                    .push(std::sync::Arc::unwrap_or_clone(ev)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    eprintln!("the test's event collector fell {n} events behind");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    events
}

impl RunningAgent {
    /// An agent for `node` with every default, its static pod directory the
    /// simulator's (or `static_dir`).
    pub fn start(
        sim: &SimCluster,
        node: &str,
        static_dir: Option<std::path::PathBuf>,
    ) -> RunningAgent {
        let dir = static_dir
            .or_else(|| sim.static_pod_dir(node))
            .unwrap_or_else(|| "/nonexistent/manifests".into());
        Self::start_with(
            Config::for_node(node, dir),
            maintd::testbed::agent_client(sim, node),
        )
    }

    /// An agent with these settings and this client.
    pub fn start_with(config: Config, client: kube::Client) -> RunningAgent {
        let agent = Agent::new(config, client);
        let progress = agent.progress().clone();
        let local = agent.local.clone();
        let events = collect_events(&progress);
        let stop = CancellationToken::new();
        let task = tokio::spawn(agent.clone().run(stop.clone()));
        RunningAgent {
            agent,
            progress,
            local,
            events,
            stop,
            task,
        }
    }

    /// Waits until the events collected so far satisfy `check`; on a
    /// timeout, the panic shows the agent's status (stage, blockers, last
    /// error), so a failure in CI says where the drain stood.
    pub async fn wait_for(&self, what: &str, check: impl Fn(&[DrainEvent]) -> bool) {
        self.wait_for_within(what, super::PATIENCE, check).await;
    }

    /// [`RunningAgent::wait_for`], with a patience of its own (for drains
    /// that are slow by design).
    pub async fn wait_for_within(
        &self,
        what: &str,
        patience: std::time::Duration,
        check: impl Fn(&[DrainEvent]) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + patience;
        while tokio::time::Instant::now() < deadline {
            if check(&self.events.lock().unwrap()) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let status = serde_json::to_string_pretty(&self.progress.status()).unwrap_or_default();
        panic!("timed out waiting until {what}; the agent's status:\n{status}");
    }

    pub async fn wait_event(&self, kind: EventKind) {
        self.wait_for(&format!("{kind:?}"), |evs| {
            evs.iter().any(|e| e.event == kind)
        })
        .await;
    }

    pub fn events(&self) -> Vec<DrainEvent> {
        self.events.lock().unwrap().clone()
    }

    pub fn count(&self, kind: EventKind) -> usize {
        self.events().iter().filter(|e| e.event == kind).count()
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
