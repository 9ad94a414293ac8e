//! A round's cluster: KWOK nodes (a pool the maintenance selects, each
//! with an agent and a static pod, and a spare node), Deployments behind
//! budgets, a DaemonSet, and the kubelet's part for static pods.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use super::agents::AgentProcess;
use super::plan::{Budget, Plan, Workload};
use crate::common::fault_proxy::FaultProxy;
use crate::common::mirror_pods::MirrorPods;
use crate::common::real::Real;

pub struct World {
    pub namespace: String,
    /// The NodeMaintenance's name.
    pub maintenance: String,
    pub pool: Vec<String>,
    pub spare: String,
    pub agents: Vec<AgentProcess>,
    /// Every budgeted workload, the stuck one included.
    pub workloads: Vec<Workload>,
    /// Each pool node's static pod manifest: its file name and bytes.
    pub manifest: (String, Vec<u8>),
    mirrors: Vec<MirrorPods>,
    _dir: tempfile::TempDir,
}

/// How long setting up may take on a loaded machine.
const SETUP: Duration = Duration::from_secs(120);

/// The stuck workload: two pods on the drained node, a budget that allows
/// no disruption.
pub fn stuck_workload() -> Workload {
    Workload {
        name: "stuck",
        replicas: 2,
        budget: Budget::MinAvailable(2),
        startup: 1,
        shutdown: 0,
    }
}

impl World {
    pub async fn build(
        real: &Real,
        admin: &kube::Client,
        proxy: &FaultProxy,
        plan: &Plan,
    ) -> World {
        let namespace = format!("soak-{}", plan.seed);
        let pool: Vec<String> = (0..plan.pool)
            .map(|i| format!("soak-{}-n{i}", plan.seed))
            .collect();
        let spare = format!("soak-{}-spare", plan.seed);
        real.namespace(admin, &namespace).await;
        for n in &pool {
            real.node(admin, n, json!({"soak": namespace, "pool": namespace}))
                .await;
        }
        real.node(admin, &spare, json!({"soak": namespace})).await;

        let mut workloads = plan.workloads.clone();
        if plan.stuck {
            workloads.push(stuck_workload());
        }
        let mut objects = Vec::new();
        for w in &workloads {
            let mut pod_spec = json!({
                "nodeSelector": {"soak": namespace},
                "terminationGracePeriodSeconds": 10,
                "containers": [{"name": "app", "image": "registry.example/app:1"}],
            });
            if w.name == "stuck" {
                pod_spec["nodeSelector"] = json!({"kubernetes.io/hostname": pool[0]});
            }
            objects.push(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": w.name, "namespace": namespace},
                "spec": {
                    "replicas": w.replicas,
                    "selector": {"matchLabels": {"app": w.name}},
                    "template": {
                        "metadata": {
                            "labels": {"app": w.name},
                            "annotations": {
                                "sim.maintd.io/startup-seconds": w.startup.to_string(),
                                "sim.maintd.io/shutdown-seconds": w.shutdown.to_string(),
                            },
                        },
                        "spec": pod_spec,
                    },
                },
            }));
            let rule = match w.budget {
                Budget::MinAvailable(n) => json!({"minAvailable": n}),
                Budget::MaxUnavailable(n) => json!({"maxUnavailable": n}),
            };
            let mut spec = json!({"selector": {"matchLabels": {"app": w.name}}});
            for (k, v) in rule.as_object().into_iter().flatten() {
                spec[k] = v.clone();
            }
            objects.push(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": w.name, "namespace": namespace},
                "spec": spec,
            }));
        }
        objects.push(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "node-agent", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": {"app": "node-agent"}},
                "template": {
                    "metadata": {"labels": {"app": "node-agent"}},
                    "spec": {
                        "nodeSelector": {"soak": namespace},
                        "containers": [{"name": "agent", "image": "registry.example/node-agent:1"}],
                    },
                },
            },
        }));
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let (ok, _, err) = crate::common::real::kubectl(
            &real.admin_kubeconfig(),
            &["apply", "-f", "-"],
            Some(&list.to_string()),
        );
        assert!(ok, "the round's workloads: {err}");

        let dir = tempfile::tempdir().expect("a directory for the round");
        let manifest_name = "static-proxy.yaml".to_string();
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-proxy\n  namespace: {namespace}\n\
             spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: proxy\n    image: registry.example/proxy:1\n"
        )
        .into_bytes();
        let mut agents = Vec::new();
        let mut mirrors = Vec::new();
        for n in &pool {
            let node_dir = dir.path().join(n);
            let kubeconfig = real.agent_kubeconfig_to(n, &format!("https://{}", proxy.addr));
            let agent = AgentProcess::new(n, &node_dir, kubeconfig);
            std::fs::write(agent.manifests.join(&manifest_name), &manifest)
                .expect("the static pod manifest");
            mirrors.push(MirrorPods::start(
                real.node_client(n).await,
                n,
                &agent.manifests,
            ));
            agents.push(agent);
        }
        let world = World {
            namespace,
            maintenance: format!("soak-{}", plan.seed),
            pool,
            spare,
            agents,
            workloads,
            manifest: (manifest_name, manifest),
            mirrors,
            _dir: dir,
        };
        world.wait_settled(admin).await;
        world
    }

    /// Every pod of the round there and Ready (a mirror pod there): the
    /// workloads' replicas, a DaemonSet pod on every node and a mirror pod
    /// on every pool node.
    async fn wait_settled(&self, admin: &kube::Client) {
        let want: i32 = self.workloads.iter().map(|w| w.replicas).sum::<i32>()
            + (self.pool.len() as i32 + 1)
            + self.pool.len() as i32;
        let api: Api<Pod> = Api::namespaced(admin.clone(), &self.namespace);
        let deadline = tokio::time::Instant::now() + SETUP;
        loop {
            let ready = api
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .iter()
                        .filter(|p| crate::common::is_ready(p) || crate::common::is_mirror(p))
                        .count() as i32
                })
                .unwrap_or(0);
            if ready >= want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the round's {want} pods are not Ready within {SETUP:?} ({ready} are)"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Starts every agent.
    pub fn start_agents(&mut self) {
        for a in &mut self.agents {
            a.start();
        }
    }

    /// Stops everything the round started in this process and removes its
    /// nodes and namespace.
    pub async fn tear_down(mut self, real: &Real, admin: &kube::Client) {
        for a in &mut self.agents {
            a.kill().await;
        }
        for m in self.mirrors.drain(..) {
            m.stop().await;
        }
        let mut nodes = self.pool.clone();
        nodes.push(self.spare.clone());
        real.remove_nodes(admin, &nodes).await;
        real.kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
    }
}
