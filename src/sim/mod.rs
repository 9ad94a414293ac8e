//! A simulated Kubernetes cluster: a real HTTP server on loopback speaking
//! the subset of the Kubernetes API that maintd and kubectl use, with a
//! simulated kubelet per node and the DaemonSet, ReplicaSet and disruption
//! controllers. `kube::Client` and `kubectl` use it unchanged. It is the test
//! and demo infrastructure of the project; where it differs from a real
//! cluster, a comment says so.

// Errors of the simulated apiserver are Kubernetes Status bodies, built on
// cold paths; their size does not matter.
#![allow(clippy::result_large_err)]

pub mod audit;
pub mod controllers;
pub mod discovery;
pub mod errors;
pub mod eviction;
pub mod kubelet;
pub mod meta;
pub mod patch;
pub mod resources;
pub mod select;
pub mod server;
pub mod state;
pub mod store;
pub mod table;
pub mod validate;
pub mod verbs;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use state::{SimConfig, SimState};

/// A running simulated cluster. Dropping it stops the server and the
/// simulated kubelets and controllers.
pub struct SimCluster {
    pub state: Arc<SimState>,
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl SimCluster {
    /// Starts a cluster on a free port of 127.0.0.1.
    pub async fn start(config: SimConfig) -> std::io::Result<SimCluster> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
    }

    /// Starts a cluster listening on `addr`.
    pub async fn start_on(addr: SocketAddr, config: SimConfig) -> std::io::Result<SimCluster> {
        let listener = server::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = SimState::new(config);
        let stop = CancellationToken::new();
        tokio::spawn(server::serve(state.clone(), listener, stop.clone()));
        kubelet::start(state.clone(), stop.clone());
        controllers::start(state.clone(), stop.clone());
        Ok(SimCluster { state, addr, stop })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube-rs client for this cluster, with kube's own retries on.
    pub fn client(&self) -> kube::Client {
        self.client_with(true)
    }

    /// A kube-rs client; `retry` false turns off kube's built-in retry of
    /// 429s (what the drain uses, to see every eviction refusal).
    pub fn client_with(&self, retry: bool) -> kube::Client {
        let url = self.url().parse().unwrap_or_default();
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        if !retry {
            config.default_retry = false;
        }
        kube::Client::try_from(config)
            .unwrap_or_else(|_| unreachable!("an http:// config always builds a client"))
    }

    /// A kubeconfig that kubectl and kube-rs accept for this cluster.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: maintd-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: maintd-sim\n  context:\n    cluster: maintd-sim\n    user: maintd-sim\n    namespace: default\ncurrent-context: maintd-sim\nusers:\n- name: maintd-sim\n  user: {{}}\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Stops the server, kubelets and controllers.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
