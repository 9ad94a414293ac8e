//! The real control plane under the benches (scripts/control-plane):
//! Kubernetes 1.37's API server, controller manager and scheduler, etcd,
//! and KWOK playing the kubelets. Each bench run starts its own, owned by
//! the bench's process (stopped within a second of it ending, however it
//! ends), installs deploy/ without its DaemonSet (the agents run in the
//! bench's process, each with deploy/'s ServiceAccount, RBAC and node
//! confinement policy, and a token bound to its Node), and reads what the
//! API server and etcd cost from /proc and etcd's metrics.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;

use super::counting::{CountLayer, Counter};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A running control plane, stopped when dropped.
pub struct ControlPlane {
    pub dir: PathBuf,
}

impl ControlPlane {
    /// Starts one in a directory of its own, owned by this process.
    pub fn up(name: &str) -> Result<ControlPlane, String> {
        let dir = std::env::temp_dir().join(format!("maintd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let out = Command::new(root().join("scripts/control-plane"))
            .arg("up")
            .arg(&dir)
            .arg("--owner")
            .arg(std::process::id().to_string())
            .output()
            .map_err(|e| format!("running scripts/control-plane: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/control-plane up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(ControlPlane { dir })
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// The pid of one of its processes (`kube-apiserver`, `etcd`, `kwok`…).
    pub fn pid(&self, process: &str) -> Option<u32> {
        self.read(&format!("{process}.pid")).parse().ok()
    }

    /// kubectl as cluster-admin: (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl is installed (the real control plane needs it)");
        if let Some(mut pipe) = child.stdin.take() {
            let _ = pipe.write_all(stdin.unwrap_or("").as_bytes());
        }
        let out = child.wait_with_output().expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        match self.kubectl(args, stdin) {
            (true, out, _) => Ok(out),
            (false, _, err) => Err(format!("kubectl {}: {err}", args.join(" "))),
        }
    }

    /// deploy/ as `kubectl apply -k deploy/` installs it (CRDs, namespace,
    /// ServiceAccount, RBAC, the node confinement policy), without the
    /// DaemonSet; returns once its resources are served. With `component`
    /// (such as `api-priority`), deploy/ and that component, as an overlay
    /// naming both installs them.
    pub fn install_deploy_with(&self, component: Option<&str>) -> Result<(), String> {
        let dir = match component {
            None => root().join("deploy"),
            Some(c) => {
                let dir = root().join(format!("target/bench-deploy-with-{c}"));
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let overlay =
                    format!("resources:\n  - ../../deploy\ncomponents:\n  - ../../deploy/{c}\n");
                std::fs::write(dir.join("kustomization.yaml"), overlay)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                dir
            }
        };
        let rendered = self.kubectl_ok(&["kustomize", &dir.to_string_lossy()], None)?;
        let kept: Vec<&str> = rendered
            .split("\n---\n")
            .filter(|doc| !doc.lines().any(|l| l.trim() == "kind: DaemonSet"))
            .collect();
        let objects = kept.join("\n---\n");
        let apply = ["apply", "--server-side", "--force-conflicts", "-f", "-"];
        let mut tries = 0;
        while let Err(e) = self.kubectl_ok(&apply, Some(&objects)) {
            tries += 1;
            if tries > 10 {
                return Err(e);
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let crds = ["nodemaintenances.maintd.io", "nodedrains.maintd.io"];
        for crd in crds {
            self.kubectl_ok(
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    &format!("crd/{crd}"),
                ],
                None,
            )?;
        }
        // Established is not yet served: for a moment the API server
        // answers a new resource with 429.
        for crd in crds {
            let mut tries = 0;
            while let Err(e) = self.kubectl_ok(&["get", crd], None) {
                tries += 1;
                if tries > 100 {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    async fn config(&self) -> kube::Config {
        let kc =
            kube::config::Kubeconfig::read_from(self.kubeconfig()).expect("the admin kubeconfig");
        kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("a client configuration")
    }

    /// A cluster-admin client (the bench's own setup and looks; not counted).
    pub async fn admin(&self) -> kube::Client {
        let mut config = self.config().await;
        config.read_timeout = Some(Duration::from_secs(300));
        kube::Client::try_from(config).expect("an admin client")
    }

    /// Tokens of deploy/'s ServiceAccount bound to each of `nodes` (name,
    /// uid), as the kubelet projects them into the agent's pod: the
    /// TokenRequest API, 32 at a time.
    pub async fn agent_tokens(
        &self,
        admin: &kube::Client,
        nodes: &[(String, String)],
    ) -> Vec<String> {
        let sa: Api<ServiceAccount> = Api::namespaced(admin.clone(), "maintd");
        futures::stream::iter(nodes.iter().cloned())
            .map(|(name, uid)| {
                let sa = sa.clone();
                async move {
                    let req = TokenRequest {
                        spec: Some(TokenRequestSpec {
                            bound_object_ref: Some(BoundObjectReference {
                                api_version: Some("v1".into()),
                                kind: Some("Node".into()),
                                name: Some(name.clone()),
                                uid: Some(uid),
                            }),
                            expiration_seconds: Some(4 * 3600),
                            ..Default::default()
                        }),
                        ..Default::default()
                    };
                    let made = sa
                        .create_token_request("maintd", &PostParams::default(), &req)
                        .await;
                    made.map_err(|e| format!("a token for {name}: {e}"))
                        .and_then(|t| {
                            t.status
                                .and_then(|s| s.token)
                                .ok_or(format!("no token for {name}"))
                        })
                }
            })
            .buffered(32)
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The client `node`'s agent runs with: its own token, kube's retry
    /// off and its User-Agent (`cluster::agent_config`), everything it
    /// sends and receives counted into `counter`.
    pub async fn agent_client(
        &self,
        node: &str,
        token: &str,
        counter: Arc<Counter>,
    ) -> kube::Client {
        let mut config = self.config().await;
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        };
        let config = maintd::cluster::agent_config(config, node);
        maintd::client::builder(config)
            .expect("a client for the agent")
            .with_layer(&CountLayer(counter))
            .build()
    }

    /// CPU seconds, resident memory (KiB) and open files of one process.
    pub fn usage(&self, process: &str) -> ProcUsage {
        self.pid(process).map(ProcUsage::of).unwrap_or_default()
    }

    /// etcd's counters, from its /metrics on the client URL.
    pub fn etcd(&self) -> EtcdMetrics {
        EtcdMetrics::read(&self.read("etcd")).unwrap_or_default()
    }

    /// The largest number of open files the API server may hold.
    pub fn apiserver_open_files_limit(&self) -> Option<u64> {
        let pid = self.pid("kube-apiserver")?;
        open_files_limit(&format!("/proc/{pid}/limits"))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/control-plane"))
            .arg("down")
            .arg(&self.dir)
            .output();
        // Its logs (the audit log of a large run is large) go with it,
        // unless asked to stay.
        if std::env::var_os("MAINTD_BENCH_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The soft limit of open files in a /proc/…/limits file.
pub fn open_files_limit(limits: &str) -> Option<u64> {
    std::fs::read_to_string(limits)
        .ok()?
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// What a process has used, from /proc.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct ProcUsage {
    pub cpu_secs: f64,
    pub rss_kib: u64,
    pub open_files: u64,
}

impl ProcUsage {
    pub fn of(pid: u32) -> ProcUsage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, t)| t.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let open_files = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        ProcUsage {
            // utime and stime, fields 14 and 15 (11 and 12 after the name).
            cpu_secs: (ticks(11) + ticks(12)) / 100.0,
            rss_kib,
            open_files,
        }
    }
}

/// etcd's writes (puts and deletes in its MVCC store, a transaction's
/// each) and its database size.
#[derive(Debug, Default, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct EtcdMetrics {
    pub puts: f64,
    pub deletes: f64,
    pub db_bytes: f64,
    pub db_in_use_bytes: f64,
}

impl EtcdMetrics {
    pub fn writes(&self) -> f64 {
        self.puts + self.deletes
    }

    fn read(url: &str) -> Option<EtcdMetrics> {
        use std::io::{Read, Write};
        let addr = url.strip_prefix("http://")?;
        let mut conn = std::net::TcpStream::connect(addr).ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        conn.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .ok()?;
        let mut text = String::new();
        conn.read_to_string(&mut text).ok()?;
        let value = |name: &str| {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Some(EtcdMetrics {
            puts: value("etcd_mvcc_put_total"),
            deletes: value("etcd_mvcc_delete_total"),
            db_bytes: value("etcd_mvcc_db_total_size_in_bytes"),
            db_in_use_bytes: value("etcd_mvcc_db_total_size_in_use_in_bytes"),
        })
    }
}

/// Waits (bounded) until `check` holds, saying every 10 s how it stands;
/// panics with `what` when it does not within `patience`.
pub async fn wait_until<F, Fut>(what: &str, patience: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (bool, String)>,
{
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let (done, how) = check().await;
        if done {
            return;
        }
        if start.elapsed() > patience {
            panic!("{what}: not within {} s ({how})", patience.as_secs());
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!("  waiting until {what}: {how}");
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The load average now, as `uptime` shows it: the bench says whether the
/// machine was busy while it measured.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
