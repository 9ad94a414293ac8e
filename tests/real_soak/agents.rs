//! The agents of a round as processes (`maintd run`), so that a fault can
//! SIGKILL one as the kernel's OOM killer or a node's crash would: only
//! what it wrote to the API and to disk is left for the next one.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

/// One node's agent.
pub struct AgentProcess {
    pub node: String,
    pub manifests: PathBuf,
    pub stash: PathBuf,
    pub log: PathBuf,
    /// Its read-only endpoint (`/v1/status`), host:port.
    pub listen: String,
    kubeconfig: tempfile::NamedTempFile,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
}

/// The binary the agents run: this build's.
fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_maintd"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl AgentProcess {
    /// An agent for `node` (not started), its static pod directory and
    /// stash under `dir`, reaching the API server with `kubeconfig`.
    pub fn new(node: &str, dir: &Path, kubeconfig: tempfile::NamedTempFile) -> AgentProcess {
        let manifests = dir.join("manifests");
        let stash = dir.join("stash");
        std::fs::create_dir_all(&manifests).expect("the static pod directory");
        AgentProcess {
            node: node.to_string(),
            manifests,
            stash,
            log: dir.join("agent.log"),
            listen: format!("127.0.0.1:{}", free_port()),
            kubeconfig,
            child: None,
            starts: 0,
        }
    }

    /// Starts it (again), with the rights deploy/ gives an agent: its
    /// kubeconfig holds a token bound to its node.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the agent's log file");
        let child = Command::new(binary())
            .args(["run", "--node", &self.node, "--listen", &self.listen])
            .args(["--listen-local", "", "--inhibit-shutdown", "false"])
            .arg("--kubeconfig")
            .arg(self.kubeconfig.path())
            .arg("--static-pod-dir")
            .arg(&self.manifests)
            .arg("--static-pod-stash")
            .arg(&self.stash)
            // Above the API server's bookmark interval (a minute), below
            // the default two: a connection left half-open is noticed
            // within the round.
            .args(["--watch-idle-timeout-seconds", "75"])
            .env("MAINTD_LOG", "info,kube_client::client::builder=off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("maintd starts");
        self.child = Some(child);
        self.starts += 1;
    }

    /// SIGKILL, and wait until it is gone.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Whether it runs; if it exited on its own, how, with the end of its
    /// log.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!(
                "the agent of {} exited by itself ({status}); the end of its log:\n{}",
                self.node,
                self.log_tail(20)
            )),
            Err(e) => Some(format!("the agent of {}: {e}", self.node)),
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// What its endpoint says of the drain (`/v1/status`), if it answers.
    pub async fn status(&self) -> Option<serde_json::Value> {
        maintd::cli::LocalClient::new(&self.listen)
            .status()
            .await
            .ok()
    }
}
