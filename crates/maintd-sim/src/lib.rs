//! A simulated Kubernetes cluster: a real HTTP server on loopback speaking
//! the subset of the Kubernetes API that maintd and kubectl use, with a
//! simulated kubelet per node and the DaemonSet, ReplicaSet, StatefulSet,
//! Deployment, node lifecycle, disruption, volume binding and
//! attach/detach controllers. `kube::Client` and `kubectl` use it unchanged. It is the test
//! and demo infrastructure of the project; where it differs from a real
//! cluster, a comment says so.

// Errors of the simulated apiserver are Kubernetes Status bodies, built on
// cold paths; their size does not matter.
#![allow(clippy::result_large_err)]

pub mod admission;
pub mod audit;
pub mod auth;
pub mod controllers;
pub mod crd_validation;
pub mod dbus;
pub mod discovery;
pub mod errors;
pub mod events;
pub mod eviction;
pub mod faults;
pub mod invariants;
pub mod kubelet;
pub mod lifecycle;
pub mod logind;
pub mod meta;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod requestinfo;
pub mod resources;
pub mod scale;
pub mod scenario;
pub mod select;
pub mod server;
pub mod state;
pub mod store;
pub mod table;
pub mod typecheck;
pub mod validate;
pub mod verbs;
pub mod volumes;
pub mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use state::{SimConfig, SimState};

/// Why a simulated cluster could not start or settle.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Scenario(#[from] scenario::ScenarioError),
    #[error("the cluster did not settle: {0}")]
    Unsettled(String),
}

/// A running simulated cluster. Dropping it stops the server and the
/// simulated kubelets and controllers.
pub struct SimCluster {
    pub state: Arc<SimState>,
    pub addr: SocketAddr,
    stop: CancellationToken,
    /// A static pod root the cluster made for itself, removed with it.
    _static_root: Option<tempfile::TempDir>,
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
        volumes::start(state.clone(), stop.clone());
        if state.config.eviction_requests && state.config.eviction_request_controller {
            lifecycle::start(state.clone(), stop.clone());
        }
        Ok(SimCluster {
            state,
            addr,
            stop,
            _static_root: None,
        })
    }

    /// Starts a cluster seeded from a scenario on a free port.
    pub async fn start_with_scenario(
        config: SimConfig,
        scenario: &scenario::Scenario,
    ) -> Result<SimCluster, SimError> {
        Self::start_with_scenario_on(SocketAddr::from(([127, 0, 0, 1], 0)), config, scenario).await
    }

    /// Starts a cluster seeded from a scenario. Static pod manifests go under
    /// the configured static pod root, or a temporary one made here.
    pub async fn start_with_scenario_on(
        addr: SocketAddr,
        mut config: SimConfig,
        scenario: &scenario::Scenario,
    ) -> Result<SimCluster, SimError> {
        let mut tmp = None;
        if config.static_pod_root.is_none() && !scenario.static_pods.is_empty() {
            let dir = tempfile::Builder::new()
                .prefix("maintd-sim-static-")
                .tempdir()?;
            config.static_pod_root = Some(dir.path().to_path_buf());
            tmp = Some(dir);
        }
        let mut sim = Self::start_on(addr, config).await?;
        scenario.apply(&sim.state, sim.state.config.static_pod_root.as_deref())?;
        sim._static_root = tmp;
        Ok(sim)
    }

    /// The static pod directory of a node, if the cluster has a static pod root.
    pub fn static_pod_dir(&self, node: &str) -> Option<std::path::PathBuf> {
        self.state
            .config
            .static_pod_root
            .as_ref()
            .map(|r| r.join(node))
    }

    /// Waits until the cluster is at rest: every pod bound, running and
    /// ready (or finished), every ReplicaSet, StatefulSet and DaemonSet at
    /// its count, every Deployment rolled out,
    /// every static manifest mirrored.
    pub async fn wait_settled(&self, limit: std::time::Duration) -> Result<(), SimError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let why = self.unsettled();
            match why {
                None => return Ok(()),
                Some(w) if tokio::time::Instant::now() >= deadline => {
                    return Err(SimError::Unsettled(w));
                }
                Some(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }

    fn unsettled(&self) -> Option<String> {
        use resources::Gr;
        let store = self.state.store();
        for p in store.list(&Gr::pods(), None) {
            let finished = matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
            if !finished && (!meta::pod_ready(&p) || meta::is_terminating(&p)) {
                return Some(format!(
                    "pod {}/{} is not ready",
                    meta::namespace(&p),
                    meta::name(&p)
                ));
            }
        }
        for rs in store.list(&Gr::replicasets(), None) {
            if rs["status"]["readyReplicas"] != rs["spec"]["replicas"] {
                return Some(format!(
                    "replicaset {} is not at its count",
                    meta::name(&rs)
                ));
            }
        }
        for sts in store.list(&Gr::statefulsets(), None) {
            if sts["status"]["readyReplicas"].as_i64().unwrap_or(0)
                != sts["spec"]["replicas"].as_i64().unwrap_or(1)
            {
                return Some(format!(
                    "statefulset {} is not at its count",
                    meta::name(&sts)
                ));
            }
        }
        for d in store.list(&Gr::deployments(), None) {
            let want = d["spec"]["replicas"].as_i64().unwrap_or(1);
            let st = &d["status"];
            let rolled_out = st["observedGeneration"] == d["metadata"]["generation"]
                && st["updatedReplicas"].as_i64() == Some(want)
                && st["availableReplicas"].as_i64() == Some(want)
                && st["replicas"].as_i64() == Some(want);
            if !rolled_out {
                return Some(format!("deployment {} is not rolled out", meta::name(&d)));
            }
        }
        // A budget whose status lags its pods would refuse (or allow) the
        // first evictions on the disruption controller's old word.
        for pdb in store.list(&Gr::pdbs(), None) {
            let Ok((st, _)) = eviction::budget_status(&store, &pdb) else {
                continue;
            };
            let status = &pdb["status"];
            if status["observedGeneration"] != pdb["metadata"]["generation"]
                || status["disruptionsAllowed"].as_i64() != Some(st.disruptions_allowed)
                || status["currentHealthy"].as_i64() != Some(st.current_healthy)
            {
                return Some(format!(
                    "the status of budget {}/{} is behind its pods",
                    meta::namespace(&pdb),
                    meta::name(&pdb)
                ));
            }
        }
        for ds in store.list(&Gr::daemonsets(), None) {
            if ds["status"]["numberReady"].is_null()
                || ds["status"]["numberReady"] != ds["status"]["desiredNumberScheduled"]
            {
                return Some(format!("daemonset {} is not at its count", meta::name(&ds)));
            }
        }
        if let Some(root) = &self.state.config.static_pod_root {
            for node in store.list(&Gr::nodes(), None) {
                let files = std::fs::read_dir(root.join(meta::name(&node)))
                    .map(|d| {
                        d.flatten()
                            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                            .count()
                    })
                    .unwrap_or(0);
                let mirrors = store
                    .list(&Gr::pods(), None)
                    .iter()
                    .filter(|p| {
                        p["spec"]["nodeName"] == meta::name(&node)
                            && meta::annotation(p, kubelet::MIRROR_ANNOTATION).is_some()
                    })
                    .count();
                if files != mirrors {
                    return Some(format!(
                        "node {} has {files} static manifests and {mirrors} mirror pods",
                        meta::name(&node)
                    ));
                }
            }
        }
        None
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
        let mut config = self.client_config();
        if !retry {
            config.default_retry = false;
        }
        Self::build(config)
    }

    /// The configuration of an admin's client of this cluster, for
    /// clients that want settings of their own.
    pub fn client_config(&self) -> kube::Config {
        self.client_config_as(&self.state.admin_token)
    }

    /// The configuration of a client that authenticates with `token`.
    pub fn client_config_as(&self, token: &str) -> kube::Config {
        let url = self.url().parse().unwrap_or_default();
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        config.auth_info.token = Some(token.to_string().into());
        config
    }

    /// Whether an object of the kind, namespace and name of `obj` exists.
    pub fn has_object(&self, obj: &serde_json::Value) -> bool {
        let kind = obj["kind"].as_str().unwrap_or("");
        let group = obj["apiVersion"]
            .as_str()
            .and_then(|av| av.rsplit_once('/'))
            .map_or("", |(g, _)| g);
        let store = self.state.store();
        let Some(def) = store.lookup_kind(group, kind) else {
            return false;
        };
        let ns = if def.namespaced {
            obj["metadata"]["namespace"].as_str().unwrap_or("default")
        } else {
            ""
        };
        store.get(&def.gr(), ns, meta::name(obj)).is_some()
    }

    /// Reboots `node` (see [`kubelet::reboot`]): a new boot ID, NotReady for
    /// `after`, then Ready. Returns the new boot ID.
    pub fn reboot_node(&self, node: &str, after: std::time::Duration) -> Option<String> {
        kubelet::reboot(&self.state, node, after)
    }

    /// The admin's bearer token (`system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.state.admin_token
    }

    /// A token for ServiceAccount `namespace`/`name`, bound to `node`: its
    /// user carries the node's name in `extra`, as the projected token of a
    /// pod on that node does. The ServiceAccount (and the node) must exist
    /// when the token is used; the token stops working when either goes.
    pub fn service_account_token(&self, namespace: &str, name: &str, node: Option<&str>) -> String {
        self.state
            .tokens
            .issue_service_account(namespace, name, node)
    }

    /// A client built from `config`.
    pub fn build(config: kube::Config) -> kube::Client {
        kube::Client::try_from(config)
            .unwrap_or_else(|_| unreachable!("an http:// config always builds a client"))
    }

    /// A kubeconfig that kubectl and kube-rs accept for this cluster, with
    /// the admin's token.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_as(&self.state.admin_token)
    }

    /// A kubeconfig that authenticates with `token`.
    pub fn kubeconfig_as(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: maintd-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: maintd-sim\n  context:\n    cluster: maintd-sim\n    user: maintd-sim\n    namespace: default\ncurrent-context: maintd-sim\nusers:\n- name: maintd-sim\n  user:\n    token: {token}\npreferences: {{}}\n",
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::resources::Gr;
    use crate::verbs::{Writer, create};

    /// A budget whose status the disruption controller has not written yet
    /// keeps the cluster unsettled, and names the budget: a bench or test
    /// that starts then would meet refusals the budget's pods do not call
    /// for.
    #[tokio::test]
    async fn a_budget_whose_status_lags_its_pods_is_not_settled() {
        // The controller will not recompute within this test.
        let config = SimConfig {
            disruption_lag: Duration::from_secs(3600),
            ..SimConfig::default()
        };
        let sim = SimCluster::start(config).await.expect("sim");
        let writer = Writer {
            manager: "test".into(),
            force: false,
            user: None,
        };
        let def = |gr: &Gr| sim.state.store().resource(gr).expect("served");
        for name in ["web-1", "web-2"] {
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry.example/web:1"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            });
            create(
                &sim.state,
                &def(&Gr::pods()),
                Some("default"),
                pod,
                &writer,
                true,
            )
            .expect("pod");
        }
        sim.wait_settled(Duration::from_secs(30))
            .await
            .expect("ready pods and no budget are settled");
        let pdb = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
        });
        create(
            &sim.state,
            &def(&Gr::pdbs()),
            Some("default"),
            pdb,
            &writer,
            false,
        )
        .expect("budget");
        let why = sim
            .wait_settled(Duration::from_millis(200))
            .await
            .expect_err("a budget without its status is not settled");
        assert!(
            why.to_string().contains("budget default/web"),
            "the budget is named: {why}"
        );
    }
}
