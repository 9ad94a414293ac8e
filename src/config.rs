//! The agent's settings: flags and environment, validated into one Config.

use std::path::PathBuf;
use std::time::Duration;

use crate::drain::executor::TimeoutPolicy;
use crate::drain::static_path::StaticPodDir;

/// Flags of `maintd run` (and the agent part of `maintd demo`).
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// This node's name (the DaemonSet passes it from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,
    /// The agent's own pod, never drained (downward API).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// The agent's own pod's namespace (downward API).
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Taint keys that request a drain when present on the node (any
    /// effect); removing the taint ends the maintenance.
    #[arg(
        long = "drain-taint",
        default_value = "maintd.io/drain",
        value_delimiter = ','
    )]
    pub drain_taints: Vec<String>,
    /// The kubelet's static pod directory. Default: the kubelet's own
    /// `staticPodPath` (see --kubelet-config), else /etc/kubernetes/manifests.
    /// One that differs from the kubelet's own is a Warning Event and a
    /// status warning.
    #[arg(long, env = "MAINTD_STATIC_POD_DIR")]
    pub static_pod_dir: Option<PathBuf>,
    /// The kubelet's config file, read for its staticPodPath. Default: the
    /// first that exists of /var/lib/kubelet/config.yaml (kubeadm),
    /// /var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf
    /// and /var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf.
    #[arg(long, env = "MAINTD_KUBELET_CONFIG")]
    pub kubelet_config: Option<PathBuf>,
    /// Where static pod manifests are kept during maintenance; must be on
    /// the same filesystem. Default: `.maintd-stash` inside the static pod
    /// directory (the kubelet skips dot-directories). What an earlier
    /// release stashed beside the directory (`<dir>.maintd-stash`) is
    /// restored too.
    #[arg(long, env = "MAINTD_STATIC_POD_STASH")]
    pub static_pod_stash: Option<PathBuf>,
    /// At most this many evictions in flight.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Report a stage that takes longer than this many seconds, then do as
    /// --on-stage-timeout says (0: never).
    #[arg(long, default_value_t = 0)]
    pub stage_timeout_seconds: u64,
    /// What to do when a stage times out.
    #[arg(long, value_enum, default_value_t = TimeoutPolicy::Wait)]
    pub on_stage_timeout: TimeoutPolicy,
    /// The read-only endpoint (status, health, metrics). Loopback by
    /// default; give the node's address (or 0.0.0.0) for Prometheus to
    /// scrape it. Empty to turn it off.
    #[arg(long, env = "MAINTD_LISTEN", default_value = "127.0.0.1:9477")]
    pub listen: String,
    /// The unix socket that takes drain requests (`maintd drain`), from root
    /// or maintd's own user only (mode 0600; 0660 with --node-helper, for
    /// the helper in the agent's group). A loopback address:port instead serves
    /// FleetLock there (as --listen-fleetlock) and no socket. Empty to turn
    /// it off.
    #[arg(long, env = "MAINTD_LISTEN_LOCAL", default_value = crate::cli::DEFAULT_SOCKET)]
    pub listen_local: String,
    /// Serve FleetLock (Zincati's reboot coordination) on this loopback
    /// address:port, e.g. 127.0.0.1:9478. Off by default.
    #[arg(long, env = "MAINTD_LISTEN_FLEETLOCK", default_value = "")]
    pub listen_fleetlock: String,
    /// Hold a logind delay lock and drain before the node shuts down.
    #[arg(long, env = "MAINTD_INHIBIT_SHUTDOWN", default_value_t = true, action = clap::ArgAction::Set)]
    pub inhibit_shutdown: bool,
    /// Also delay suspend (sleep) with the lock: the node is drained before
    /// it sleeps (within logind's delay budget), and the drain is undone
    /// when it resumes.
    #[arg(long)]
    pub inhibit_sleep: bool,
    /// Release the lock this long before logind's delay budget runs out (0
    /// to 3600 seconds, and at most a quarter of the budget).
    #[arg(long, default_value_t = 5.0)]
    pub shutdown_margin_seconds: f64,
    /// How many nodes of one group may hold a reboot slot (FleetLock, local
    /// drains) at once. Control-plane nodes always form their own group of
    /// one.
    #[arg(long, default_value_t = 1)]
    pub reboot_slots: u32,
    /// Also drain for medik8s' NodeMaintenance objects
    /// (nodemaintenance.medik8s.io) naming this node, and write their
    /// status. Do not run medik8s' own operator on the same objects.
    #[arg(long, env = "MAINTD_MEDIK8S", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub medik8s: bool,
    /// Ask pods that declare eviction responders of their own (KEP-4563,
    /// such as KubeVirt's live migration) to leave with an EvictionRequest
    /// when the API server serves lifecycle.k8s.io/v1alpha1 (auto), or
    /// always use the Eviction API (off).
    #[arg(long, env = "MAINTD_EVICTION_REQUESTS", value_enum, default_value_t = crate::drain::eviction_requests::Mode::Auto)]
    pub eviction_requests: crate::drain::eviction_requests::Mode,
    /// Give up an EvictionRequest that nothing has acted on (no condition,
    /// no Eviction) after this many seconds, and evict its pod through the
    /// Eviction API: Kubernetes 1.37 serves the API without the controller
    /// that acts on requests. A request something acts on is followed as
    /// long as it takes. 1 to 86400.
    #[arg(
        long,
        env = "MAINTD_EVICTION_REQUEST_PROGRESS_TIMEOUT",
        default_value_t = 60.0
    )]
    pub eviction_request_progress_timeout_seconds: f64,
    /// Once every pod is gone, wait up to this many seconds for the
    /// volumes the drained pods used to be detached from the node before
    /// it counts as drained (within a shutdown, no longer than its
    /// deadline); 0 does not wait. At most 3600.
    #[arg(long, env = "MAINTD_VOLUME_DETACH_TIMEOUT", default_value_t = 300.0)]
    pub volume_detach_timeout_seconds: f64,
    /// A node that drained for a FleetLock reboot and has not booted again
    /// keeps its slot and stays drained this many seconds after its
    /// pre-reboot; past that, its steady-state is honoured, with a Warning.
    /// 60 to 604800 (a week).
    #[arg(long, env = "MAINTD_REBOOT_TIMEOUT", default_value_t = 3600.0)]
    pub reboot_timeout_seconds: f64,
    /// The D-Bus address of logind's bus; default: the system bus
    /// (DBUS_SYSTEM_BUS_ADDRESS, or /run/dbus/system_bus_socket).
    #[arg(long, env = "MAINTD_LOGIND_BUS")]
    pub logind_bus: Option<String>,
    /// The node helper's socket (`maintd node-helper`, a root container of
    /// the same pod; the DaemonSet gives /run/maintd-pod/helper.sock): it holds logind's lock and moves static pod
    /// manifests for this agent, which then needs neither root, nor the
    /// system bus, nor the static pod directory. Default: none, the agent
    /// does both itself (the systemd unit, a single process).
    #[arg(long, env = "MAINTD_NODE_HELPER")]
    pub node_helper: Option<PathBuf>,
    /// Abandon an API call that has had no answer after this many seconds
    /// (and retry it).
    #[arg(long, default_value_t = 10.0)]
    pub api_timeout_seconds: f64,
    /// Treat a watch that has had no event and no bookmark for this many
    /// seconds as dead (a half-open connection) and make it again. The API
    /// server sends a bookmark at least once a minute.
    #[arg(long, default_value_t = 120.0)]
    pub watch_idle_timeout_seconds: f64,
    /// During a shutdown, once the API server has not answered for this
    /// many seconds, stop waiting for it: stop the static pods, wait their
    /// grace, and let the shutdown go on.
    #[arg(long, default_value_t = 30.0)]
    pub api_unreachable_seconds: f64,
    /// Post a JSON notification to this URL when a drain starts, is
    /// blocked, is drained, fails and is undone (a Slack incoming webhook
    /// gets Slack's body). Up to 16 receivers. A receiver that is slow or
    /// down never delays a drain.
    #[arg(long = "notify-url", env = "MAINTD_NOTIFY_URL")]
    pub notify_urls: Vec<String>,
    /// Notify a blocked drain once a pod has been refused this many
    /// seconds (a budget pacing a drain for a moment is no news). 0 to
    /// 86400.
    #[arg(long, env = "MAINTD_NOTIFY_BLOCKED_AFTER", default_value_t = 60.0)]
    pub notify_blocked_after_seconds: f64,
    /// An Event on each evicted pod as well, beside the one per owning
    /// workload and stage (one per pod: a fleet's rollout writes one for
    /// every pod of the fleet into etcd).
    #[arg(long, env = "MAINTD_POD_EVENTS")]
    pub pod_events: bool,
    /// When planned drains may start (window, blocking pods).
    #[command(flatten)]
    pub policy: crate::policy::args::PolicyArgs,
}

/// The validated settings of one agent.
#[derive(Debug, Clone)]
pub struct Config {
    pub node: String,
    pub own_pod: Option<(String, String)>,
    pub drain_taints: Vec<String>,
    /// The static pod directory, and how it was chosen.
    pub static_pods: StaticPodDir,
    pub static_pod_stash: Option<PathBuf>,
    pub concurrency: usize,
    pub stage_timeout: Option<Duration>,
    pub on_stage_timeout: TimeoutPolicy,
    pub listen: Option<std::net::SocketAddr>,
    /// The unix socket that takes drain requests.
    pub listen_local: Option<PathBuf>,
    /// FleetLock's loopback listener.
    pub listen_fleetlock: Option<std::net::SocketAddr>,
    /// Hold a shutdown delay lock (None: don't).
    pub shutdown: Option<ShutdownSettings>,
    /// Nodes of one group that may hold a reboot slot at once.
    pub reboot_slots: u32,
    /// Act on medik8s' NodeMaintenance objects too.
    pub medik8s: bool,
    /// Whether pods with responders of their own leave by EvictionRequest.
    pub eviction_requests: crate::drain::eviction_requests::Mode,
    /// How long an EvictionRequest nothing acts on is followed before its
    /// pod goes through the Eviction API.
    pub eviction_request_progress_timeout: Duration,
    /// How long a drain waits for its pods' volumes to detach.
    pub volume_detach_timeout: Duration,
    /// How long a FleetLock slot waits for its node's reboot.
    pub reboot_timeout: Duration,
    /// The node helper that holds the lock and the manifests (None: the
    /// agent itself).
    pub node_helper: Option<PathBuf>,
    /// Bounds on talking to the API server.
    pub api: ApiSettings,
    /// When planned drains may start.
    pub policy: crate::policy::Policy,
    /// Where notifications go (checked URLs).
    pub notify_urls: Vec<String>,
    /// How long a pod stays refused before a blocked notification.
    pub notify_blocked_after: Duration,
    /// An Event on each evicted pod too (`--pod-events`).
    pub pod_events: bool,
}

/// Bounds on talking to the API server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApiSettings {
    /// One API call, up to its response's headers.
    pub call_timeout: Duration,
    /// A watch with no event and no bookmark for this long is made again.
    pub watch_idle_timeout: Duration,
    /// During a shutdown, how long the API may stay unreachable before the
    /// agent stops waiting for it.
    pub unreachable_release: Duration,
    /// A view whose watch has been failing this long makes the agent not
    /// ready.
    pub stale_after: Duration,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            call_timeout: crate::client::DEFAULT_CALL_TIMEOUT,
            watch_idle_timeout: crate::index::DEFAULT_WATCH_IDLE_TIMEOUT,
            unreachable_release: Duration::from_secs(30),
            stale_after: crate::index::STALE_AFTER,
        }
    }
}

/// How the agent holds logind's shutdown lock.
#[derive(Debug, Clone)]
pub struct ShutdownSettings {
    pub sleep: bool,
    pub margin: Duration,
    /// None for the system bus.
    pub bus: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "the node name is not set: pass --node or set NODE_NAME (the DaemonSet sets it from spec.nodeName)"
    )]
    NoNode,
    #[error("invalid setting {name}: {why}")]
    Invalid { name: &'static str, why: String },
}

/// The most evictions `--concurrency` lets be in flight: many times the
/// pods a node can hold (the kubelet's default is 110), and far below what
/// the drain's semaphore can count.
const MAX_CONCURRENCY: usize = 10_000;

impl AgentArgs {
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let node = self
            .node
            .filter(|n| !n.trim().is_empty())
            .ok_or(ConfigError::NoNode)?;
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(ConfigError::Invalid {
                name: "--concurrency",
                why: format!("must be between 1 and {MAX_CONCURRENCY}"),
            });
        }
        let drain_taints: Vec<String> = self
            .drain_taints
            .into_iter()
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect();
        if drain_taints.is_empty() {
            return Err(ConfigError::Invalid {
                name: "--drain-taint",
                why: "at least one taint key is needed".into(),
            });
        }
        let own_pod = match (self.pod_namespace, self.pod_name) {
            (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => Some((ns, name)),
            _ => None,
        };
        let addr =
            |name: &'static str, s: &str| -> Result<Option<std::net::SocketAddr>, ConfigError> {
                if s.trim().is_empty() {
                    return Ok(None);
                }
                s.trim()
                    .parse()
                    .map(Some)
                    .map_err(|e| ConfigError::Invalid {
                        name,
                        why: format!("{s:?} is not an address:port ({e})"),
                    })
            };
        let listen = addr("--listen", &self.listen)?;
        let (listen_local, mut listen_fleetlock) = if self.listen_local.contains('/') {
            (Some(PathBuf::from(self.listen_local.trim())), None)
        } else {
            (None, addr("--listen-local", &self.listen_local)?)
        };
        if let Some(a) = addr("--listen-fleetlock", &self.listen_fleetlock)? {
            listen_fleetlock = Some(a);
        }
        if let Some(a) = listen_fleetlock
            && !a.ip().is_loopback()
        {
            return Err(ConfigError::Invalid {
                name: "--listen-fleetlock",
                why: format!(
                    "{a} is not a loopback address; FleetLock takes reboot slots and must not be reachable from the network"
                ),
            });
        }
        if !(0.0..=3600.0).contains(&self.shutdown_margin_seconds) {
            return Err(ConfigError::Invalid {
                name: "--shutdown-margin-seconds",
                why: format!(
                    "{} is not 0 to 3600 seconds (the margin is kept out of logind's delay, which is minutes)",
                    self.shutdown_margin_seconds
                ),
            });
        }
        let shutdown = self.inhibit_shutdown.then(|| ShutdownSettings {
            sleep: self.inhibit_sleep,
            margin: Duration::from_secs_f64(self.shutdown_margin_seconds),
            bus: self.logind_bus.clone(),
        });
        if self.reboot_slots == 0 {
            return Err(ConfigError::Invalid {
                name: "--reboot-slots",
                why: "must be at least 1".into(),
            });
        }
        let seconds = |name: &'static str, v: f64| -> Result<Duration, ConfigError> {
            if v.is_finite() && v > 0.0 && v < 1e9 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ConfigError::Invalid {
                    name,
                    why: format!("{v} is not a positive number of seconds"),
                })
            }
        };
        let api = ApiSettings {
            call_timeout: seconds("--api-timeout-seconds", self.api_timeout_seconds)?,
            watch_idle_timeout: seconds(
                "--watch-idle-timeout-seconds",
                self.watch_idle_timeout_seconds,
            )?,
            unreachable_release: seconds(
                "--api-unreachable-seconds",
                self.api_unreachable_seconds,
            )?,
            stale_after: crate::index::STALE_AFTER,
        };
        let policy = self
            .policy
            .into_policy()
            .map_err(|e| ConfigError::Invalid {
                name: e.name,
                why: e.why,
            })?;
        let mut notify_urls = Vec::new();
        // Each receiver has a sender and a queue of its own.
        const MAX_NOTIFY_URLS: usize = 16;
        if self.notify_urls.len() > MAX_NOTIFY_URLS {
            return Err(ConfigError::Invalid {
                name: "--notify-url",
                why: format!(
                    "given {} times; at most {MAX_NOTIFY_URLS} receivers (use a relay for more)",
                    self.notify_urls.len()
                ),
            });
        }
        for raw in self.notify_urls.iter().filter(|u| !u.trim().is_empty()) {
            crate::report::notify::Webhook::parse(raw).map_err(|why| ConfigError::Invalid {
                name: "--notify-url",
                why,
            })?;
            notify_urls.push(raw.trim().to_string());
        }
        if !(0.0..=86_400.0).contains(&self.notify_blocked_after_seconds) {
            return Err(ConfigError::Invalid {
                name: "--notify-blocked-after-seconds",
                why: format!(
                    "{} is not 0 to 86400 seconds",
                    self.notify_blocked_after_seconds
                ),
            });
        }
        if !(0.0..=3_600.0).contains(&self.volume_detach_timeout_seconds) {
            return Err(ConfigError::Invalid {
                name: "--volume-detach-timeout-seconds",
                why: format!(
                    "{} is not 0 to 3600 seconds",
                    self.volume_detach_timeout_seconds
                ),
            });
        }
        // At least a second: a controller that exists gets the time to
        // answer; at most a day: a drain is not held longer by nothing.
        if !(1.0..=86_400.0).contains(&self.eviction_request_progress_timeout_seconds) {
            return Err(ConfigError::Invalid {
                name: "--eviction-request-progress-timeout-seconds",
                why: format!(
                    "{} is not 1 to 86400 seconds",
                    self.eviction_request_progress_timeout_seconds
                ),
            });
        }
        if !(60.0..=604_800.0).contains(&self.reboot_timeout_seconds) {
            return Err(ConfigError::Invalid {
                name: "--reboot-timeout-seconds",
                why: format!(
                    "{} is not 60 to 604800 seconds (a week)",
                    self.reboot_timeout_seconds
                ),
            });
        }
        Ok(Config {
            reboot_timeout: Duration::from_secs_f64(self.reboot_timeout_seconds),
            notify_blocked_after: Duration::from_secs_f64(self.notify_blocked_after_seconds),
            pod_events: self.pod_events,
            notify_urls,
            policy,
            api,
            medik8s: self.medik8s,
            eviction_requests: self.eviction_requests,
            eviction_request_progress_timeout: Duration::from_secs_f64(
                self.eviction_request_progress_timeout_seconds,
            ),
            volume_detach_timeout: Duration::from_secs_f64(self.volume_detach_timeout_seconds),
            node_helper: self.node_helper.filter(|p| !p.as_os_str().is_empty()),
            reboot_slots: self.reboot_slots,
            shutdown,
            listen,
            listen_local,
            listen_fleetlock,
            node,
            own_pod,
            drain_taints,
            static_pods: crate::drain::static_path::resolve(
                self.static_pod_dir,
                self.kubelet_config.as_deref(),
            ),
            static_pod_stash: self.static_pod_stash,
            concurrency: self.concurrency,
            stage_timeout: (self.stage_timeout_seconds > 0)
                .then(|| Duration::from_secs(self.stage_timeout_seconds)),
            on_stage_timeout: self.on_stage_timeout,
        })
    }
}

impl Config {
    /// Settings for a node with every default (tests and the demo).
    pub fn for_node(node: &str, static_pod_dir: PathBuf) -> Config {
        Config {
            node: node.to_string(),
            own_pod: None,
            drain_taints: vec!["maintd.io/drain".into()],
            static_pods: StaticPodDir::given(static_pod_dir),
            static_pod_stash: None,
            concurrency: 256,
            stage_timeout: None,
            on_stage_timeout: TimeoutPolicy::Wait,
            listen: None,
            listen_local: None,
            listen_fleetlock: None,
            shutdown: None,
            reboot_slots: 1,
            medik8s: false,
            eviction_requests: Default::default(),
            eviction_request_progress_timeout:
                crate::drain::eviction_requests::DEFAULT_PROGRESS_TIMEOUT,
            volume_detach_timeout: crate::drain::executor::DEFAULT_VOLUME_DETACH_TIMEOUT,
            reboot_timeout: crate::fleetlock::DEFAULT_REBOOT_TIMEOUT,
            node_helper: None,
            api: ApiSettings::default(),
            policy: crate::policy::Policy::default(),
            notify_urls: Vec::new(),
            notify_blocked_after: Duration::from_secs(60),
            pod_events: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    fn config(args: &[&str]) -> Result<Config, String> {
        let argv = std::iter::once("maintd").chain(args.iter().copied());
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        cli.agent.into_config().map_err(|e| e.to_string())
    }

    #[test]
    fn notification_settings_are_checked() {
        let c = config(&[
            "--node",
            "n",
            "--notify-url",
            "https://hooks.example/a",
            "--notify-url",
            " ",
        ])
        .unwrap();
        assert_eq!(
            c.notify_urls,
            ["https://hooks.example/a"],
            "empty ones left out"
        );
        assert_eq!(c.notify_blocked_after, Duration::from_secs(60));
        let mut many = vec!["--node", "n"];
        for _ in 0..17 {
            many.extend(["--notify-url", "http://r/x"]);
        }
        assert!(config(&many).unwrap_err().contains("at most 16 receivers"));
        for bad in [
            "--notify-blocked-after-seconds=-1",
            "--notify-blocked-after-seconds=NaN",
            "--notify-blocked-after-seconds=100000",
        ] {
            let err = config(&["--node", "n", bad]).unwrap_err();
            assert!(
                err.contains("--notify-blocked-after-seconds"),
                "{bad}: {err}"
            );
        }
        let err = config(&["--node", "n", "--notify-url", "hooks.example/a"]).unwrap_err();
        assert!(err.contains("http:// or https://"), "{err}");
    }

    #[test]
    fn an_eviction_request_nothing_acts_on_is_followed_for_a_minute_unless_told() {
        let c = config(&["--node", "n"]).unwrap();
        assert_eq!(c.eviction_request_progress_timeout, Duration::from_secs(60));
        let c = config(&[
            "--node",
            "n",
            "--eviction-request-progress-timeout-seconds",
            "2.5",
        ])
        .unwrap();
        assert_eq!(
            c.eviction_request_progress_timeout,
            Duration::from_millis(2500)
        );
    }

    #[test]
    fn medik8s_compatibility_is_off_unless_asked_for() {
        let cases: &[(&[&str], bool)] = &[
            (&["--node", "n"], false),
            (&["--node", "n", "--medik8s"], true),
            (&["--node", "n", "--medik8s=true"], true),
            (&["--node", "n", "--medik8s=false"], false),
        ];
        for (args, want) in cases {
            assert_eq!(config(args).unwrap().medik8s, *want, "{args:?}");
        }
        let err = config(&["--node", "n", "--medik8s=perhaps"]).unwrap_err();
        assert!(err.contains("perhaps"), "{err}");
    }

    #[test]
    fn bad_settings_name_the_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "the node name is not set"),
            (&["--node", " "], "the node name is not set"),
            (&["--node", "n", "--concurrency", "0"], "--concurrency"),
            (
                &["--node", "n", "--concurrency", "18446744073709551615"],
                "--concurrency",
            ),
            (
                &[
                    "--node",
                    "n",
                    "--prometheus-url",
                    "http://prometheus:9090",
                    "--alert-check-interval",
                    "18446744073709551615",
                ],
                "--alert-check-interval",
            ),
            (
                &[
                    "--node",
                    "n",
                    "--prometheus-url",
                    "http://prometheus:9090",
                    "--prometheus-timeout",
                    "86401",
                ],
                "--prometheus-timeout",
            ),
            (&["--node", "n", "--drain-taint", ","], "--drain-taint"),
            (&["--node", "n", "--listen", "nowhere"], "--listen"),
            (&["--node", "n", "--listen-local", "0.0.0.0:1"], "loopback"),
            (
                &["--node", "n", "--listen-fleetlock", "10.0.0.1:9478"],
                "loopback",
            ),
            (&["--node", "n", "--reboot-slots", "0"], "--reboot-slots"),
            (
                &["--node", "n", "--shutdown-margin-seconds=-1"],
                "--shutdown-margin-seconds",
            ),
            (
                &["--node", "n", "--shutdown-margin-seconds=NaN"],
                "--shutdown-margin-seconds",
            ),
            (
                &["--node", "n", "--shutdown-margin-seconds=1e300"],
                "--shutdown-margin-seconds",
            ),
            (
                &["--node", "n", "--api-timeout-seconds=1e300"],
                "--api-timeout-seconds",
            ),
        ];
        for bad in ["0", "0.5", "-1", "NaN", "inf", "86401"] {
            let flag = format!("--eviction-request-progress-timeout-seconds={bad}");
            let err = config(&["--node", "n", &flag]).unwrap_err();
            assert!(
                err.contains("--eviction-request-progress-timeout-seconds")
                    && err.contains("1 to 86400 seconds"),
                "{bad}: {err}"
            );
        }
        for (args, want) in cases {
            let err = config(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }
}
