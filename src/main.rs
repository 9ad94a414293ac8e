//! The `maintd` command: parses the command line and runs the chosen part.

#[cfg(feature = "sim")]
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use maintd::agent::Agent;
use maintd::config::AgentArgs;
#[cfg(feature = "sim")]
use maintd_sim::{SimCluster, SimConfig};
use tokio_util::sync::CancellationToken;

/// `maintd --version`: the release and the git revision it was built from
/// (see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("MAINTD_GIT_REVISION"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "maintd",
    version = VERSION,
    about = "Node-local Kubernetes maintenance agent"
)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. "info" or "maintd=debug".
    /// kube's request builder is off by default: it logs every failed call
    /// as an ERROR that maintd's own message already says in words.
    #[arg(
        long,
        env = "MAINTD_LOG",
        default_value = "info,kube_client::client::builder=off",
        global = true
    )]
    log: String,
    /// Log as JSON lines.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent for this node (the DaemonSet entrypoint).
    Run {
        #[command(flatten)]
        agent: Box<AgentArgs>,
        /// Kubeconfig to use; default: KUBECONFIG, ~/.kube/config, or the
        /// in-cluster service account.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Run the agent against an embedded simulated cluster: drain the busy
    /// node of the realistic scenario, then undo. Nothing to install.
    #[cfg(feature = "sim")]
    Demo {
        /// One JSON object per event, for scripts.
        #[arg(long)]
        json: bool,
        /// Simulate `systemctl reboot` of the node instead: logind waits on
        /// maintd's shutdown lock while the node drains.
        #[arg(long)]
        shutdown: bool,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 90)]
        timeout_seconds: u64,
    },
    /// Run the node helper (the DaemonSet's root container, with no API
    /// credentials): hold logind's shutdown lock and move static pod
    /// manifests for the agent of the same pod, which talks to it with
    /// `maintd run --node-helper`.
    NodeHelper {
        /// The socket the agent reaches the helper on, in a volume only the
        /// pod shares.
        #[arg(
            long,
            env = "MAINTD_NODE_HELPER",
            default_value = "/run/maintd-pod/helper.sock"
        )]
        socket: PathBuf,
        /// The agent's user id: the only caller answered besides root.
        #[arg(long, env = "MAINTD_AGENT_UID", default_value_t = 65532)]
        agent_uid: u32,
        /// The agent's group id: the socket is made the group's; the helper
        /// must be a member of it.
        #[arg(long, env = "MAINTD_AGENT_GID", default_value_t = 65532)]
        agent_gid: u32,
        #[command(flatten)]
        static_pods: StaticPodArgs,
        /// The D-Bus address of logind's bus; default: the system bus.
        #[arg(long, env = "MAINTD_LOGIND_BUS")]
        logind_bus: Option<String>,
        /// The host's socket for `maintd drain`, served for root only and
        /// passed through to --agent-socket. Empty to turn it off.
        #[arg(long, env = "MAINTD_HOST_SOCKET", default_value = maintd::cli::DEFAULT_SOCKET)]
        host_socket: String,
        /// The agent's own drain socket (its --listen-local).
        #[arg(
            long,
            env = "MAINTD_AGENT_SOCKET",
            default_value = "/run/maintd-pod/local.sock"
        )]
        agent_socket: PathBuf,
    },
    /// Put static pod manifests that maintd stashed back into the kubelet's
    /// directory (for a boot-time unit ordered before kubelet.service).
    RestoreStaticPods {
        #[command(flatten)]
        static_pods: StaticPodArgs,
    },
    /// Print the drain plan for a node without acting: its stages, their pods,
    /// and what is skipped and why.
    Plan {
        /// The node whose plan to print.
        #[arg(long, env = "NODE_NAME")]
        node: String,
        /// Kubeconfig to use; default: KUBECONFIG, ~/.kube/config, or the
        /// in-cluster service account.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Show where this node's drain stands (asks the agent's local endpoint).
    Status {
        #[command(flatten)]
        endpoint: EndpointArg,
        /// Output format: a table, or the status document as JSON.
        #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Draw this node's current or last drain as a picture: a row per stage
    /// (or per pod), refusals by budgets, escalations, the deadline (asks
    /// the agent's endpoint, `GET /v1/timeline.svg`).
    Timeline {
        #[command(flatten)]
        endpoint: EndpointArg,
        /// Output format: the SVG, or an HTML page holding it.
        #[arg(short = 'o', long, value_enum, default_value_t = Picture::Svg)]
        output: Picture,
        /// Write the picture to this file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Draw this node's last drain from the cluster's Events instead
        /// (a row per stage), as any kubeconfig that may list Events can.
        #[arg(long)]
        node: Option<String>,
        /// With --node: the kubeconfig to use (default as kubectl's).
        #[arg(long, requires = "node")]
        kubeconfig: Option<PathBuf>,
    },
    /// Show every node's drain, as kubectl shows a resource: a row per
    /// node from the NodeDrain objects the agents write (`-o wide` for
    /// more columns, `-o json|yaml` for the objects), `-w` to follow.
    Get {
        /// Show this node's drain only.
        node: Option<String>,
        /// Output format; a table by default.
        #[arg(short = 'o', long, value_enum)]
        output: Option<GetOutput>,
        /// Only the nodes whose labels match this selector (NodeDrain
        /// objects carry no labels: it is matched against the Nodes').
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// After the table, print a line per change until Ctrl-C.
        #[arg(short = 'w', long)]
        watch: bool,
        /// Kubeconfig to use; default: KUBECONFIG or ~/.kube/config.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
    },
    /// Drain a node. With NODE, from anywhere kubectl works: create the
    /// NodeMaintenance drain-NODE for that node, as `kubectl drain` would
    /// drain it. Without NODE, on the node itself: ask its agent on the
    /// local socket. With --wait, exits 0 only once the node is drained:
    /// `maintd drain --wait && systemctl reboot`.
    Drain {
        /// The node to drain through the cluster (a NodeMaintenance).
        node: Option<String>,
        #[command(flatten)]
        endpoint: EndpointArg,
        /// Why (shown in the status and the agent's events).
        #[arg(long, default_value = "maintd drain")]
        reason: String,
        /// Wait until the node is drained, printing progress.
        #[arg(long)]
        wait: bool,
        /// With NODE and --wait: give up waiting after this long (90s, 15m,
        /// 1h; default 1h): exit 1, printing where the drain stands; the
        /// drain itself goes on.
        #[arg(long, requires_all = ["node", "wait"])]
        timeout: Option<String>,
        /// Without NODE, with --wait: give up waiting after this many
        /// seconds (exit 2, printing the blockers); the drain itself goes
        /// on.
        #[arg(long, requires = "wait", conflicts_with = "node")]
        timeout_seconds: Option<u64>,
        /// Without NODE: ask the agent to finish within this many seconds,
        /// escalating to deletion as on shutdown.
        #[arg(long, conflicts_with = "node")]
        deadline_seconds: Option<u64>,
        /// With NODE: the kubeconfig to use (default as kubectl's).
        #[arg(long, requires = "node")]
        kubeconfig: Option<PathBuf>,
    },
    /// Undo a drain. With NODE: delete the NodeMaintenance `maintd drain
    /// NODE` made (only that one). Without NODE, on the node itself:
    /// withdraw the local drain request. Either way the agent undoes the
    /// drain unless another trigger still wants it.
    Undrain {
        /// The node to bring back through the cluster.
        node: Option<String>,
        #[command(flatten)]
        endpoint: EndpointArg,
        /// With NODE: wait until the node takes pods again and its
        /// NodeDrain says so, printing progress.
        #[arg(long, requires = "node")]
        wait: bool,
        /// With --wait: give up after this long (90s, 15m, 1h; default 1h).
        #[arg(long, requires = "wait")]
        timeout: Option<String>,
        /// With NODE: the kubeconfig to use (default as kubectl's).
        #[arg(long, requires = "node")]
        kubeconfig: Option<PathBuf>,
    },
    /// Run a simulated Kubernetes cluster, seeded from a scenario, for kubectl
    /// and maintd to talk to.
    #[cfg(feature = "sim")]
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
    /// Print the NodeMaintenance CRD as YAML (what deploy/base/crd.yaml holds).
    Crd,
    /// Print a reference page of docs/ generated from maintd's own
    /// definitions (a test keeps docs/ in step; see docs/development.md).
    #[command(hide = true)]
    Docs {
        #[arg(value_enum)]
        page: maintd::reference::Page,
    },
}

/// Where the static pod manifests are, for the commands that move them.
#[derive(clap::Args)]
struct StaticPodArgs {
    /// Default: the kubelet's staticPodPath, as `maintd run` finds it.
    #[arg(long, env = "MAINTD_STATIC_POD_DIR")]
    static_pod_dir: Option<PathBuf>,
    /// The kubelet's config file, read for its staticPodPath. Default: as
    /// `maintd run` finds it.
    #[arg(long, env = "MAINTD_KUBELET_CONFIG")]
    kubelet_config: Option<PathBuf>,
    /// Where maintd keeps the manifests during maintenance. Default:
    /// `.maintd-stash` inside the static pod directory (an earlier
    /// release's stash beside it is restored too).
    #[arg(long, env = "MAINTD_STATIC_POD_STASH")]
    static_pod_stash: Option<PathBuf>,
}

impl StaticPodArgs {
    /// The stash as `maintd run` finds it (the flag, else the kubelet's
    /// staticPodPath); `warn` is told what an operator should fix.
    fn stash(self, warn: impl Fn(&str)) -> maintd::drain::static_pods::StaticPodStash {
        let dir = maintd::drain::static_path::resolve(
            self.static_pod_dir,
            self.kubelet_config.as_deref(),
        );
        if let Some(w) = &dir.warning {
            warn(w);
        }
        maintd::drain::static_pods::StaticPodStash::new(dir.dir, self.static_pod_stash)
    }
}

#[derive(clap::Args)]
struct EndpointArg {
    /// The agent's unix socket (a path), or host:port of a listener for
    /// reads (`status` only).
    #[arg(long, env = "MAINTD_ENDPOINT", default_value = maintd::cli::DEFAULT_SOCKET)]
    endpoint: String,
}

/// What `maintd timeline` writes: the SVG, or a page holding it.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Picture {
    Svg,
    Html,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

/// What `maintd get -o` prints besides the table.
#[derive(Clone, Copy, clap::ValueEnum)]
enum GetOutput {
    /// The table with more columns.
    Wide,
    /// The NodeDrain objects (several as a v1 List, as kubectl prints them).
    Json,
    /// The same as YAML.
    Yaml,
}

/// A client for the cluster, and the API server's address for messages: an
/// explicit kubeconfig, or whatever kube's inference finds (KUBECONFIG,
/// ~/.kube/config, in-cluster), set up as `node`'s agent's (see
/// maintd::cluster::agent_config): kube's own retry off, and a User-Agent
/// naming the node.
async fn client(
    kubeconfig: Option<&PathBuf>,
    node: &str,
) -> anyhow::Result<(kube::Client, String)> {
    use maintd::preflight::one_line;
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                anyhow::anyhow!("reading kubeconfig {}: {}", path.display(), one_line(&e.to_string()))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| {
                    anyhow::anyhow!("using kubeconfig {}: {}", path.display(), one_line(&e.to_string()))
                })?
        }
        None => kube::Config::infer().await.map_err(|e| {
            anyhow::anyhow!(
                "no cluster credentials: not in a pod with a service account, and no kubeconfig ({}); pass --kubeconfig FILE or set KUBECONFIG",
                one_line(&e.to_string())
            )
        })?,
    };
    let server = config.cluster_url.to_string();
    let client = maintd::client::builder(maintd::cluster::agent_config(config, node))
        .map_err(|e| {
            anyhow::anyhow!(
                "building the API client for {server}: {}",
                one_line(&e.to_string())
            )
        })?
        .build();
    Ok((client, server))
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
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

/// The demo's logging: the agent's log (at `filter`) goes to a file, so that
/// stdout is the story alone; warnings and errors also go to stderr. Returns
/// the file, or None (then stderr at warn only) when it cannot be created.
#[cfg(feature = "sim")]
fn init_demo_logging(filter: &str) -> Option<PathBuf> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer, filter::LevelFilter, fmt};
    let path = std::env::temp_dir().join(format!("maintd-demo-{}.log", std::process::id()));
    let file = std::fs::File::create(&path).ok();
    let to_file = file.map(|f| {
        fmt::layer()
            .with_ansi(false)
            .with_writer(std::sync::Arc::new(f))
            .with_filter(EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info")))
    });
    let logged = to_file.is_some();
    tracing_subscriber::registry()
        .with(to_file)
        .with(
            // The story on stdout already says what the warnings would;
            // they are in the log file. Errors still show.
            fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(LevelFilter::ERROR),
        )
        .init();
    logged.then_some(path)
}

/// Ends a client command that failed: the message alone (no backtrace,
/// whatever RUST_BACKTRACE says), exit 1.
fn fail(e: maintd::cli::CliError) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1)
}

/// Worker threads of the runtime, whatever the node's core count: the
/// agent mostly waits on the network, and each worker costs resident
/// memory (its stack, its allocator arena). Tokio's default, one per core,
/// would start 96 of them on a 96-core node.
const WORKER_THREADS: usize = 2;

/// Every error that ends `maintd` reads as one line, `error: what failed:
/// why`, and exits 1.
fn main() {
    maintd::memory::limit_arenas();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(cli)) {
        eprintln!("error: {}", maintd::preflight::one_line(&format!("{e:#}")));
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    #[cfg_attr(not(feature = "sim"), allow(unused_variables))]
    let demo_log: Option<PathBuf> = match cli.command {
        #[cfg(feature = "sim")]
        Command::Demo { .. } => init_demo_logging(&cli.log),
        _ => {
            init_logging(&cli.log, cli.log_json);
            None
        }
    };
    match cli.command {
        Command::Run { agent, kubeconfig } => {
            let config = agent.into_config()?;
            let (client, server) = client(kubeconfig.as_ref(), &config.node).await?;
            // In a pod the namespace is the pod's own, so it exists.
            let namespace = config
                .own_pod
                .is_none()
                .then_some(maintd::preflight::DEFAULT_NAMESPACE);
            let warnings =
                maintd::preflight::check(&client, &server, &config.node, namespace).await?;
            for w in warnings {
                tracing::warn!("{w}; starting anyway");
            }
            let stop = CancellationToken::new();
            let agent = Agent::new(config, client);
            let (pods, node) = (agent.drainer.pods.clone(), agent.node.clone());
            let synced = async move {
                pods.wait_until(maintd::index::Index::synced).await;
                node.wait_until(maintd::index::Index::synced).await;
            };
            tokio::spawn(maintd::memory::keep_low(
                agent.progress().clone(),
                synced,
                stop.clone(),
            ));
            let task = tokio::spawn(agent.run(stop.clone()));
            shutdown_signal().await;
            tracing::info!("stopping; a drain in progress resumes when the agent starts again");
            stop.cancel();
            let _ = task.await;
            Ok(())
        }
        #[cfg(feature = "sim")]
        Command::Demo {
            json,
            shutdown,
            timeout_seconds,
        } => {
            let style = if json {
                maintd::demo::Style::Json
            } else {
                maintd::demo::Style::Human
            };
            let limit = std::time::Duration::from_secs(timeout_seconds);
            if shutdown {
                maintd::demo::run_shutdown(style, limit, demo_log.as_deref()).await?;
            } else {
                maintd::demo::run(style, limit, demo_log.as_deref()).await?;
            }
            Ok(())
        }
        Command::NodeHelper {
            socket,
            agent_uid,
            agent_gid,
            static_pods,
            logind_bus,
            host_socket,
            agent_socket,
        } => {
            let stash = static_pods.stash(|w| tracing::warn!("{w}"));
            let config = maintd::node_helper::HelperConfig {
                socket,
                agent_uid,
                agent_gid,
                stash,
                bus: logind_bus.map_or(
                    maintd::logind::BusAddress::System,
                    maintd::logind::BusAddress::Address,
                ),
                relay: (!host_socket.trim().is_empty())
                    .then(|| (PathBuf::from(host_socket.trim()), agent_socket)),
            };
            let stop = CancellationToken::new();
            let mut task = tokio::spawn(maintd::node_helper::serve(config, stop.clone()));
            tokio::select! {
                () = shutdown_signal() => {
                    stop.cancel();
                    let _ = (&mut task).await;
                    Ok(())
                }
                done = &mut task => {
                    done.context("the node helper stopped")?
                        .context("the node helper cannot listen")?;
                    Ok(())
                }
            }
        }
        Command::RestoreStaticPods { static_pods } => {
            let stash = static_pods.stash(|w| eprintln!("warning: {w}"));
            let report = stash.restore().context("restoring static pod manifests")?;
            if let Some(r) = &report.recovered {
                println!("finished {r}");
            }
            for f in &report.restored {
                println!("restored {}", stash.manifest_dir.join(f).display());
            }
            for f in &report.conflicts {
                println!(
                    "kept both: a manifest of that name was already back; the stashed copy is {}",
                    stash.stash_dir.join(f).display()
                );
            }
            if report.restored.is_empty() && report.conflicts.is_empty() {
                println!("nothing to restore");
            }
            Ok(())
        }
        Command::Plan {
            node,
            kubeconfig,
            output,
        } => {
            let (client, server) = client(kubeconfig.as_ref(), &node).await?;
            maintd::preflight::node_exists(&client, &server, &node).await?;
            let plan = maintd::plan_cmd::plan_for_node(&client, &node)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "listing the pods of node {node}: {}",
                        maintd::preflight::describe(&e, &server)
                    )
                })?;
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
                Output::Text => print!("{}", maintd::plan_cmd::render(&plan)),
            }
            Ok(())
        }
        Command::Status { endpoint, output } => {
            let st = maintd::cli::LocalClient::new(&endpoint.endpoint)
                .status()
                .await
                .unwrap_or_else(|e| fail(e));
            match output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&st)?),
                Output::Text => print!("{}", maintd::cli::render_status(&st)),
            }
            Ok(())
        }
        Command::Timeline {
            endpoint,
            output,
            out,
            node,
            kubeconfig,
        } => {
            let svg = match node {
                Some(node) => {
                    let (client, _) = client(kubeconfig.as_ref(), &node).await?;
                    let chart = maintd::timeline::chart_from_cluster(&client, &node).await?;
                    maintd::timeline::svg::render(&chart)
                }
                None => maintd::cli::LocalClient::new(&endpoint.endpoint)
                    .timeline_svg()
                    .await
                    .unwrap_or_else(|e| fail(e)),
            };
            let text = match output {
                Picture::Svg => svg,
                Picture::Html => maintd::timeline::svg::page(&svg),
            };
            match out {
                Some(path) => std::fs::write(&path, text)
                    .with_context(|| format!("writing the timeline to {}", path.display()))?,
                None => print!("{text}"),
            }
            Ok(())
        }
        Command::Get {
            node,
            output,
            selector,
            watch,
            kubeconfig,
        } => {
            use maintd::fleet::get::{Format, GetOptions};
            let opts = GetOptions {
                node,
                format: match output {
                    None => Format::Table,
                    Some(GetOutput::Wide) => Format::Wide,
                    Some(GetOutput::Json) => Format::Json,
                    Some(GetOutput::Yaml) => Format::Yaml,
                },
                selector,
                watch,
            };
            tokio::select! {
                r = maintd::fleet::get_drains(kubeconfig.as_deref(), &opts) => r?,
                () = shutdown_signal(), if watch => {}
            }
            Ok(())
        }
        Command::Drain {
            node: Some(node),
            reason,
            wait,
            timeout,
            kubeconfig,
            ..
        } => {
            let timeout = timeout.as_deref();
            maintd::fleet::drain_node(kubeconfig.as_deref(), &node, &reason, wait, timeout).await?;
            Ok(())
        }
        Command::Undrain {
            node: Some(node),
            wait,
            timeout,
            kubeconfig,
            ..
        } => {
            maintd::fleet::undrain_node(kubeconfig.as_deref(), &node, wait, timeout.as_deref())
                .await?;
            Ok(())
        }
        Command::Drain {
            endpoint,
            reason,
            wait,
            timeout_seconds,
            deadline_seconds,
            ..
        } => {
            let client = maintd::cli::LocalClient::new(&endpoint.endpoint);
            let st = client
                .drain(&reason, deadline_seconds)
                .await
                .unwrap_or_else(|e| fail(e));
            if !wait {
                println!("{}", maintd::cli::progress_line(&st));
                return Ok(());
            }
            let timeout = timeout_seconds.map(std::time::Duration::from_secs);
            let code = maintd::cli::wait_drained(&client, timeout)
                .await
                .unwrap_or_else(|e| fail(e));
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Command::Undrain { endpoint, .. } => {
            let st = maintd::cli::LocalClient::new(&endpoint.endpoint)
                .undrain()
                .await
                .unwrap_or_else(|e| fail(e));
            if st["withdrawn"] == true {
                println!("the local drain request is withdrawn");
            } else {
                println!("there was no local drain request");
            }
            println!("{}", maintd::cli::progress_line(&st));
            Ok(())
        }
        Command::Crd => {
            print!("{}", maintd::api::crd_yaml()?);
            Ok(())
        }
        Command::Docs { page } => {
            let cli = <Cli as clap::CommandFactory>::command();
            print!("{}", maintd::reference::render(page, &cli)?);
            Ok(())
        }
        #[cfg(feature = "sim")]
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
            let sim = match scenario {
                Some(path) => {
                    let scenario = maintd_sim::scenario::load(&path)?;
                    SimCluster::start_with_scenario_on(listen, config, &scenario).await?
                }
                None => SimCluster::start_on(listen, config).await?,
            };
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
