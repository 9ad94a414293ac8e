//! The agent's API client: every call has a deadline, and every answer (or
//! its absence) is told to the agent's [`ApiHealth`], so the agent knows
//! how long the API server has been out of reach.
//!
//! The deadline covers a call up to the response's headers: for a watch
//! that is the moment the stream starts (the watch's own idle guard takes
//! over from there, see `index.rs`); for any other call the body follows at
//! once and the connection's read timeout bounds it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;

use crate::index::ApiHealth;

/// How long one API call may take before it is abandoned, by default.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection-level timeouts for a client config: connect within 10 s,
/// and a read that waits longer than `read` on an open connection fails
/// (a backstop for a half-open connection in the middle of a response).
pub fn with_connection_timeouts(mut config: kube::Config, read: Duration) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(read);
    // Time a pooled connection sat idle must not count against a read.
    config.reset_reader_on_write = true;
    config
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
            let what = format!("{} {}", req.method(), req.uri().path());
            match tokio::time::timeout(this.timeout, this.inner.send(req)).await {
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
                        _ => this.health.failed(format!("{what}: {e}")),
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
