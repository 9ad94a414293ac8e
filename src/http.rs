//! The node-local HTTP endpoint (hyper): status JSON, health and readiness.
//! Two listeners: a read-only one (pod network: status, health, metrics)
//! and a local one (host loopback) that also takes drain requests
//! (`POST /v1/drain`, `POST /v1/undrain`). The read-only listener answers
//! 404 for those paths and never acts on them.
//! Requests are bounded: a body limit, a header read timeout and a
//! per-request timeout, so a slow or hostile client cannot hold the agent.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::drain::progress::Progress;
use crate::index::Index;
use crate::metrics::Metrics;
use crate::trigger::local::LocalRequests;

/// The agent's views of the cluster as they are now, by name.
pub type Views = Arc<dyn Fn() -> Vec<(String, Index)> + Send + Sync>;

/// What the endpoint serves from.
#[derive(Clone)]
pub struct Endpoint {
    pub node: String,
    pub progress: Progress,
    pub pods: Index,
    pub node_index: Index,
    /// Every view the agent keeps now, by name: a view whose watch has been
    /// failing for a minute makes the agent not ready, and says so. Asked
    /// on every request: some watches exist only for a while.
    pub views: Views,
    /// The shutdown lock, when the agent holds one.
    pub inhibitor: Option<tokio::sync::watch::Receiver<crate::inhibitor::InhibitorStatus>>,
    /// Whether this listener may change state (local listener only).
    pub local: bool,
    /// The agent's local drain requests (changed on the local listener only).
    pub local_requests: LocalRequests,
    pub metrics: Arc<Metrics>,
    /// FleetLock (Zincati): served on the local listener only.
    pub fleetlock: Option<Arc<crate::fleetlock::FleetLock<crate::agent::AgentDrain>>>,
    /// The static pod directory, and how it was chosen.
    pub static_pods: crate::drain::static_path::StaticPodDir,
    /// The agent's API health: the calls refused of late make it not ready.
    pub api: crate::index::ApiHealth,
}

/// The body of `POST /v1/drain`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    reason: Option<String>,
    /// Everything must be done within this many seconds (escalation as on
    /// shutdown); none: no deadline.
    deadline_seconds: Option<f64>,
}

const MAX_REASON: usize = 256;
/// A deadline beyond a week is a typo, not a plan.
const MAX_DEADLINE_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

const MAX_BODY: usize = 64 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

fn respond(code: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(
        serde_json::to_vec_pretty(&body).unwrap_or_default(),
    )));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(code: StatusCode, message: &str) -> Response<Full<Bytes>> {
    respond(code, json!({"error": message}))
}

impl Endpoint {
    /// The status document (schema in docs/status.md).
    pub fn status_json(&self) -> serde_json::Value {
        let st = self.progress.status();
        json!({
            "node": self.node,
            "version": env!("CARGO_PKG_VERSION"),
            "drain": st,
            "inhibitor": self.inhibitor.as_ref().map(|i| i.borrow().clone()),
            "local_request": self.local_requests.status(),
            "static_pods": self.static_pods,
            "watches": self.watches_json(),
            "api_refusals": self.api.refusals.recent(),
        })
    }

    /// Each view: whether it has been listed, and why it may be out of
    /// date (its watch has been failing for a minute).
    fn watches_json(&self) -> serde_json::Value {
        let mut w = serde_json::Map::new();
        w.insert("pods_synced".into(), self.pods.synced().into());
        w.insert("node_synced".into(), self.node_index.synced().into());
        let views: serde_json::Map<String, serde_json::Value> = (self.views)()
            .iter()
            .map(|(name, index)| {
                (
                    name.clone(),
                    json!({
                        "synced": index.synced(),
                        "stale": index.stale(),
                        "last_error": index.last_error(),
                    }),
                )
            })
            .collect();
        w.insert("views".into(), views.into());
        w.into()
    }

    /// Why the agent is not ready, if it is not.
    fn not_ready(&self) -> Vec<String> {
        let mut why = Vec::new();
        if !self.pods.synced() {
            why.push("the pods of the node have not been listed yet".to_string());
        }
        if !self.node_index.synced() {
            why.push("the Node has not been read yet".to_string());
        }
        for (name, index) in &(self.views)() {
            if let Some(stale) = index.stale() {
                why.push(format!("the view of {name} is stale: {stale}"));
            }
        }
        why.extend(self.api.refusals.recent());
        if let Some(i) = &self.inhibitor {
            let st = i.borrow();
            if !st.held && !st.preparing {
                why.push(format!(
                    "the shutdown lock is not held{}",
                    st.last_error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ));
            }
        }
        why
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        let body = match Limited::new(body, MAX_BODY).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the request body is larger than 64 KiB (or was cut off)",
                );
            }
        };
        match (&parts.method, parts.uri.path()) {
            (&Method::GET, "/healthz") => respond(StatusCode::OK, json!({"ok": true})),
            (&Method::GET, "/readyz") => {
                let why = self.not_ready();
                if why.is_empty() {
                    respond(StatusCode::OK, json!({"ready": true}))
                } else {
                    respond(
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({"ready": false, "why": why.join("; "), "reasons": why}),
                    )
                }
            }
            (&Method::GET, "/v1/status") => respond(StatusCode::OK, self.status_json()),
            (&Method::GET, "/metrics") => {
                let mut resp = Response::new(Full::new(Bytes::from(self.metrics.encode())));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
                );
                resp
            }
            (_, "/healthz" | "/readyz" | "/v1/status" | "/metrics") => {
                error(StatusCode::METHOD_NOT_ALLOWED, "use GET")
            }
            // Mutating paths do not exist on the read-only listener.
            (_, "/v1/drain" | "/v1/undrain") if !self.local => error(
                StatusCode::NOT_FOUND,
                "drain requests are served on the node-local endpoint only (default 127.0.0.1:9478)",
            ),
            (&Method::POST, "/v1/drain") => self.drain(&body),
            (&Method::POST, "/v1/undrain") => {
                let had = self.local_requests.clear();
                // The reboot slot a planned drain took may still be held by
                // this node from before a restart (the drain was for a
                // reboot): ending the maintenance gives it back, as a
                // FleetLock steady-state does.
                let mut slot_released = None;
                if let Some(fl) = &self.fleetlock {
                    let mut headers = http::HeaderMap::new();
                    headers.insert(
                        crate::fleetlock::PROTOCOL_HEADER,
                        http::HeaderValue::from_static("true"),
                    );
                    let body = json!({"client_params": {"id": self.node, "group": crate::coordination::DEFAULT_GROUP}});
                    let reply = fl.steady_state(&headers, body.to_string().as_bytes()).await;
                    slot_released = Some(reply.is_success());
                }
                let mut status = self.status_json();
                status["withdrawn"] = json!(had);
                status["slot_released"] = json!(slot_released);
                respond(StatusCode::ACCEPTED, status)
            }
            (_, "/v1/drain" | "/v1/undrain") => error(StatusCode::METHOD_NOT_ALLOWED, "use POST"),
            (_, "/v1/pre-reboot" | "/v1/steady-state") if !self.local => error(
                StatusCode::NOT_FOUND,
                "FleetLock is served on the node-local endpoint only (default 127.0.0.1:9478)",
            ),
            (&Method::POST, path @ ("/v1/pre-reboot" | "/v1/steady-state")) => {
                match &self.fleetlock {
                    None => error(
                        StatusCode::NOT_FOUND,
                        "FleetLock is not enabled on this agent",
                    ),
                    Some(fl) => {
                        let reply = if path == "/v1/pre-reboot" {
                            fl.pre_reboot(&parts.headers, &body).await
                        } else {
                            fl.steady_state(&parts.headers, &body).await
                        };
                        let mut resp = Response::new(Full::new(Bytes::from(reply.body())));
                        *resp.status_mut() = StatusCode::from_u16(reply.status)
                            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                        resp.headers_mut().insert(
                            header::CONTENT_TYPE,
                            http::HeaderValue::from_static("application/json"),
                        );
                        resp
                    }
                }
            }
            (_, "/v1/pre-reboot" | "/v1/steady-state") => {
                error(StatusCode::METHOD_NOT_ALLOWED, "use POST")
            }
            _ => error(StatusCode::NOT_FOUND, "unknown path"),
        }
    }
}

impl Endpoint {
    /// `POST /v1/drain`: records the local request; the agent's loop wakes
    /// and drains. An empty body means no reason and no deadline.
    fn drain(&self, body: &[u8]) -> Response<Full<Bytes>> {
        let parsed: DrainBody = if body.iter().all(u8::is_ascii_whitespace) {
            DrainBody {
                reason: None,
                deadline_seconds: None,
            }
        } else {
            match serde_json::from_slice(body) {
                Ok(b) => b,
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!(
                            "the body is not a drain request ({e}); send {{\"reason\": \"...\", \"deadline_seconds\": N}}"
                        ),
                    );
                }
            }
        };
        let reason = parsed
            .reason
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "requested on the local endpoint".into());
        if reason.chars().count() > MAX_REASON || reason.chars().any(char::is_control) {
            return error(
                StatusCode::BAD_REQUEST,
                "the reason must be one line of at most 256 characters",
            );
        }
        let deadline = match parsed.deadline_seconds {
            None => None,
            Some(s) if s.is_finite() && s > 0.0 && s <= MAX_DEADLINE_SECONDS => {
                Some(Duration::from_secs_f64(s))
            }
            Some(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "deadline_seconds must be a positive number of seconds, at most a week",
                );
            }
        };
        self.local_requests.request(&reason, deadline);
        respond(StatusCode::ACCEPTED, self.status_json())
    }
}

/// Binds the read-only listener (`readonly`) and the local one (`local`,
/// which may change state) and serves `endpoint` on each until `stop`; a
/// listener that cannot bind is reported and the agent goes on without it.
pub async fn start(
    endpoint: Endpoint,
    readonly: Option<std::net::SocketAddr>,
    local: Option<std::net::SocketAddr>,
    stop: &CancellationToken,
) {
    for (addr, is_local) in [(readonly, false), (local, true)] {
        let Some(addr) = addr else { continue };
        match TcpListener::bind(addr).await {
            Ok(l) => {
                tracing::info!(%addr, local = is_local, "serving the status endpoint");
                let ep = Endpoint {
                    local: is_local,
                    ..endpoint.clone()
                };
                tokio::spawn(serve(ep, l, stop.clone()));
            }
            Err(e) => tracing::error!(%addr, error = %e, "cannot listen; the endpoint is off"),
        }
    }
}

/// Serves `endpoint` on `listener` until `stop`.
pub async fn serve(endpoint: Endpoint, listener: TcpListener, stop: CancellationToken) {
    let endpoint = Arc::new(endpoint);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.cancelled() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let ep = endpoint.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let ep = ep.clone();
                async move {
                    let resp = tokio::time::timeout(REQUEST_TIMEOUT, ep.handle(req))
                        .await
                        .unwrap_or_else(|_| {
                            error(StatusCode::REQUEST_TIMEOUT, "the request took too long")
                        });
                    Ok::<_, Infallible>(resp)
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5));
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            tokio::select! {
                _ = conn => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}
