//! The agent's API client: every call has a deadline, and every answer (or
//! its absence) is told to the agent's [`ApiHealth`], so the agent knows
//! how long the API server has been out of reach.
//!
//! The deadline covers a whole call, its body included; for a watch it
//! covers the call up to the moment the stream starts (the watch's own
//! idle guard takes over from there, see `index.rs`). Connections also
//! have a connect timeout and a read timeout, a backstop for a connection
//! that goes silent in the middle of a watch.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, DynBody};

use crate::index::ApiHealth;

/// How long one API call may take before it is abandoned, by default.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an open connection may stay silent before a read on it
/// fails: longer than the default watch idle guard, which is what notices
/// a dead watch first; an API server sends a watch a bookmark at least once
/// a minute, so a healthy connection never comes near it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(150);

/// Connection-level timeouts for a client config: connect within 10 s, and
/// a read that waits longer than [`READ_TIMEOUT`] on an open connection
/// fails (kube sets none by default: a read could wait forever).
pub fn with_connection_timeouts(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(READ_TIMEOUT);
    // Time a pooled connection sat idle must not count against a read.
    config.reset_reader_on_write = true;
    config
}

/// How often an HTTP/2 connection to the API server is pinged, idle or
/// not, and how long its answer may take before the connection is closed:
/// a connection left half-open (a NAT or load balancer dropped it) is
/// found within 25 s, and the calls and watches on it fail over to a new
/// one. (client-go pings after 30 s of silence and waits 15 s.)
const PING_INTERVAL: Duration = Duration::from_secs(15);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// The HTTP stack under a [`builder`]'s client.
pub type Stack = tower::util::BoxService<Request<Body>, Response<Box<DynBody>>, tower::BoxError>;

/// A client builder for `config`: kube's own stack (the base URI, the
/// credentials, the extra headers and, when `default_retry` is set, its
/// retries; the connect, read and write timeouts), on a connection that
/// speaks HTTP/2 where the API server offers it, as kubectl and the kubelet
/// do. All of an agent's calls and watches then share one TCP connection,
/// where HTTP/1.1 takes one for each watch and each call in flight (5 to 9
/// for an agent: at 5,000 nodes, tens of thousands of TLS connections for
/// the API server to hold). Over plain http it speaks HTTP/1.1.
pub fn builder(config: kube::Config) -> Result<ClientBuilder<Stack>, kube::Error> {
    use http_body_util::BodyExt as _;
    use kube::client::ConfigExt as _;
    use tower::ServiceExt as _;

    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let tls = match &config.tls_server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
            })?;
            tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => tls,
    };
    let mut connector =
        hyper_timeout::TimeoutConnector::new(tls.enable_http1().enable_http2().wrap_connector(tcp));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let stack = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(client)
        .map_response(|resp| {
            resp.map(|body| Box::new(body.map_err(tower::BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(stack, config.default_namespace.clone()))
}

/// An API error in words a person reads: the API server's own message with
/// its code and reason ("nodes \"x\" not found (404 NotFound)"), or what
/// kept the request from being answered ("connection refused"). kube's own
/// text for an API error carries a debug dump of the whole Status.
pub fn explain(e: &kube::Error) -> String {
    use crate::preflight::{one_line, root_cause};
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", s.reason)
            };
            format!("{} ({}{reason})", one_line(&s.message), s.code)
        }
        kube::Error::HyperError(_) => {
            format!("the API server could not be reached: {}", root_cause(e))
        }
        kube::Error::SerdeError(err) => {
            format!("the API server's answer could not be read: {err}")
        }
        other => one_line(&other.to_string()),
    }
}

/// Wraps `client` so that every call is bounded by `timeout` and reported
/// to `health`.
pub fn guarded(client: kube::Client, timeout: Duration, health: ApiHealth) -> kube::Client {
    let ns = client.default_namespace().to_string();
    kube::Client::new(
        Guarded {
            inner: client,
            timeout,
            health,
        },
        ns,
    )
}

#[derive(Clone)]
struct Guarded {
    inner: kube::Client,
    timeout: Duration,
    health: ApiHealth,
}

impl tower::Service<Request<Body>> for Guarded {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (method, path) = (req.method().to_string(), req.uri().path().to_string());
            let what = format!("{method} {path}");
            let watch = is_watch(&req);
            let call = async {
                let resp = this.inner.send(req).await?;
                if watch && resp.status().is_success() {
                    return Ok(resp);
                }
                // The body is read within the same deadline: a connection
                // that goes silent after the headers must not hold the call.
                let (parts, body) = resp.into_parts();
                let bytes = body.collect_bytes().await?;
                if parts.status == http::StatusCode::FORBIDDEN {
                    let refusals = &this.health.refusals;
                    refusals.refused(&method, &path, &status_message(&bytes));
                } else if parts.status.is_success() {
                    this.health.refusals.allowed(&method, &path);
                }
                Ok(Response::from_parts(parts, Body::from(bytes)))
            };
            match tokio::time::timeout(this.timeout, call).await {
                Ok(Ok(resp)) => {
                    if resp.status().is_server_error() {
                        this.health
                            .failed(format!("{what}: the API server answered {}", resp.status()));
                    } else {
                        this.health.ok();
                    }
                    Ok(resp)
                }
                Ok(Err(e)) => {
                    // An error status is an answer; anything else is not.
                    match &e {
                        kube::Error::Api(s) if s.code < 500 => this.health.ok(),
                        _ => this.health.failed(format!("{what}: {}", explain(&e))),
                    }
                    Err(e)
                }
                Err(_) => {
                    let why = format!(
                        "{what}: no answer from the API server within {}s",
                        this.timeout.as_secs_f64()
                    );
                    this.health.failed(why.clone());
                    Err(kube::Error::Service(why.into()))
                }
            }
        })
    }
}

/// The message of the Status an error answer carries, or the body as text
/// when it is not one.
fn status_message(bytes: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) if v["message"].is_string() => v["message"].as_str().unwrap_or_default().to_string(),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Whether a request opens a watch stream (its body is read for as long as
/// the watch lasts, under the watch's idle guard, not the call's deadline).
fn is_watch(req: &Request<Body>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An API server that sends the headers of an answer and part of its
    /// body, then goes silent with the connection still open (as when a
    /// NAT drops the flow halfway).
    async fn silent_after_headers() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let _ = conn
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"kind\":")
                        .await;
                    std::future::pending::<()>().await;
                    drop(conn);
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn a_call_whose_body_never_ends_fails_at_its_deadline() {
        let url = silent_after_headers().await;
        let config = kube::Config::new(url.parse().unwrap());
        let inner = kube::Client::try_from(with_connection_timeouts(config)).unwrap();
        let health = ApiHealth::default();
        let client = guarded(inner, Duration::from_millis(300), health.clone());
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        // The test's own bound only keeps a broken build from hanging.
        let answer = tokio::time::timeout(Duration::from_secs(30), nodes.get("node-a"))
            .await
            .expect("the call ends on its own deadline");
        let err = answer.expect_err("a body that never ends is an error");
        assert!(err.to_string().contains("no answer"), "{err}");
        assert!(
            health.current_error().is_some_and(|e| e.contains("GET")),
            "the agent's API health records the failure"
        );
    }

    #[test]
    fn only_watch_requests_are_streams() {
        let req = |q: &str| {
            Request::builder()
                .uri(format!("http://x/api/v1/pods?{q}"))
                .body(Body::empty())
                .unwrap()
        };
        assert!(is_watch(&req("watch=true&resourceVersion=5")));
        assert!(is_watch(&req("fieldSelector=a&watch=1")));
        assert!(!is_watch(&req("limit=500")));
        assert!(!is_watch(&req(
            "fieldSelector=metadata.name%3Dwatch%3Dtrue"
        )));
    }
}

#[cfg(test)]
mod explain_tests {
    use super::*;

    #[test]
    fn an_api_error_reads_as_its_message_code_and_reason() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "namespaces \"maintd\" not found",
        }))
        .unwrap();
        let e = kube::Error::Api(Box::new(status));
        assert!(
            e.to_string().contains("Status {"),
            "kube's own text dumps the Status"
        );
        assert_eq!(
            explain(&e),
            "namespaces \"maintd\" not found (404 NotFound)"
        );
    }

    #[test]
    fn an_unreadable_answer_says_so() {
        let bad = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let e = kube::Error::SerdeError(bad);
        assert!(explain(&e).starts_with("the API server's answer could not be read"));
    }
}
