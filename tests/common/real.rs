//! The real control plane under the tests (scripts/control-plane):
//! Kubernetes 1.37's kube-apiserver, kube-controller-manager and
//! kube-scheduler, etcd, and KWOK playing the kubelet of fake nodes.
//!
//! One control plane serves a whole test run: scripts/test starts it and
//! names its directory in `MAINTD_CONTROL_PLANE`. Without that (a test run
//! by hand), the first test of a process that needs it starts one, and it
//! is stopped within a second of the process ending, however it ends.
//! Tests share it, each with nodes, namespaces and objects named after
//! itself. deploy/ is installed once, as `kubectl apply -k` would (the
//! medik8s variant, which adds to the default one), without its
//! DaemonSet: here the agents run in the test process, with deploy/'s
//! ServiceAccount and a token bound to their node.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

/// The environment variable naming a running control plane's directory.
pub const ENV: &str = "MAINTD_CONTROL_PLANE";

/// What the tests need of the control plane: where it is, and deploy/
/// installed.
static READY: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The control plane this test process uses.
#[derive(Clone)]
pub struct Real {
    dir: PathBuf,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Real {
    /// The control plane, started (by this process) and prepared on first
    /// use. Panics, saying why, when it cannot be had.
    pub fn get() -> Real {
        let dir = READY.get_or_init(|| {
            let dir = match std::env::var_os(ENV) {
                Some(d) => PathBuf::from(d),
                None => start_own()?,
            };
            alive(&dir)?;
            install_deploy(&dir).map_err(|why| match alive(&dir) {
                Ok(()) => why,
                Err(dead) => format!("{why}\n{dead}"),
            })?;
            Ok(dir)
        });
        match dir {
            Ok(dir) => Real { dir: dir.clone() },
            Err(why) => panic!("the real control plane: {why}"),
        }
    }

    /// A control plane of the caller's own, not the one the tests share
    /// (which a test must not break): started by this process in `dir`
    /// (stopped when the process ends, however it ends), its API server's
    /// audit policy `audit_policy` when given, deploy/ installed.
    pub fn own(dir: &Path, audit_policy: Option<&Path>) -> Result<Real, String> {
        up_owned(dir, audit_policy)?;
        install_deploy(dir)?;
        Ok(Real {
            dir: dir.to_path_buf(),
        })
    }

    /// Ends `component` of this control plane (etcd, kube-apiserver, ...)
    /// with SIGKILL, or starts it again with the command line it had
    /// (scripts/control-plane kill|start).
    pub fn component(&self, verb: &str, component: &str) -> Result<(), String> {
        let out = Command::new(root().join("scripts/control-plane"))
            .args([verb, &self.dir.to_string_lossy(), component])
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("running scripts/control-plane: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "scripts/control-plane {verb} {component}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Whether every process of the control plane runs; the ones that
    /// exited are named, with the end of their logs.
    pub fn alive(&self) -> Result<(), String> {
        alive(&self.dir)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster-admin kubeconfig.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The API server's audit log (every write; see e2e/audit-policy.yaml).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("log/audit.log")
    }

    /// A client with cluster-admin's rights, for the test's own setup.
    pub async fn admin(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig()).await
    }

    /// kubectl as cluster-admin; (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        kubectl(&self.admin_kubeconfig(), args, None)
    }

    /// kubectl as cluster-admin, panicking with its words on a failure.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {}: {err}", args.join(" "));
        out
    }

    /// A kubeconfig for `node`'s agent: deploy/'s ServiceAccount with a
    /// token bound to the Node, as the kubelet projects into the agent's
    /// pod. The Node must exist.
    pub fn agent_kubeconfig(&self, node: &str) -> tempfile::NamedTempFile {
        self.agent_kubeconfig_to(node, &self.server())
    }

    /// The API server's URL.
    pub fn server(&self) -> String {
        std::fs::read_to_string(self.dir.join("server"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// A fault proxy in front of this API server: clients given its
    /// address reach the API server through it.
    pub async fn fault_proxy(&self) -> super::fault_proxy::FaultProxy {
        let upstream: std::net::SocketAddr = self
            .server()
            .trim_start_matches("https://")
            .parse()
            .expect("the API server's address");
        super::fault_proxy::FaultProxy::start(upstream).await
    }

    /// [`Real::agent_kubeconfig`] for an agent that reaches the API server
    /// at `server` (a proxy in between): the same certificate is checked.
    pub fn agent_kubeconfig_to(&self, node: &str, server: &str) -> tempfile::NamedTempFile {
        let token = self.kubectl_ok(&[
            "create",
            "token",
            "maintd",
            "-n",
            "maintd",
            "--bound-object-kind",
            "Node",
            "--bound-object-name",
            node,
            "--duration",
            "2h",
        ]);
        let ca = self.dir.join("pki/ca.crt");
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
             contexts:\n- name: agent\n  context:\n    cluster: e2e\n    user: agent\n\
             current-context: agent\nusers:\n- name: agent\n  user:\n    token: {}\n",
            server,
            ca.display(),
            token.trim()
        );
        let file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(file.path(), config).expect("the agent's kubeconfig is written");
        file
    }

    /// A client with the node's own identity (`system:node:<name>`, group
    /// `system:nodes`), as its kubelet has: impersonated by the admin, so
    /// the Node authorizer and NodeRestriction judge what it does.
    pub async fn node_client(&self, node: &str) -> kube::Client {
        let mut config = config_from(&self.admin_kubeconfig()).await;
        config.auth_info.impersonate = Some(format!("system:node:{node}"));
        config.auth_info.impersonate_groups = Some(vec!["system:nodes".into()]);
        kube::Client::try_from(config).expect("a client for the node")
    }

    /// The client `node`'s agent runs with: its own token, kube's retry
    /// of 429s off and its User-Agent (see `cluster::agent_config`).
    pub async fn agent_client(&self, node: &str) -> kube::Client {
        self.agent_client_to(node, &self.server()).await
    }

    /// [`Real::agent_client`] reaching the API server at `server` (a proxy
    /// in between).
    pub async fn agent_client_to(&self, node: &str, server: &str) -> kube::Client {
        let kubeconfig = self.agent_kubeconfig_to(node, server);
        let config = config_from(kubeconfig.path()).await;
        maintd::client::builder(maintd::cluster::agent_config(config, node))
            .expect("a client for the agent")
            .build()
    }

    /// [`Real::agent_client`], every request it sends recorded in
    /// `recorded`.
    pub async fn recorded_agent_client(
        &self,
        node: &str,
        recorded: &super::recorded::Recorded,
    ) -> kube::Client {
        let kubeconfig = self.agent_kubeconfig(node);
        let config = config_from(kubeconfig.path()).await;
        maintd::client::builder(maintd::cluster::agent_config(config, node))
            .expect("a client for the agent")
            .with_layer(recorded)
            .build()
    }

    /// A KWOK node named `name` with `labels`, Ready (KWOK plays its
    /// kubelet and renews its Lease).
    pub async fn node(&self, client: &kube::Client, name: &str, labels: Value) -> Node {
        let mut all =
            json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"});
        for (k, v) in labels.as_object().into_iter().flatten() {
            all[k] = v.clone();
        }
        // Registered with a boot ID, as a kubelet registers its node; KWOK
        // keeps it, and a test "reboots" the node by changing it.
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": all,
            },
            "status": {"nodeInfo": {"bootID": format!("{name}-boot-1")}},
        }))
        .expect("a Node");
        let api: Api<Node> = Api::all(client.clone());
        api.create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
        let (api, n) = (api.clone(), name.to_string());
        super::eventually_within(&format!("node {name} is Ready"), PATIENCE, || {
            let (api, n) = (api.clone(), n.clone());
            async move {
                api.get(&n)
                    .await
                    .is_ok_and(|node| maintd::coordination::is_ready(&node))
            }
        })
        .await;
        api.get(name).await.expect("the node")
    }

    /// Reboots `node` as the API sees it: its kubelet reports a new boot
    /// ID (KWOK keeps whatever the Node says). Returns the new boot ID.
    pub async fn reboot(&self, client: &kube::Client, node: &str) -> String {
        let api: Api<Node> = Api::all(client.clone());
        let now = api.get(node).await.expect("the node");
        let before = now
            .status
            .and_then(|s| s.node_info)
            .map(|i| i.boot_id)
            .unwrap_or_default();
        let n: u32 = before
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let boot = format!("{node}-boot-{}", n + 1);
        let patch = json!({"status": {"nodeInfo": {"bootID": boot}}});
        api.patch_status(
            node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .expect("the node's boot ID changes");
        boot
    }

    /// A bare pod `name` bound to `node` (no controller: evicted, it is
    /// gone), taking `shutdown` seconds to stop.
    pub async fn pod(
        &self,
        client: &kube::Client,
        ns: &str,
        name: &str,
        node: &str,
        shutdown: u32,
    ) {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": ns,
                "annotations": {"sim.maintd.io/shutdown-seconds": shutdown.to_string()},
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "app", "image": "registry.example/app:1"}],
            },
        }))
        .expect("a pod");
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("creating pod {ns}/{name}: {e}"));
    }

    /// Deletes what a test made of the cluster-wide state: its nodes (and
    /// with them, by their owner references, their NodeDrain objects).
    pub async fn remove_nodes(&self, client: &kube::Client, names: &[String]) {
        let api: Api<Node> = Api::all(client.clone());
        for n in names {
            let _ = api.delete(n, &DeleteParams::default()).await;
        }
    }

    /// A namespace of the test's own.
    pub async fn namespace(&self, client: &kube::Client, name: &str) {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace");
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating namespace {name}: {e}"),
        }
        // Pods are refused until the namespace's default ServiceAccount
        // is there.
        let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), name);
        super::eventually_within("the namespace's default ServiceAccount", PATIENCE, || {
            let sa = sa.clone();
            async move { sa.get_opt("default").await.is_ok_and(|s| s.is_some()) }
        })
        .await;
    }
}

/// How long a test waits on the real control plane: its controllers run
/// on their own periods (the disruption controller, KWOK), so longer than
/// on the simulator, still far beyond what any step needs.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Starts a control plane owned by this process (stopped when it ends).
fn start_own() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("maintd-control-plane-{}", std::process::id()));
    up_owned(&dir, None)?;
    Ok(dir)
}

/// `scripts/control-plane up` in `dir`, owned by this process, with
/// `audit_policy` as its API server's audit policy when given.
fn up_owned(dir: &Path, audit_policy: Option<&Path>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut up = Command::new(root().join("scripts/control-plane"));
    up.arg("up")
        .arg(dir)
        .arg("--owner")
        .arg(std::process::id().to_string());
    if let Some(policy) = audit_policy {
        up.env("CONTROL_PLANE_AUDIT_POLICY", policy);
    }
    let out = up
        .output()
        .map_err(|e| format!("running scripts/control-plane: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/control-plane up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// deploy/ as `kubectl apply -k deploy/medik8s` installs it (the default
/// install and what medik8s adds), without the DaemonSet, and medik8s' own
/// CRD (tests/fixtures) that it builds on. Server-side apply, so that test
/// processes sharing a control plane may do it at once.
/// Whether every process of the control plane in `dir` still runs; the
/// ones that exited are named, with the end of their logs (a test that
/// fails for want of its control plane says why).
fn alive(dir: &Path) -> Result<(), String> {
    let mut dead = Vec::new();
    for p in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        let Ok(pid) = std::fs::read_to_string(dir.join(format!("{p}.pid"))) else {
            dead.push(format!(
                "{p}: not started (no {p}.pid in {})",
                dir.display()
            ));
            continue;
        };
        let running = std::path::Path::new(&format!("/proc/{}", pid.trim())).exists();
        if !running {
            let log = std::fs::read_to_string(dir.join(format!("log/{p}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            dead.push(format!(
                "{p} (pid {}) exited; the end of its log:\n{}",
                pid.trim(),
                tail.join("\n")
            ));
        }
    }
    if dead.is_empty() {
        Ok(())
    } else {
        Err(dead.join("\n"))
    }
}

fn install_deploy(dir: &Path) -> Result<(), String> {
    let kubeconfig = dir.join("admin.kubeconfig");
    let medik8s_crd = root().join("tests/fixtures/medik8s-crd.yaml");
    let medik8s_crd = medik8s_crd.to_string_lossy().to_string();
    run(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &medik8s_crd,
        ],
        None,
    )?;
    let deploy = root().join("deploy/medik8s");
    let rendered = run(&kubeconfig, &["kustomize", &deploy.to_string_lossy()], None)?;
    let kept: Vec<&str> = rendered
        .split("\n---\n")
        .filter(|doc| !doc.lines().any(|l| l.trim() == "kind: DaemonSet"))
        .collect();
    let objects = kept.join("\n---\n");
    // The namespaces and CRDs first: what lives in them is refused until
    // they are there.
    for attempt in 0.. {
        match run(
            &kubeconfig,
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&objects),
        ) {
            Ok(_) => break,
            Err(e) if attempt < 10 => {
                tracing::debug!("applying deploy/ again: {e}");
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
    run(
        &kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/nodemaintenances.maintd.io",
            "crd/nodedrains.maintd.io",
            "crd/nodemaintenances.nodemaintenance.medik8s.io",
        ],
        None,
    )?;
    // Established is not served yet: for a moment the API server answers
    // a new resource with 429 "storage is (re)initializing".
    for resource in [
        "nodemaintenances.maintd.io",
        "nodedrains.maintd.io",
        "nodemaintenances.nodemaintenance.medik8s.io",
    ] {
        let mut tries = 0;
        while let Err(e) = run(&kubeconfig, &["get", resource], None) {
            tries += 1;
            if tries > 100 {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

fn run(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    match kubectl(kubeconfig, args, stdin) {
        (true, out, _) => Ok(out),
        (false, _, err) => Err(format!("kubectl {}: {err}", args.join(" "))),
    }
}

/// kubectl with `kubeconfig`; (success, stdout, stderr).
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .expect("kubectl is installed on this machine (the tests use it as an independent client)");
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(input.as_bytes());
    }
    let out = child.wait_with_output().expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn config_from(kubeconfig: &Path) -> kube::Config {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("a kubeconfig");
    kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("a client configuration")
}

async fn client_from(kubeconfig: &Path) -> kube::Client {
    kube::Client::try_from(config_from(kubeconfig).await).expect("a client")
}
