//! The whole agent running against a simulated cluster, its events
//! collected for the test to read.

use std::sync::{Arc, Mutex};

use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::progress::{DrainEvent, EventKind, Progress};
use maintd::sim::SimCluster;
use maintd::trigger::local::LocalRequests;
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
        Self::start_with(Config::for_node(node, dir), sim.client_with(false))
    }

    /// An agent with these settings and this client.
    pub fn start_with(config: Config, client: kube::Client) -> RunningAgent {
        let agent = Agent::new(config, client);
        let progress = agent.progress().clone();
        let local = agent.local.clone();
        let events: Arc<Mutex<Vec<DrainEvent>>> = Arc::default();
        let mut rx = progress.subscribe();
        let sink = events.clone();
        tokio::spawn(async move {
            while let Ok(ev) = rx.recv().await {
                sink.lock().unwrap().push(ev);
            }
        });
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

    pub async fn wait_for(&self, what: &str, check: impl Fn(&[DrainEvent]) -> bool) {
        let events = self.events.clone();
        super::eventually(what, || {
            let ok = check(&events.lock().unwrap());
            async move { ok }
        })
        .await;
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
