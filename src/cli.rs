//! The client side of `maintd status`, `maintd drain` and `maintd undrain`:
//! HTTP to the agent's unix socket (or, for reads, to a TCP listener).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

/// The agent's unix socket by default (`--listen-local` of `maintd run`),
/// where drain requests are taken.
pub const DEFAULT_SOCKET: &str = "/run/maintd/maintd.sock";

/// How long one request to the agent may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `drain --wait` reads the status.
const POLL: Duration = Duration::from_millis(500);

/// Exit code of `drain --wait` when the timeout ran out.
pub const EXIT_TIMEOUT: i32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "cannot reach maintd's local endpoint at {addr} ({why}): is the agent running on this node with --listen-local {addr}, and are you root? Use --endpoint for another socket"
    )]
    Unreachable { addr: String, why: String },
    #[error("maintd at {addr} did not answer within {REQUEST_TIMEOUT:?}")]
    Timeout { addr: String },
    #[error("maintd at {addr} refused {what}: HTTP {code}: {message}")]
    Refused {
        addr: String,
        what: String,
        code: u16,
        message: String,
    },
    #[error("maintd at {addr} sent an answer that is not JSON: {why}")]
    BadAnswer { addr: String, why: String },
    #[error(
        "the local drain request was withdrawn while waiting (`maintd undrain`, or the agent restarted and forgot it); not reporting the node as drained"
    )]
    Withdrawn,
}

/// A client for one agent's local endpoint.
pub struct LocalClient {
    addr: String,
}

impl LocalClient {
    /// `addr` is the path of the agent's unix socket, or host:port of a TCP
    /// listener (an `http://` prefix is accepted).
    pub fn new(addr: &str) -> LocalClient {
        let addr = addr
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/');
        LocalClient {
            addr: addr.to_string(),
        }
    }

    /// Whether the address is a unix socket's path.
    fn is_socket(&self) -> bool {
        self.addr.contains('/')
    }

    /// One request on a new connection.
    async fn send(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        async fn over<S>(
            stream: S,
            req: http::Request<Full<Bytes>>,
        ) -> Result<http::Response<hyper::body::Incoming>, String>
        where
            S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        {
            let io = hyper_util::rt::TokioIo::new(stream);
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            sender.send_request(req).await.map_err(|e| e.to_string())
        }
        if self.is_socket() {
            let stream = tokio::net::UnixStream::connect(&self.addr)
                .await
                .map_err(|e| e.to_string())?;
            over(stream, req).await
        } else {
            let stream = tokio::net::TcpStream::connect(&self.addr)
                .await
                .map_err(|e| e.to_string())?;
            over(stream, req).await
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, CliError> {
        let (code, body) = self.fetch(method, path, body).await?;
        let value: Value = serde_json::from_slice(&body).map_err(|e| CliError::BadAnswer {
            addr: self.addr.clone(),
            why: e.to_string(),
        })?;
        if !code.is_success() {
            return Err(CliError::Refused {
                addr: self.addr.clone(),
                what: format!("{method} {path}"),
                code: code.as_u16(),
                message: value["error"].as_str().unwrap_or("").to_string(),
            });
        }
        Ok(value)
    }

    /// One request; the answer's status and body, whatever they are.
    async fn fetch(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(http::StatusCode, Bytes), CliError> {
        let unreachable = |why: String| CliError::Unreachable {
            addr: self.addr.clone(),
            why,
        };
        let bytes = body.map(|b| b.to_string()).unwrap_or_default();
        let host = if self.is_socket() {
            "localhost"
        } else {
            &self.addr
        };
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, host)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|e| unreachable(format!("not a valid address: {e}")))?;
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, self.send(req))
            .await
            .map_err(|_| CliError::Timeout {
                addr: self.addr.clone(),
            })?
            .map_err(unreachable)?;
        let code = resp.status();
        let body = tokio::time::timeout(REQUEST_TIMEOUT, resp.into_body().collect())
            .await
            .map_err(|_| CliError::Timeout {
                addr: self.addr.clone(),
            })?
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok((code, body))
    }

    /// The current or last drain's timeline, as SVG.
    pub async fn timeline_svg(&self) -> Result<String, CliError> {
        let path = "/v1/timeline.svg";
        let (code, body) = self.fetch("GET", path, None).await?;
        if !code.is_success() {
            let value: Value = serde_json::from_slice(&body).unwrap_or_default();
            return Err(CliError::Refused {
                addr: self.addr.clone(),
                what: format!("GET {path}"),
                code: code.as_u16(),
                message: value["error"].as_str().unwrap_or("").to_string(),
            });
        }
        String::from_utf8(body.to_vec()).map_err(|e| CliError::BadAnswer {
            addr: self.addr.clone(),
            why: e.to_string(),
        })
    }

    /// The status document.
    pub async fn status(&self) -> Result<Value, CliError> {
        self.call("GET", "/v1/status", None).await
    }

    /// Asks for a drain; returns the status.
    pub async fn drain(&self, reason: &str, deadline: Option<u64>) -> Result<Value, CliError> {
        let mut body = json!({ "reason": reason });
        if let Some(d) = deadline {
            body["deadline_seconds"] = json!(d);
        }
        self.call("POST", "/v1/drain", Some(body)).await
    }

    /// Withdraws the local request; returns the status.
    pub async fn undrain(&self) -> Result<Value, CliError> {
        self.call("POST", "/v1/undrain", None).await
    }
}

/// Waits until the node is drained (Ok(0)) or `timeout` runs out
/// (Ok(EXIT_TIMEOUT), with the blockers printed), printing a line whenever
/// the drain moves.
pub async fn wait_drained(
    client: &LocalClient,
    timeout: Option<Duration>,
) -> Result<i32, CliError> {
    let start = tokio::time::Instant::now();
    let mut last = String::new();
    loop {
        let st = client.status().await?;
        let line = progress_line(&st);
        if line != last {
            println!("[{:>6.1}s] {line}", start.elapsed().as_secs_f64());
            last = line;
        }
        if st["local_request"].is_null() {
            return Err(CliError::Withdrawn);
        }
        if st["drain"]["phase"] == "Drained" {
            println!("the node is drained");
            return Ok(0);
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            println!(
                "timed out after {:.0}s; the node is not drained (the drain goes on; `maintd undrain` gives up)",
                start.elapsed().as_secs_f64()
            );
            let blockers = blocker_lines(&st);
            if let Some(w) = st["drain"]["waiting"].as_str() {
                println!("the drain has not started: {w}");
            } else if blockers.is_empty() {
                println!("no pod reports a blocker; pods are still terminating");
            } else {
                println!("blocked by:");
                for b in blockers {
                    println!("  {b}");
                }
            }
            return Ok(EXIT_TIMEOUT);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One line: phase, stage, pods left, blockers.
pub fn progress_line(st: &Value) -> String {
    let d = &st["drain"];
    let mut line = format!(
        "{}: {}, {} of {} pods left",
        d["phase"].as_str().unwrap_or("?"),
        stage_text(d),
        d["pods_remaining"],
        d["pods_total"]
    );
    let blockers = blocker_lines(st);
    if !blockers.is_empty() {
        line.push_str("; blocked: ");
        line.push_str(&blockers.join("; "));
    }
    if let Some(w) = d["waiting"].as_str() {
        line.push_str("; ");
        line.push_str(w);
    }
    line
}

fn stage_text(d: &Value) -> String {
    let total = d["stages"].as_array().map_or(0, Vec::len);
    match d["current_stage"].as_u64() {
        Some(n) => {
            let label = d["stages"][n.saturating_sub(1) as usize]["label"]
                .as_str()
                .unwrap_or("");
            format!("stage {n} of {total} ({label})")
        }
        None => format!("no stage running ({total} planned)"),
    }
}

fn blocker_lines(st: &Value) -> Vec<String> {
    st["drain"]["blockers"]
        .as_array()
        .map(|bs| {
            bs.iter()
                .map(|b| {
                    format!(
                        "{}/{}: {}",
                        b["namespace"].as_str().unwrap_or("?"),
                        b["pod"].as_str().unwrap_or("?"),
                        b["reason"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The status document as a human table.
pub fn render_status(st: &Value) -> String {
    let d = &st["drain"];
    let mut rows: Vec<(&str, String)> = vec![
        ("node", st["node"].as_str().unwrap_or("?").to_string()),
        ("phase", d["phase"].as_str().unwrap_or("?").to_string()),
        ("stage", stage_text(d)),
        (
            "pods",
            format!("{} remaining of {}", d["pods_remaining"], d["pods_total"]),
        ),
    ];
    if let Some(w) = d["waiting"].as_str() {
        rows.push(("waiting", w.to_string()));
    }
    let blockers = blocker_lines(st);
    rows.push((
        "blockers",
        if blockers.is_empty() {
            "none".into()
        } else {
            blockers.join("\n                ")
        },
    ));
    let inh = &st["inhibitor"];
    rows.push((
        "inhibitor",
        if inh.is_null() {
            "not configured".into()
        } else {
            format!(
                "{}, budget {}",
                if inh["held"] == true {
                    "held"
                } else {
                    "not held"
                },
                inh["budget_seconds"]
                    .as_f64()
                    .map_or("unknown".into(), |b| format!("{b:.0}s"))
            )
        },
    ));
    let local = &st["local_request"];
    rows.push((
        "local request",
        if local.is_null() {
            "none".into()
        } else {
            format!(
                "{} (since {})",
                local["reason"].as_str().unwrap_or(""),
                local["requested_at"].as_str().unwrap_or("?")
            )
        },
    ));
    rows.push((
        "last error",
        d["last_error"].as_str().unwrap_or("none").to_string(),
    ));
    let sp = &st["static_pods"];
    if let Some(dir) = sp["dir"].as_str() {
        rows.push((
            "static pods",
            format!("{dir} ({})", sp["from"].as_str().unwrap_or("?")),
        ));
    }
    if let Some(w) = sp["warning"].as_str() {
        rows.push(("warning", w.to_string()));
    }
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{k:<15} {v}\n"));
    }
    if let Some(stages) = d["stages"].as_array().filter(|s| !s.is_empty()) {
        out.push_str(&format!(
            "\n{:<6} {:<9} {:<5} LABEL\n",
            "STAGE", "STATE", "LEFT"
        ));
        for s in stages {
            let left = s["pods"]
                .as_array()
                .map_or(0, |p| p.iter().filter(|p| p["state"] != "gone").count());
            out.push_str(&format!(
                "{:<6} {:<9} {:<5} {}\n",
                s["stage"].as_u64().unwrap_or(0),
                s["state"].as_str().unwrap_or("?"),
                left,
                s["label"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_stage_and_blockers() {
        let st = json!({"node": "node-a", "inhibitor": null, "local_request": {"reason": "os update", "requested_at": "t"},
            "drain": {"phase": "Blocked", "current_stage": 1, "pods_remaining": 2, "pods_total": 5,
              "stages": [{"stage": 1, "state": "running", "label": "Default priority 0", "pods": [{"state": "blocked"}, {"state": "gone"}]}],
              "blockers": [{"namespace": "default", "pod": "web-1", "reason": "PodDisruptionBudget web"}], "last_error": null}});
        let t = render_status(&st);
        assert!(t.contains("stage 1 of 1 (Default priority 0)"), "{t}");
        assert!(t.contains("default/web-1: PodDisruptionBudget web"), "{t}");
        assert!(t.contains("not configured"), "{t}");
        assert!(t.contains("os update"), "{t}");
        assert!(progress_line(&st).contains("2 of 5 pods left"));
    }
}
