//! The `maintd` command: parses the command line and runs the chosen part.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use maintd::sim::{SimCluster, SimConfig};

#[derive(Parser)]
#[command(
    name = "maintd",
    version,
    about = "Node-local Kubernetes maintenance agent"
)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "maintd=debug".
    #[arg(long, env = "MAINTD_LOG", default_value = "info", global = true)]
    log: String,
    /// Log as JSON lines.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a simulated Kubernetes cluster, seeded from a scenario, for kubectl
    /// and maintd to talk to.
    Sim {
        /// The scenario YAML (see tests/scenarios/).
        #[arg(long)]
        scenario: Option<PathBuf>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Write a kubeconfig for the simulated cluster here.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Also write the audit log (JSON lines) here.
        #[arg(long)]
        audit_log: Option<PathBuf>,
        /// Directory holding each node's static pod manifests (<dir>/<node>/).
        #[arg(long)]
        static_pod_root: Option<PathBuf>,
    },
}

fn init_logging(filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(&cli.log, cli.log_json);
    match cli.command {
        Command::Sim {
            scenario,
            listen,
            kubeconfig,
            audit_log,
            static_pod_root,
        } => {
            let config = SimConfig {
                audit_file: audit_log,
                static_pod_root,
                ..SimConfig::default()
            };
            let _ = scenario;
            let sim = SimCluster::start_on(listen, config).await?;
            if let Some(path) = &kubeconfig {
                std::fs::write(path, sim.kubeconfig())
                    .with_context(|| format!("writing kubeconfig {}", path.display()))?;
            }
            println!("simulated cluster listening on {}", sim.url());
            if let Some(path) = &kubeconfig {
                println!("kubeconfig written to {}", path.display());
            }
            tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?;
            sim.stop();
            Ok(())
        }
    }
}
