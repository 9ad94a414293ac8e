//! `maintd demo`: the whole agent against an embedded simulated cluster.
//! Starts the cluster with the realistic scenario, runs the agent for the
//! busy node, puts the drain taint on it, shows the drain stage by stage,
//! then removes the taint and shows the undo.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use http::Request;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::config::Config;
use crate::drain::progress::EventKind;
use maintd_sim::{SimCluster, SimConfig, scenario};

mod narrate;
use narrate::Narrator;

/// The scenario the demo runs: 3 nodes, 110 pods on node-a.
pub const REALISTIC: &str = include_str!("../tests/scenarios/realistic.yaml");
const NODE: &str = "node-a";

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("the simulated cluster: {0}")]
    Sim(String),
    #[error("the demo did not finish within {0:?}: {1}")]
    Timeout(Duration, String),
    #[error("talking to the simulated cluster: {}", crate::preflight::describe(.0, "the simulated cluster"))]
    Api(#[from] kube::Error),
    #[error("after the undo: {0}")]
    Check(String),
}

/// How the demo prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Human,
    Json,
}

/// The demo's cluster, settled, and an agent config for the busy node.
async fn start_cluster(
    style: Style,
    log: Option<&Path>,
) -> Result<(SimCluster, Config, std::path::PathBuf), DemoError> {
    let scenario =
        scenario::Scenario::from_yaml(REALISTIC).map_err(|e| DemoError::Sim(e.to_string()))?;
    let sim = SimCluster::start_with_scenario(SimConfig::default(), &scenario)
        .await
        .map_err(|e| DemoError::Sim(e.to_string()))?;
    sim.wait_settled(Duration::from_secs(60))
        .await
        .map_err(|e| DemoError::Sim(e.to_string()))?;
    let static_dir = sim
        .static_pod_dir(NODE)
        .ok_or_else(|| DemoError::Sim("no static pod directory".into()))?;
    let kubeconfig =
        std::env::temp_dir().join(format!("maintd-demo-{}.kubeconfig", std::process::id()));
    let _ = std::fs::write(&kubeconfig, sim.kubeconfig());
    if style == Style::Human {
        println!(
            "maintd demo — a simulated cluster at {} (kubeconfig: {})",
            sim.url(),
            kubeconfig.display()
        );
        if let Some(log) = log {
            println!("the agent's log: {}", log.display());
        }
        println!(
            "node {NODE} carries 110 pods: ordinary pods at several priorities, 4 DaemonSets, 3 static pods."
        );
    }
    Ok((sim, Config::for_node(NODE, static_dir), kubeconfig))
}

/// `maintd demo --shutdown`: a simulated logind on a private D-Bus; a
/// `systemctl reboot` of the busy node waits for maintd's ordered drain.
pub async fn run_shutdown(
    style: Style,
    limit: Duration,
    log: Option<&Path>,
) -> Result<(), DemoError> {
    let budget = Duration::from_secs(60);
    let bus = maintd_sim::dbus::PrivateBus::start()
        .map_err(|e| DemoError::Sim(format!("starting a private D-Bus (the shutdown demo needs dbus-daemon: apt-get install dbus): {e}")))?;
    let logind = maintd_sim::logind::SimLogind::start(
        &bus.address,
        maintd_sim::logind::SimLogindConfig {
            inhibit_delay_max: budget,
        },
    )
    .await
    .map_err(|e| DemoError::Sim(e.to_string()))?;
    let (sim, mut config, kubeconfig) = start_cluster(style, log).await?;
    config.shutdown = Some(crate::config::ShutdownSettings {
        sleep: false,
        margin: Duration::from_secs(5),
        bus: Some(bus.address.clone()),
    });
    let client = crate::testbed::agent_client(&sim, &config.node);
    let agent = Agent::new(config, client);
    let progress = agent.progress().clone();
    let mut events = progress.subscribe();
    let stop = CancellationToken::new();
    let task = tokio::spawn(agent.run(stop.clone()));
    let result = tokio::time::timeout(limit, async {
        while !logind.inhibitors().iter().any(|i| i.who == "maintd") {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if style == Style::Human {
            println!(
                "logind: maintd holds a delay lock on shutdown; InhibitDelayMaxUSec is {}s",
                budget.as_secs()
            );
            println!("\n$ systemctl reboot");
        }
        let started = std::time::Instant::now();
        logind.reboot().await;
        let mut out = Narrator::new(style, std::io::stdout().is_terminal());
        out.follow(&mut events, &progress, EventKind::ShutdownReleased)
            .await;
        let record = logind.wait_for_shutdowns(1).await.into_iter().next();
        Ok::<_, DemoError>((record, started.elapsed()))
    })
    .await;
    stop.cancel();
    let _ = task.await;
    let _ = std::fs::remove_file(&kubeconfig);
    let (record, _elapsed) = match result {
        Err(_) => {
            return Err(DemoError::Timeout(
                limit,
                format!("{:?}", progress.status().phase),
            ));
        }
        Ok(r) => r?,
    };
    let record = record.ok_or_else(|| DemoError::Check("logind recorded no shutdown".into()))?;
    if style == Style::Json {
        let line = json!({"t_ms": progress.event(EventKind::ShutdownReleased).t_ms, "event": "shutdown", "node": NODE, "action": record.action, "delayed_ms": record.delayed.as_millis() as u64, "budget_ms": budget.as_millis() as u64, "timed_out": record.timed_out, "waited_for": record.waited_for});
        println!("{line}");
    } else {
        println!(
            "\nlogind: {} proceeded after waiting {:.2}s of its {}s budget{}",
            record.action,
            record.delayed.as_secs_f64(),
            budget.as_secs(),
            if record.timed_out {
                " (the budget ran out)"
            } else {
                ""
            }
        );
    }
    if record.timed_out || record.delayed > budget {
        return Err(DemoError::Check(
            "the shutdown was held to the end of logind's budget".into(),
        ));
    }
    Ok(())
}

/// `maintd demo`: drain the busy node for a taint, then undo. `log` is where
/// the agent's log goes, named in the narrative.
pub async fn run(style: Style, limit: Duration, log: Option<&Path>) -> Result<(), DemoError> {
    let (sim, config, kubeconfig) = start_cluster(style, log).await?;
    let client = crate::testbed::agent_client(&sim, &config.node);
    let agent = Agent::new(config, client);
    let progress = agent.progress().clone();
    let mut events = progress.subscribe();
    let stop = CancellationToken::new();
    let task = tokio::spawn(agent.run(stop.clone()));
    let client = sim.client();
    let result = tokio::time::timeout(limit, async {
        set_drain_taint(&client, true).await?;
        if style == Style::Human {
            println!("\n$ kubectl taint node {NODE} maintd.io/drain=demo:NoSchedule");
        }
        let mut out = Narrator::new(style, std::io::stdout().is_terminal());
        out.follow(&mut events, &progress, EventKind::DrainCompleted)
            .await;
        let timeline = write_timeline(&progress, log);
        set_drain_taint(&client, false).await?;
        if style == Style::Human {
            println!("\n$ kubectl taint node {NODE} maintd.io/drain-");
        }
        out.follow(&mut events, &progress, EventKind::UndoCompleted)
            .await;
        if style == Style::Human {
            match timeline {
                Ok(path) => println!("\nthe drain as a picture: {}", path.display()),
                Err(e) => println!("\nno picture of the drain: {e}"),
            }
        }
        Ok::<_, DemoError>(())
    })
    .await;
    stop.cancel();
    let _ = task.await;
    let _ = std::fs::remove_file(&kubeconfig);
    match result {
        Err(_) => Err(DemoError::Timeout(
            limit,
            format!("{:?}", progress.status().phase),
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) => check_undone(&client).await,
    }
}

/// Writes the drain's timeline next to the agent's log (`maintd timeline`
/// draws the same from a running agent).
fn write_timeline(
    progress: &crate::drain::progress::Progress,
    log: Option<&Path>,
) -> Result<std::path::PathBuf, crate::timeline::TimelineError> {
    let dir = log
        .and_then(Path::parent)
        .map_or_else(std::env::temp_dir, Path::to_path_buf);
    let path = dir.join(format!("maintd-demo-{}-timeline.svg", std::process::id()));
    crate::timeline::write_svg(progress, &path)?;
    Ok(path)
}

/// Puts the drain taint on the node, or takes it off, as `kubectl taint`
/// does: read the node, send the whole new taint list.
async fn set_drain_taint(client: &kube::Client, on: bool) -> Result<(), DemoError> {
    let get = Request::get(format!("/api/v1/nodes/{NODE}"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let node: Value = client.request(get).await?;
    let mut taints: Vec<Value> = node["spec"]["taints"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter(|t| t["key"] != "maintd.io/drain")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if on {
        taints.push(json!({"key": "maintd.io/drain", "value": "demo", "effect": "NoSchedule"}));
    }
    let list = if taints.is_empty() {
        Value::Null
    } else {
        Value::Array(taints)
    };
    let patch = json!({"spec": {"taints": list}});
    let req = Request::patch(format!("/api/v1/nodes/{NODE}?fieldManager=kubectl-taint"))
        .header("content-type", "application/strategic-merge-patch+json")
        .body(serde_json::to_vec(&patch).unwrap_or_default())
        .map_err(kube::Error::HttpError)?;
    client.request::<Value>(req).await?;
    Ok(())
}

/// The demo ends with the node as it began: schedulable, no maintd taint.
async fn check_undone(client: &kube::Client) -> Result<(), DemoError> {
    let req = Request::get(format!("/api/v1/nodes/{NODE}"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let node: Value = client.request(req).await?;
    if node["spec"]["unschedulable"] == true {
        return Err(DemoError::Check("the node is still cordoned".into()));
    }
    if node["spec"]["taints"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["key"] == "maintd.io/draining"))
    {
        return Err(DemoError::Check(
            "maintd's taint is still on the node".into(),
        ));
    }
    Ok(())
}
