//! Helpers for tests of the agent's HTTP endpoint: an agent with both
//! listeners on free loopback ports, raw HTTP, and a Prometheus text parser.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use maintd::agent::Agent;
use maintd::config::Config;
use maintd::drain::progress::Progress;
use maintd_sim::SimCluster;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A loopback port nobody listens on right now.
pub fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Where a test's request goes: a TCP listener or the agent's unix socket.
#[derive(Debug, Clone)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
}

impl From<SocketAddr> for Target {
    fn from(a: SocketAddr) -> Target {
        Target::Tcp(a)
    }
}

impl From<&std::path::PathBuf> for Target {
    fn from(p: &std::path::PathBuf) -> Target {
        Target::Unix(p.clone())
    }
}

pub struct EndpointAgent {
    pub readonly: SocketAddr,
    /// The unix socket that takes drain requests.
    pub local: std::path::PathBuf,
    /// The FleetLock listener.
    pub fleetlock: SocketAddr,
    _socket_dir: tempfile::TempDir,
    pub progress: Progress,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl EndpointAgent {
    /// An agent for `node` with both listeners, once they answer.
    pub async fn start(sim: &SimCluster, node: &str) -> EndpointAgent {
        Self::start_with(sim, node, |_| {}).await
    }

    /// The same, with settings changed by `edit`.
    pub async fn start_with(
        sim: &SimCluster,
        node: &str,
        edit: impl FnOnce(&mut Config),
    ) -> EndpointAgent {
        let dir = sim
            .static_pod_dir(node)
            .unwrap_or_else(|| "/nonexistent/manifests".into());
        // Reboot slots (local drains, FleetLock) live in the agent's
        // namespace, `maintd` when the agent runs outside a pod.
        super::create_namespace(sim, "maintd").await;
        let mut config = Config::for_node(node, dir);
        let socket_dir = tempfile::tempdir().unwrap();
        let local = socket_dir.path().join("maintd.sock");
        let (readonly, fleetlock) = (free_port(), free_port());
        config.listen = Some(readonly);
        config.listen_local = Some(local.clone());
        config.listen_fleetlock = Some(fleetlock);
        edit(&mut config);
        let agent = Agent::new(config, maintd::testbed::agent_client(sim, node));
        let progress = agent.progress().clone();
        let stop = CancellationToken::new();
        let task = tokio::spawn(agent.run(stop.clone()));
        let socket = local.clone();
        super::eventually("every listener answers", || {
            let socket = socket.clone();
            async move {
                request(readonly, "GET", "/healthz", "").await.0 == 200
                    && request(&socket, "GET", "/healthz", "").await.0 == 200
                    && request(fleetlock, "GET", "/healthz", "").await.0 == 200
            }
        })
        .await;
        EndpointAgent {
            readonly,
            local,
            fleetlock,
            _socket_dir: socket_dir,
            progress,
            stop,
            task,
        }
    }

    pub async fn status(&self) -> Value {
        let (code, body) = request(self.readonly, "GET", "/v1/status", "").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// Waits until the status document satisfies `check`.
    pub async fn wait_status(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let st = self.status().await;
            if check(&st) {
                return st;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting until {what}; last status: {st:#}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// One HTTP/1.1 request over a fresh connection (Connection: close);
/// returns the status code (0 when the connection failed or closed without
/// an answer) and the body.
pub async fn request(
    addr: impl Into<Target>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    request_with_headers(addr, method, path, &[], body).await
}

/// The same, with more headers.
pub async fn request_with_headers(
    addr: impl Into<Target>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let addr = addr.into();
    let host = match &addr {
        Target::Tcp(a) => a.to_string(),
        Target::Unix(_) => "localhost".to_string(),
    };
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    send_raw(addr, raw.as_bytes()).await
}

/// Sends `bytes` as they are and reads the answer to the end.
pub async fn send_raw(addr: impl Into<Target>, bytes: &[u8]) -> (u16, String) {
    async fn exchange<S: AsyncReadExt + AsyncWriteExt + Unpin>(mut s: S, bytes: &[u8]) -> Vec<u8> {
        // The server may answer (and close) before it reads everything.
        let _ = s.write_all(bytes).await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(15), s.read_to_end(&mut out)).await;
        out
    }
    let out = match addr.into() {
        Target::Tcp(a) => match tokio::net::TcpStream::connect(a).await {
            Ok(s) => exchange(s, bytes).await,
            Err(_) => return (0, String::new()),
        },
        Target::Unix(p) => match tokio::net::UnixStream::connect(p).await {
            Ok(s) => exchange(s, bytes).await,
            Err(_) => return (0, String::new()),
        },
    };
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// One metric family of a Prometheus/OpenMetrics text exposition.
#[derive(Debug, Default)]
pub struct Family {
    pub kind: String,
    pub help: String,
    /// (sample name, labels, value)
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

/// Parses the text exposition strictly enough to catch a broken one: every
/// sample belongs to a family declared by a TYPE line before it, with the
/// suffixes its type allows; labels are `name="value"` pairs; values parse.
pub fn parse_exposition(text: &str) -> Result<BTreeMap<String, Family>, String> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut eof = false;
    for line in text.lines() {
        if eof {
            return Err(format!("content after # EOF: {line:?}"));
        }
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kw, name, arg) = (parts.next(), parts.next(), parts.next());
            let (Some(kw), Some(name)) = (kw, name) else {
                return Err(format!("bad comment line {line:?}"));
            };
            let f = families.entry(name.to_string()).or_default();
            match kw {
                "HELP" => f.help = arg.unwrap_or("").to_string(),
                "TYPE" => f.kind = arg.unwrap_or("").to_string(),
                "UNIT" => {}
                _ => return Err(format!("unknown comment {line:?}")),
            }
            continue;
        }
        let (name_labels, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| format!("no value in {line:?}"))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| format!("bad value in {line:?}"))?,
        };
        let (name, labels) = match name_labels.split_once('{') {
            None => (name_labels.to_string(), BTreeMap::new()),
            Some((n, l)) => {
                let l = l
                    .strip_suffix('}')
                    .ok_or_else(|| format!("unclosed labels in {line:?}"))?;
                let mut labels = BTreeMap::new();
                for pair in l.split(',').filter(|p| !p.is_empty()) {
                    let (k, v) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("bad label {pair:?} in {line:?}"))?;
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .ok_or_else(|| format!("unquoted label value in {line:?}"))?;
                    labels.insert(k.to_string(), v.to_string());
                }
                (n.to_string(), labels)
            }
        };
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(format!("bad metric name {name:?}"));
        }
        let family = families
            .iter_mut()
            .filter(|(f, fam)| {
                let suffixes: &[&str] = match fam.kind.as_str() {
                    "counter" => &["_total", "_created"],
                    "histogram" => &["_bucket", "_sum", "_count", "_created"],
                    "info" => &["_info"],
                    _ => &[""],
                };
                suffixes.iter().any(|s| name == format!("{f}{s}"))
            })
            .map(|(_, fam)| fam)
            .next()
            .ok_or_else(|| format!("sample {name:?} has no TYPE line before it"))?;
        family.samples.push((name, labels, value));
    }
    if !eof {
        return Err("no # EOF line".into());
    }
    Ok(families)
}
