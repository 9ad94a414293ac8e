//! One soak round, live: the cluster, an agent per node (and a logind for
//! the nodes that will be shut down), and the soak's hand on them. The
//! soak's own writes go to the simulator's store directly, so an API fault
//! it injects hits the agents only.

use std::time::Duration;

use maintd::agent::Agent;
use maintd::config::{Config, ShutdownSettings};
use maintd::drain::executor::TimeoutPolicy;
use maintd_sim::SimCluster;
use maintd_sim::dbus::PrivateBus;
use maintd_sim::logind::{RestartMode, SimLogind, SimLogindConfig};
use maintd_sim::resources::Gr;
use maintd_sim::verbs::{self, Part, Writer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::actions::{Action, Fault, Stage, Target};
use super::world::{NODES, POOL_LABEL, node_name};
use crate::common::endpoint::{free_port, request};

/// What a round draws for its agents besides the cluster.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub stage_timeout: Option<Duration>,
    pub on_timeout: TimeoutPolicy,
    /// logind's `InhibitDelayMaxUSec` on nodes that get shut down.
    pub shutdown_budget: Duration,
}

/// One running agent; killed by aborting its task.
pub struct Running {
    pub agent: Agent,
    /// The agent's unix socket.
    pub local: std::path::PathBuf,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Gone at once, as a process killed: its task aborted, every task it
    /// started told to end.
    fn kill(self) {
        self.task.abort();
        self.stop.cancel();
    }
}

/// A node's logind, on a private bus.
pub struct Host {
    _bus: PrivateBus,
    pub logind: SimLogind,
    /// Shutdowns that went through and were followed by a reboot.
    pub rebooted: usize,
}

/// One node of the round.
pub struct Rig {
    pub name: String,
    pub agent: Option<Running>,
    pub host: Option<Host>,
    /// An admin cordoned the node (the soak did, while it was schedulable).
    pub admin_cordoned: bool,
    /// A trigger with a deadline (shutdown, local drain) ran: the agent
    /// may then delete pods past their budgets.
    pub had_deadline: bool,
}

/// A live round.
pub struct Round {
    pub sim: SimCluster,
    pub nodes: Vec<Rig>,
    spec: AgentSpec,
    /// Where the agents' unix sockets are.
    sockets: tempfile::TempDir,
}

fn soak_writer() -> Writer {
    Writer {
        manager: "soak".into(),
        force: false,
        user: None,
    }
}

impl Round {
    /// Starts an agent on every node; `shut_down` nodes also get a logind.
    pub async fn start(sim: SimCluster, spec: AgentSpec, shut_down: &[usize]) -> Round {
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let host = if shut_down.contains(&i) {
                Some(start_logind(spec.shutdown_budget).await)
            } else {
                None
            };
            nodes.push(Rig {
                name: node_name(i),
                agent: None,
                host,
                admin_cordoned: false,
                had_deadline: false,
            });
        }
        let sockets = tempfile::tempdir().unwrap();
        let mut round = Round {
            sim,
            nodes,
            spec,
            sockets,
        };
        for i in 0..NODES {
            round.start_agent(i);
        }
        round
    }

    fn start_agent(&mut self, i: usize) {
        let rig = &self.nodes[i];
        let dir = self.sim.static_pod_dir(&rig.name).unwrap_or_default();
        let mut config = Config::for_node(&rig.name, dir);
        config.api.call_timeout = Duration::from_secs(2);
        config.api.watch_idle_timeout = Duration::from_secs(3);
        config.api.unreachable_release = Duration::from_secs(2);
        config.stage_timeout = self.spec.stage_timeout;
        config.on_stage_timeout = self.spec.on_timeout;
        // A new path per start: a restarted agent must not need the old
        // one's socket gone.
        let local = self
            .sockets
            .path()
            .join(format!("{}-{}.sock", rig.name, free_port().port()));
        config.listen_local = Some(local.clone());
        config.shutdown = rig.host.as_ref().map(|h| ShutdownSettings {
            sleep: false,
            margin: Duration::from_millis(500),
            bus: Some(h.logind_address()),
        });
        let agent = Agent::new(config, maintd::testbed::agent_client(&self.sim, &rig.name));
        let stop = CancellationToken::new();
        let task = tokio::spawn(agent.clone().run(stop.clone()));
        self.nodes[i].agent = Some(Running {
            agent,
            local,
            stop,
            task,
        });
    }

    /// Kills node `i`'s agent and starts a fresh one, which must find
    /// where the node stands from the cluster and the disk.
    pub fn restart_agent(&mut self, i: usize) {
        if let Some(a) = self.nodes[i].agent.take() {
            a.kill();
        }
        self.start_agent(i);
    }

    /// Does one action.
    pub async fn apply(&mut self, action: &Action) {
        self.reboot_shut_down_nodes().await;
        match action {
            Action::Taint(n) => self.set_taint(*n, true),
            Action::Untaint(n) => self.set_taint(*n, false),
            Action::Maintenance(m, target, stage) => self.create_maintenance(*m, target, *stage),
            Action::SetStage(m, stage) => self.set_stage(*m, *stage),
            Action::DeleteMaintenance(m) => self.delete_maintenance(*m),
            Action::LocalDrain(n, deadline) => self.local_drain(*n, *deadline).await,
            Action::LocalUndrain(n) => self.local_undrain(*n).await,
            Action::Shutdown(n) => self.shutdown(*n).await,
            Action::CancelShutdown(n) => {
                if let Some(h) = &self.nodes[*n].host {
                    h.logind.cancel_shutdown().await;
                }
            }
            Action::Kill(n) => self.restart_agent(*n),
            Action::Fault(f) => self.fault(*f),
            Action::ClearFaults => self.sim.state.faults.clear(),
            Action::AdminCordon(n) => self.admin_cordon(*n, true),
            Action::AdminUncordon(n) => self.admin_cordon(*n, false),
        }
    }

    /// Ends whatever the round started: every trigger cancelled, faults
    /// lifted, shut-down nodes rebooted.
    pub async fn finish(&mut self) {
        self.sim.state.faults.clear();
        for n in 0..NODES {
            self.set_taint(n, false);
            self.local_undrain(n).await;
            if let Some(h) = &self.nodes[n].host
                && h.logind.shutdown_records().len() == h.rebooted
            {
                h.logind.cancel_shutdown().await;
            }
        }
        let names: Vec<String> = self
            .sim
            .state
            .store()
            .list(&Gr::new("maintd.io", "nodemaintenances"), None)
            .iter()
            .map(|m| maintd_sim::meta::name(m).to_string())
            .collect();
        for name in names {
            self.remove(&Gr::new("maintd.io", "nodemaintenances"), &name);
        }
        self.reboot_shut_down_nodes().await;
    }

    /// A node whose shutdown went through boots again: logind and the
    /// agent start afresh (pods and the disk are as the shutdown left them).
    async fn reboot_shut_down_nodes(&mut self) {
        for i in 0..NODES {
            let Some(h) = self.nodes[i].host.as_mut() else {
                continue;
            };
            if h.logind.shutdown_records().len() == h.rebooted {
                continue;
            }
            h.rebooted = h.logind.shutdown_records().len();
            let _ = h.logind.restart(RestartMode::LoseState).await;
            self.restart_agent(i);
        }
    }

    /// Stops every agent.
    pub fn stop(&mut self) {
        for rig in &mut self.nodes {
            if let Some(a) = rig.agent.take() {
                a.kill();
            }
        }
    }

    /// Reads, changes and writes an object with a resourceVersion
    /// precondition, again on a conflict.
    fn edit(&self, gr: &Gr, name: &str, change: impl Fn(&mut Value)) {
        let Some(def) = self.sim.state.store().resource(gr) else {
            return;
        };
        for _ in 0..20 {
            let Some(old) = self.sim.state.store().get(gr, "", name) else {
                return;
            };
            let mut new = (*old).clone();
            change(&mut new);
            match verbs::update(
                &self.sim.state,
                &def,
                "",
                name,
                Part::Main,
                new,
                &soak_writer(),
            ) {
                Err(e) if e.code == 409 => continue,
                _ => return,
            }
        }
    }

    fn remove(&self, gr: &Gr, name: &str) {
        let def = self.sim.state.store().resource(gr);
        if let Some(def) = def {
            let _ = verbs::delete(&self.sim.state, &def, "", name, &Default::default());
        }
    }

    fn set_taint(&self, n: usize, on: bool) {
        self.edit(&Gr::nodes(), &node_name(n), |node| {
            let mut taints: Vec<Value> = node["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| t["key"] != "maintd.io/drain")
                .collect();
            if on {
                taints.push(
                    json!({"key": "maintd.io/drain", "value": "soak", "effect": "NoSchedule"}),
                );
            }
            node["spec"]["taints"] = json!(taints);
        });
    }

    /// An admin's cordon or uncordon; a cordon of a node that is already
    /// unschedulable changes nothing, as `kubectl cordon` says.
    fn admin_cordon(&mut self, n: usize, on: bool) {
        let node = self.sim.state.store().get(&Gr::nodes(), "", &node_name(n));
        let cordoned = node.is_some_and(|node| node["spec"]["unschedulable"] == true);
        if on == cordoned {
            return;
        }
        self.edit(&Gr::nodes(), &node_name(n), |node| {
            node["spec"]["unschedulable"] = json!(on);
        });
        self.nodes[n].admin_cordoned = on;
    }

    fn create_maintenance(&self, m: usize, target: &Target, stage: Stage) {
        let mut spec = json!({"stage": stage.as_str(), "reason": "soak"});
        match target {
            Target::Node(n) => spec["nodeName"] = json!(node_name(*n)),
            Target::Pool(p) => spec["nodeSelector"] = json!({"matchLabels": {POOL_LABEL: p}}),
        }
        let gr = Gr::new("maintd.io", "nodemaintenances");
        let Some(def) = self.sim.state.store().resource(&gr) else {
            return;
        };
        let obj = json!({"apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
                         "metadata": {"name": format!("soak-{m}")}, "spec": spec});
        let _ = verbs::create(&self.sim.state, &def, None, obj, &soak_writer(), false);
    }

    fn set_stage(&self, m: usize, stage: Stage) {
        let gr = Gr::new("maintd.io", "nodemaintenances");
        self.edit(&gr, &format!("soak-{m}"), |nm| {
            nm["spec"]["stage"] = json!(stage.as_str());
        });
    }

    fn delete_maintenance(&self, m: usize) {
        self.remove(
            &Gr::new("maintd.io", "nodemaintenances"),
            &format!("soak-{m}"),
        );
    }

    async fn local_drain(&mut self, n: usize, deadline: Option<u64>) {
        let Some(a) = &self.nodes[n].agent else {
            return;
        };
        let body = match deadline {
            Some(s) => json!({"reason": "soak", "deadline_seconds": s}),
            None => json!({"reason": "soak"}),
        };
        request(&a.local, "POST", "/v1/drain", &body.to_string()).await;
        self.nodes[n].had_deadline |= deadline.is_some();
    }

    async fn local_undrain(&self, n: usize) {
        if let Some(a) = &self.nodes[n].agent {
            request(&a.local, "POST", "/v1/undrain", "{}").await;
        }
    }

    async fn shutdown(&mut self, n: usize) {
        if let Some(h) = &self.nodes[n].host {
            h.logind.reboot().await;
            self.nodes[n].had_deadline = true;
        }
    }

    fn fault(&self, f: Fault) {
        let faults = &self.sim.state.faults;
        match f {
            Fault::Errors(share, code) => faults.fail_requests(share, code),
            Fault::Delay(ms) => faults.delay_requests(Duration::from_millis(ms)),
            Fault::BlackHole => faults.black_hole(true),
            Fault::Freeze => faults.freeze_open_connections(),
            Fault::Restart => self.sim.state.restart(),
            Fault::ForbidEvictions => faults.forbid("/api/v1/namespaces/default/pods/"),
        }
    }
}

impl Host {
    fn logind_address(&self) -> String {
        self._bus.address.clone()
    }
}

async fn start_logind(budget: Duration) -> Host {
    let bus = PrivateBus::start().expect("dbus-daemon starts (install the dbus package)");
    let logind = SimLogind::start(
        &bus.address,
        SimLogindConfig {
            inhibit_delay_max: budget,
        },
    )
    .await
    .expect("the simulated logind serves its bus");
    Host {
        _bus: bus,
        logind,
        rebooted: 0,
    }
}
