//! The agent's HTTP endpoint (hyper): status JSON, health, readiness,
//! metrics, and the requests that change state. Three listeners, each
//! serving what its [`Role`] allows:
//! - read-only (TCP, loopback by default): status, health, metrics;
//! - local (a unix socket, mode 0600): also drain requests (`POST
//!   /v1/drain`, `/v1/undrain`), taken only from root or maintd's own user,
//!   as the kernel tells the caller's uid (`SO_PEERCRED`);
//! - FleetLock (loopback TCP, opt-in): Zincati's `pre-reboot` and
//!   `steady-state`, which take a reboot slot and never carry a deadline.
//!
//! Requests are bounded: a cap on open connections per listener, small
//! header buffers, a body limit (a body is read only where one is
//! expected), a header read timeout and a per-request timeout, so a slow or
//! hostile client cannot hold the agent or grow it.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
    /// What this listener serves.
    pub role: Role,
    /// The agent's local drain requests (changed on the local listener only).
    pub local_requests: LocalRequests,
    pub metrics: Arc<Metrics>,
    /// FleetLock (Zincati): served on the local listener only.
    pub fleetlock: Option<Arc<crate::fleetlock::FleetLock<crate::agent::AgentDrain>>>,
    /// The static pod directory, and how it was chosen.
    pub static_pods: crate::drain::static_path::StaticPodDir,
    /// The agent's API health: the calls refused of late make it not ready.
    pub api: crate::index::ApiHealth,
    /// Listeners that could not be opened: each makes the agent not ready.
    pub listen_errors: Arc<Mutex<Vec<String>>>,
}

/// What one listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Status, health, metrics: nothing that changes state.
    ReadOnly,
    /// The unix socket: also drain requests and FleetLock, from root or
    /// maintd's own user.
    Local,
    /// Loopback TCP for Zincati: FleetLock and the reads.
    FleetLock,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::ReadOnly => "readonly",
            Role::Local => "local",
            Role::FleetLock => "fleetlock",
        }
    }

    /// At most this many connections are open at once; more are closed as
    /// they arrive (a probe or a scrape is one connection at a time).
    fn max_connections(self) -> usize {
        match self {
            Role::ReadOnly => 64,
            Role::Local | Role::FleetLock => 16,
        }
    }
}

/// Who is on the other end of a connection, as the kernel says.
#[derive(Debug, Clone, Copy, Default)]
pub struct Peer {
    /// The caller's uid, on the unix socket (None: the kernel did not say).
    pub uid: Option<u32>,
    /// The connection came in on the unix socket.
    pub unix: bool,
}

/// Where the agent listens.
#[derive(Debug, Clone, Default)]
pub struct Listeners {
    pub readonly: Option<std::net::SocketAddr>,
    pub local: Option<PathBuf>,
    /// Let the local socket's group connect too (0660, not 0600): the node
    /// helper, in the agent's group, passes the host's drain requests on.
    /// The caller's uid is checked either way.
    pub local_group: bool,
    pub fleetlock: Option<std::net::SocketAddr>,
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
/// The most a connection buffers while reading a request's headers (hyper's
/// smallest allowed).
const MAX_HEADER_BUFFER: usize = 8192;
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

    /// `GET /v1/timeline.svg`: the current or last drain as a picture; 404
    /// before the first drain.
    fn timeline_svg(&self) -> Response<Full<Bytes>> {
        let st = self.progress.status();
        let recorded = self.progress.recorded();
        match crate::timeline::chart(&self.node, &recorded, st.deadline.as_deref()) {
            Ok(chart) => {
                let mut resp =
                    Response::new(Full::new(Bytes::from(crate::timeline::svg::render(&chart))));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    http::HeaderValue::from_static("image/svg+xml"),
                );
                resp
            }
            Err(e) => error(StatusCode::NOT_FOUND, &e.to_string()),
        }
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
        why.extend(
            self.listen_errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        );
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

    async fn handle(self: Arc<Self>, req: Request<Incoming>, peer: Peer) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        // Only a POST carries a body worth reading; any other is left
        // unread (the connection then closes after the answer).
        let body = if parts.method == Method::POST {
            match Limited::new(body, MAX_BODY).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the request body is larger than 64 KiB (or was cut off)",
                    );
                }
            }
        } else {
            Bytes::new()
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
            (&Method::GET, "/v1/timeline.svg") => self.timeline_svg(),
            (_, "/healthz" | "/readyz" | "/v1/status" | "/metrics" | "/v1/timeline.svg") => {
                error(StatusCode::METHOD_NOT_ALLOWED, "use GET")
            }
            // Drain requests are taken on the unix socket alone, from root
            // or maintd's own user.
            (_, "/v1/drain" | "/v1/undrain") if self.role != Role::Local => error(
                StatusCode::NOT_FOUND,
                &format!(
                    "drain requests are taken on maintd's unix socket only (default {}); `maintd drain` uses it",
                    crate::cli::DEFAULT_SOCKET
                ),
            ),
            (&Method::POST, "/v1/drain" | "/v1/undrain") if !may_change_state(peer) => error(
                StatusCode::FORBIDDEN,
                &format!(
                    "only root or maintd's own user (uid {}) may ask for a drain; this caller is uid {}",
                    nix::unistd::geteuid(),
                    peer.uid.map_or("unknown".to_string(), |u| u.to_string())
                ),
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
            (_, "/v1/pre-reboot" | "/v1/steady-state") if self.role == Role::ReadOnly => error(
                StatusCode::NOT_FOUND,
                "FleetLock is served on its own loopback listener only (--listen-fleetlock)",
            ),
            (&Method::POST, "/v1/pre-reboot" | "/v1/steady-state") if !may_change_state(peer) => {
                error(
                    StatusCode::FORBIDDEN,
                    "only root or maintd's own user may use FleetLock on the unix socket",
                )
            }
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
        self.local_requests.request(
            crate::trigger::local::LocalSource::Request,
            &reason,
            deadline,
        );
        respond(StatusCode::ACCEPTED, self.status_json())
    }
}

/// Whether `peer` may change state: a TCP caller (the FleetLock listener,
/// loopback only) or, on the unix socket, root or maintd's own user. A
/// caller on the socket whose uid the kernel did not tell is refused.
fn may_change_state(peer: Peer) -> bool {
    if !peer.unix {
        return true;
    }
    peer.uid
        .is_some_and(|uid| uid == 0 || uid == nix::unistd::geteuid().as_raw())
}

/// Opens each listener of `listeners` and serves `endpoint` on it until
/// `stop`. A listener that cannot be opened is logged, and makes the agent
/// not ready, saying why (the agent goes on without it: the shutdown lock
/// matters more than any endpoint).
pub async fn start(endpoint: Endpoint, listeners: &Listeners, stop: &CancellationToken) {
    let failed = |what: String| {
        tracing::error!("{what}");
        endpoint
            .listen_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    };
    let with_role = |role| {
        Arc::new(Endpoint {
            role,
            ..endpoint.clone()
        })
    };
    for (addr, role) in [
        (listeners.readonly, Role::ReadOnly),
        (listeners.fleetlock, Role::FleetLock),
    ] {
        let Some(addr) = addr else { continue };
        match TcpListener::bind(addr).await {
            Ok(l) => {
                tracing::info!(%addr, role = role.label(), "listening");
                tokio::spawn(serve(with_role(role), l, stop.clone()));
            }
            Err(e) => failed(format!(
                "the {} listener cannot listen on {addr}: {e}",
                role.label()
            )),
        }
    }
    if let Some(path) = &listeners.local {
        let mode = if listeners.local_group { 0o660 } else { 0o600 };
        match bind_socket_mode(path, mode) {
            Ok(l) => {
                tracing::info!(path = %path.display(), role = "local", "listening");
                tokio::spawn(serve(with_role(Role::Local), l, stop.clone()));
            }
            Err(e) => failed(format!(
                "the local listener cannot listen on {}: {e}",
                path.display()
            )),
        }
    }
}

/// Binds the unix socket at `path`, mode 0600 (see [`bind_socket_mode`]).
pub fn bind_socket(path: &Path) -> std::io::Result<UnixListener> {
    bind_socket_mode(path, 0o600)
}

/// Binds the unix socket at `path` with `mode`, its directory made if
/// missing. A socket left by an agent that is gone is replaced; one that
/// answers belongs to a live process, and anything else is not ours: both
/// are left alone (an error).
pub fn bind_socket_mode(path: &Path, mode: u32) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is there; it is left alone",
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another process answers on it (is another maintd running?)",
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// How long to wait after an accept fails (out of file descriptors), at
/// first and at most: the loop must not spin.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// A listener the endpoint is served on: each connection comes with who is
/// on its other end.
trait Accept: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn next(
        &self,
    ) -> impl std::future::Future<Output = std::io::Result<(Self::Stream, Peer)>> + Send;
}

impl Accept for TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn next(&self) -> std::io::Result<(Self::Stream, Peer)> {
        let (stream, _) = self.accept().await?;
        Ok((stream, Peer::default()))
    }
}

impl Accept for UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn next(&self) -> std::io::Result<(Self::Stream, Peer)> {
        let (stream, _) = self.accept().await?;
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        Ok((stream, Peer { uid, unix: true }))
    }
}

/// Serves `endpoint` on `listener` until `stop`.
async fn serve<L: Accept>(endpoint: Arc<Endpoint>, listener: L, stop: CancellationToken) {
    let limit = Arc::new(Semaphore::new(endpoint.role.max_connections()));
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        let accepted = tokio::select! {
            a = listener.next() => a,
            _ = stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF.0;
                if let Some(permit) = admit(&endpoint, &limit) {
                    let conn = serve_connection(endpoint.clone(), stream, peer, permit);
                    tokio::spawn(until_stopped(conn, stop.clone()));
                }
            }
            Err(e) => backoff = accept_failed(&endpoint, e, backoff, &stop).await,
        }
    }
}

/// A place for one more connection, or None (counted) when the listener
/// has its most open: the new one is then closed as it is dropped.
fn admit(endpoint: &Endpoint, limit: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
    let permit = limit.clone().try_acquire_owned().ok();
    if permit.is_none() {
        let label = vec![("listener".to_string(), endpoint.role.label().to_string())];
        endpoint
            .metrics
            .http_connections_refused
            .get_or_create(&label)
            .inc();
    }
    permit
}

/// Waits before the next accept after `e`, longer each time in a row.
async fn accept_failed(
    endpoint: &Endpoint,
    e: std::io::Error,
    backoff: Duration,
    stop: &CancellationToken,
) -> Duration {
    tracing::warn!(listener = endpoint.role.label(), error = %e, "accepting a connection failed; waiting {backoff:?}");
    tokio::select! {
        _ = tokio::time::sleep(backoff) => {}
        _ = stop.cancelled() => {}
    }
    (backoff * 2).min(ACCEPT_BACKOFF.1)
}

async fn until_stopped(conn: impl std::future::Future<Output = ()>, stop: CancellationToken) {
    tokio::select! {
        _ = conn => {}
        _ = stop.cancelled() => {}
    }
}

/// One connection: HTTP/1.1 with small buffers and a header timeout, each
/// request bounded by [`REQUEST_TIMEOUT`]. Holds its place (`permit`) and
/// is counted open until it ends.
pub(crate) async fn serve_connection<S>(
    endpoint: Arc<Endpoint>,
    stream: S,
    peer: Peer,
    permit: OwnedSemaphorePermit,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let label = vec![("listener".to_string(), endpoint.role.label().to_string())];
    let open = endpoint
        .metrics
        .http_connections
        .get_or_create(&label)
        .clone();
    open.inc();
    let svc = hyper::service::service_fn(move |req| {
        let ep = endpoint.clone();
        async move {
            let resp = tokio::time::timeout(REQUEST_TIMEOUT, ep.handle(req, peer))
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
        .header_read_timeout(Duration::from_secs(5))
        .max_buf_size(MAX_HEADER_BUFFER)
        .max_headers(32);
    let _ = builder
        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
        .await;
    open.dec();
    drop(permit);
}
