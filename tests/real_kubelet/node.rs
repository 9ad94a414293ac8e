//! A real node under the tests: a control plane of its own
//! (scripts/control-plane), the tests' logind on a private bus, and a real
//! kubelet with containerd and runc (scripts/real-node) whose system bus
//! is that one. deploy/ is installed on it as an operator would (an
//! overlay pointing at maintd's imported image), and its DaemonSet runs
//! there for real.
//!
//! One real node at a time on a machine (a lock file): they are heavy, and
//! their timings are what the tests measure. Each test has its own
//! control plane, because uninstalling deploy/ removes its CRDs and
//! namespace, which the other real-tier tests share. Everything is
//! stopped when the test ends, however it ends (the scripts' --owner
//! watchdogs); on a failure the logs are kept and their tails printed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::PostParams;
use maintd_sim::dbus::PrivateBus;
use maintd_sim::logind::{SimLogind, SimLogindConfig};
use serde_json::json;

/// How long a test waits on the real node: pods start in a second or two
/// and stop in what their own process takes; far beyond both.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// The lock every real node on this machine takes (see the module's doc).
const LOCK: &str = "/tmp/maintd-real-node.lock";

/// The kubelet's graceful node shutdown, and logind's delay budget.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The kubelet's `shutdownGracePeriod` in seconds (0: off, no lock).
    pub shutdown_grace_period: u32,
    /// The kubelet's `shutdownGracePeriodCriticalPods` in seconds.
    pub shutdown_grace_period_critical_pods: u32,
    /// logind's `InhibitDelayMaxSec`.
    pub inhibit_delay_max: Duration,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            shutdown_grace_period: 30,
            shutdown_grace_period_critical_pods: 10,
            inhibit_delay_max: Duration::from_secs(60),
        }
    }
}

/// A running node, its control plane and its logind.
pub struct RealNode {
    /// The Node's name.
    pub name: String,
    /// The node's address (InternalIP; hostNetwork pods listen there).
    pub ip: String,
    /// The tests' simulated logind, the node's.
    pub logind: SimLogind,
    /// The node's directory (scripts/real-node).
    pub dir: PathBuf,
    /// The control plane's directory (scripts/control-plane).
    pub cp: PathBuf,
    /// The workloads' image (busybox, imported on the node).
    pub busybox: String,
    /// When `start` was called, and what each step took.
    pub timings: Vec<(&'static str, Duration)>,
    /// The test's directory: the control plane's, the node's, the overlay.
    pub(super) work: tempfile::TempDir,
    _bus: PrivateBus,
    bus_watchdog: Option<std::process::Child>,
    _lock: std::fs::File,
}

pub(super) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// maintd's image archive, as scripts/build-image writes it (scripts/test
/// names it in MAINTD_IMAGE_ARCHIVE).
pub fn image_archive() -> PathBuf {
    let path = std::env::var_os("MAINTD_IMAGE_ARCHIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            root().join(format!(
                "target/image/maintd-{}.oci.tar",
                env!("CARGO_PKG_VERSION")
            ))
        });
    assert!(
        path.is_file(),
        "the real-node tests run maintd's image: no archive at {} (run scripts/build-image, \
         or name one in MAINTD_IMAGE_ARCHIVE; scripts/test does)",
        path.display()
    );
    path
}

/// Stops the bus's dbus-daemon within a second of process `owner`
/// ending, however it ends (PrivateBus stops it when dropped, which a
/// killed test process never does), as the scripts' --owner does.
fn bus_watchdog(bus: &PrivateBus, owner: &str) -> Option<std::process::Child> {
    let pid = bus.child.id();
    let dir = bus
        .address
        .strip_prefix("unix:path=")
        .and_then(|s| Path::new(s).parent())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::process::Command::new("setsid")
        .args([
            "bash",
            "-c",
            // The daemon's own command line, so that a recycled PID is left alone.
            r#"while kill -0 "$1" 2>/dev/null; do sleep 1; done
            grep -q maintd-bus "/proc/$2/cmdline" 2>/dev/null && kill "$2"
            case "$3" in */maintd-bus-*) rm -rf "$3" ;; esac"#,
            "bus-watchdog",
            owner,
            &pid.to_string(),
            &dir,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

pub(super) async fn script(what: &str, args: &[&str]) {
    let out = tokio::process::Command::new(root().join(what))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl RealNode {
    /// Starts a control plane, logind and the node; returns once the
    /// Node is Ready. Panics, saying why, when this machine cannot run
    /// one (not root, a tool missing, no image archive).
    pub async fn start(options: NodeOptions) -> RealNode {
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "the real-node tests need root (containerd, runc, mounts, cgroups, a bridge): \
             run them as root, e.g. `sudo -E scripts/test real_kubelet` (CI runs as root)"
        );
        let archive = image_archive();
        let begun = Instant::now();
        let lock = tokio::task::spawn_blocking(|| {
            let file = std::fs::File::create(LOCK).expect("the real-node lock file");
            file.lock().expect("the real-node lock");
            file
        })
        .await
        .expect("the lock is taken");
        let mut timings = vec![("waiting for the machine's other real node", begun.elapsed())];
        let mut work = tempfile::Builder::new()
            .prefix("maintd-real-node-")
            .tempdir_in("/tmp")
            .expect("a work directory");
        // Kept if the start fails (its logs say why); see Drop otherwise.
        work.disable_cleanup(true);
        let (cp, dir) = (work.path().join("cp"), work.path().join("node"));
        let owner = std::process::id().to_string();

        let t = Instant::now();
        script(
            "scripts/control-plane",
            &["up", &cp.to_string_lossy(), "--owner", &owner],
        )
        .await;
        timings.push(("control plane start", t.elapsed()));

        let bus = PrivateBus::start().expect("dbus-daemon starts (apt-get install dbus)");
        let logind = SimLogind::start(
            &bus.address,
            SimLogindConfig {
                inhibit_delay_max: options.inhibit_delay_max,
            },
        )
        .await
        .expect("the tests' logind serves on its bus");
        let socket = bus
            .address
            .strip_prefix("unix:path=")
            .expect("the private bus is a unix socket")
            .to_string();
        let bus_watchdog = bus_watchdog(&bus, &owner);

        let t = Instant::now();
        script(
            "scripts/real-node",
            &[
                "up",
                &dir.to_string_lossy(),
                "--control-plane",
                &cp.to_string_lossy(),
                "--owner",
                &owner,
                "--bus",
                &socket,
                "--image",
                &archive.to_string_lossy(),
                "--shutdown-grace-period",
                &format!("{}s", options.shutdown_grace_period),
                "--shutdown-grace-period-critical-pods",
                &format!("{}s", options.shutdown_grace_period_critical_pods),
            ],
        )
        .await;
        timings.push(("node start (kubelet Ready)", t.elapsed()));
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .unwrap_or_else(|e| panic!("{f} of the node: {e}"))
                .trim()
                .to_string()
        };
        work.disable_cleanup(false);
        let images: BTreeMap<String, String> = read("images.env")
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RealNode {
            name: read("name"),
            ip: read("node-ip"),
            logind,
            busybox: images["BUSYBOX_IMAGE"].clone(),
            dir,
            cp,
            timings,
            work,
            _bus: bus,
            bus_watchdog,
            _lock: lock,
        }
    }

    /// The cluster-admin kubeconfig.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.cp.join("admin.kubeconfig")
    }

    /// A client with cluster-admin's rights.
    pub async fn admin(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(self.admin_kubeconfig()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("a client configuration");
        kube::Client::try_from(config).expect("a client")
    }

    /// kubectl as cluster-admin; (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        crate::common::real::kubectl(&self.admin_kubeconfig(), args, None)
    }

    /// kubectl as cluster-admin, panicking with its words on a failure.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {}: {err}", args.join(" "));
        out
    }

    /// The kubelet's static pod directory (the node's /etc/kubernetes/manifests).
    pub fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }

    /// Where maintd's node helper stashes static pod manifests.
    pub fn stash(&self) -> PathBuf {
        self.manifests().join(".maintd-stash")
    }

    /// The API server's audit log.
    pub fn audit_log(&self) -> PathBuf {
        self.cp.join("log/audit.log")
    }

    /// A KWOK node (fake, always Ready) for what leaves this one: the
    /// Deployments' replacements, so that budgets can let pods go.
    pub async fn kwok_node(&self, client: &kube::Client, name: &str) {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
            },
        }))
        .expect("a Node");
        let api: Api<Node> = Api::all(client.clone());
        api.create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
        let n = name.to_string();
        crate::common::eventually_within("the KWOK node is Ready", PATIENCE, || {
            let (api, n) = (api.clone(), n.clone());
            async move {
                api.get(&n)
                    .await
                    .is_ok_and(|node| maintd::coordination::is_ready(&node))
            }
        })
        .await;
    }

    /// The host's PID of a container of a pod (`containerd://ID` in its
    /// status), as containerd knows it.
    pub fn container_pid(&self, container_id: &str) -> Option<u32> {
        let id = container_id.strip_prefix("containerd://")?;
        let out = std::process::Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join("containerd/containerd.sock"))
            .args(["--namespace", "k8s.io", "tasks", "ls"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
            let mut cols = l.split_whitespace();
            (cols.next()? == id).then(|| cols.next()?.parse().ok())?
        })
    }

    /// The last lines of the logs a failure is read from.
    fn tails(&self) -> String {
        let mut files = vec![self.dir.join("log/kubelet.log")];
        if let Ok(pods) = std::fs::read_dir(self.dir.join("pod-logs")) {
            for pod in pods.flatten() {
                if pod.file_name().to_string_lossy().starts_with("maintd_") {
                    for c in ["maintd", "node-helper"] {
                        files.push(pod.path().join(c).join("0.log"));
                    }
                }
            }
        }
        let mut out = String::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(25)..];
            out.push_str(&format!(
                "--- {} (last {} lines)\n",
                f.display(),
                tail.len()
            ));
            for l in tail {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// Every container of the pod ready.
pub fn all_ready(p: &Pod) -> bool {
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    !statuses.is_empty() && statuses.iter().all(|c| c.ready)
}

impl Drop for RealNode {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        if failed {
            eprintln!("{}", self.tails());
            self.work.disable_cleanup(true);
            eprintln!(
                "the real node's logs are kept in {} (node/log, node/pod-logs, cp/log)",
                self.work.path().display()
            );
        }
        if let Some(mut w) = self.bus_watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
        for (what, dir) in [
            ("scripts/real-node", &self.dir),
            ("scripts/control-plane", &self.cp),
        ] {
            let _ = std::process::Command::new(root().join(what))
                .arg("down")
                .arg(dir)
                .stdin(std::process::Stdio::null())
                .status();
        }
    }
}
