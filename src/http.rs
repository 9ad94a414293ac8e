//! The node-local HTTP endpoint (hyper): status JSON, health and readiness.
//! Two listeners: a read-only one (pod network: status, health, metrics)
//! and a local one (host loopback) that will also take drain requests.
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

/// What the endpoint serves from.
#[derive(Clone)]
pub struct Endpoint {
    pub node: String,
    pub progress: Progress,
    pub pods: Index,
    pub node_index: Index,
    /// The shutdown lock, when the agent holds one.
    pub inhibitor: Option<tokio::sync::watch::Receiver<crate::inhibitor::InhibitorStatus>>,
    /// Whether this listener may change state (local listener only).
    pub local: bool,
}

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
            "watches": {"pods_synced": self.pods.synced(), "node_synced": self.node_index.synced()},
        })
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = req.into_parts();
        if Limited::new(body, MAX_BODY).collect().await.is_err() {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is larger than 64 KiB",
            );
        }
        match (&parts.method, parts.uri.path()) {
            (&Method::GET, "/healthz") => respond(StatusCode::OK, json!({"ok": true})),
            (&Method::GET, "/readyz") => {
                let lock_ok = self
                    .inhibitor
                    .as_ref()
                    .is_none_or(|i| i.borrow().held || i.borrow().preparing);
                if self.pods.synced() && self.node_index.synced() && lock_ok {
                    respond(StatusCode::OK, json!({"ready": true}))
                } else {
                    respond(
                        StatusCode::SERVICE_UNAVAILABLE,
                        json!({"ready": false, "why": "watches not synced yet, or the shutdown lock is not held"}),
                    )
                }
            }
            (&Method::GET, "/v1/status") => respond(StatusCode::OK, self.status_json()),
            (_, "/healthz" | "/readyz" | "/v1/status") => {
                error(StatusCode::METHOD_NOT_ALLOWED, "use GET")
            }
            _ => error(StatusCode::NOT_FOUND, "unknown path"),
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
