//! What a client sent, as its own tower layer saw it: each request's
//! method, path and query, and the status it was answered with. On the
//! real API server there is no simulator's audit of reads to ask.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{Request, Response};

/// One request and its answer's status.
#[derive(Debug, Clone)]
pub struct Sent {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
}

impl Sent {
    pub fn is_watch(&self) -> bool {
        self.query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1")
    }

    /// Whether it asks for the current objects first (a streaming list).
    pub fn sends_initial_events(&self) -> bool {
        self.query
            .split('&')
            .any(|kv| kv == "sendInitialEvents=true")
    }
}

/// The requests recorded so far, shared with the layer.
#[derive(Debug, Default, Clone)]
pub struct Recorded(Arc<Mutex<Vec<Sent>>>);

impl Recorded {
    pub fn all(&self) -> Vec<Sent> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl<S> tower::Layer<S> for Recorded {
    type Service = Recording<S>;
    fn layer(&self, inner: S) -> Recording<S> {
        Recording {
            inner,
            recorded: self.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Recording<S> {
    inner: S,
    recorded: Recorded,
}

impl<S, B> tower::Service<Request<kube::client::Body>> for Recording<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<B>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let (method, path) = (req.method().to_string(), req.uri().path().to_string());
        let query = req.uri().query().unwrap_or_default().to_string();
        let recorded = self.recorded.clone();
        let answer = self.inner.call(req);
        Box::pin(async move {
            let resp = answer.await?;
            recorded
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Sent {
                    method,
                    path,
                    query,
                    status: resp.status().as_u16(),
                });
            Ok(resp)
        })
    }
}
