//! What one client sends and receives, counted at the client: a tower
//! layer around a `kube::Client`'s HTTP stack. On the real API server
//! there is no simulator's audit to ask, so each agent's client counts
//! for itself: requests by kind and collection (`LIST pods`, `WATCH
//! leases`, `PATCH nodes/status`), answers by status (409, 429), the
//! bytes of every answer's body, the events of every watch (one JSON
//! line each, bookmarks included), and how many watches are open now.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;

/// Everything one client counted so far.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Requests by kind and collection (see [`call_of`]).
    pub calls: BTreeMap<String, u64>,
    /// Requests answered 409 Conflict, by collection.
    pub conflicts: BTreeMap<String, u64>,
    /// Requests answered 429 Too Many Requests.
    pub throttled: u64,
    /// The same, by kind and collection (see [`call_of`]).
    pub throttled_by: BTreeMap<String, u64>,
    /// Bytes of answers' bodies, watch streams included, by resource.
    pub bytes: BTreeMap<String, u64>,
    /// Watch events (lines of a watch stream), bookmarks included.
    pub events: u64,
    /// Watches whose stream is open now.
    pub watches_open: i64,
    /// The most watches open at once.
    pub watches_most: i64,
}

impl Counts {
    pub fn requests(&self) -> u64 {
        self.calls.values().sum()
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes.values().sum()
    }
}

/// One client's counts, shared between its requests and the bench.
#[derive(Debug, Default)]
pub struct Counter(Mutex<Counts>);

impl Counter {
    pub fn snapshot(&self) -> Counts {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // A poisoned count is still a count.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The layer: `ClientBuilder::try_from(config)?.with_layer(&CountLayer(c))`.
#[derive(Clone)]
pub struct CountLayer(pub Arc<Counter>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counter: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    counter: Arc<Counter>,
}

/// Closes a watch's count when its stream ends, however it ends.
struct OpenWatch(Arc<Counter>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.lock().watches_open -= 1;
    }
}

type Boxed<E> = UnsyncBoxBody<Bytes, E>;

impl<S, B> tower::Service<Request<kube::client::Body>> for Counted<S>
where
    S: tower::Service<Request<kube::client::Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<Boxed<B::Error>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let path = req.uri().path().to_string();
        let watch = is_watch(req.uri().query().unwrap_or(""));
        let call = call_of(req.method().as_str(), &path, watch);
        let resource = resource_of(&path);
        let counter = self.counter.clone();
        *counter.lock().calls.entry(call.clone()).or_insert(0) += 1;
        let answer = self.inner.call(req);
        Box::pin(async move {
            let resp = answer.await?;
            let status = resp.status().as_u16();
            let open = {
                let mut c = counter.lock();
                match status {
                    409 => *c.conflicts.entry(collection_of(&path)).or_insert(0) += 1,
                    429 => {
                        c.throttled += 1;
                        *c.throttled_by.entry(call).or_insert(0) += 1;
                    }
                    _ => {}
                }
                if watch && status == 200 {
                    c.watches_open += 1;
                    c.watches_most = c.watches_most.max(c.watches_open);
                    Some(OpenWatch(counter.clone()))
                } else {
                    None
                }
            };
            let (parts, body) = resp.into_parts();
            let counted = body.map_frame(move |frame| {
                if let Some(data) = frame.data_ref() {
                    let mut c = counter.lock();
                    *c.bytes.entry(resource.clone()).or_insert(0) += data.len() as u64;
                    if open.is_some() {
                        c.events += data.iter().filter(|b| **b == b'\n').count() as u64;
                    }
                }
                frame
            });
            Ok(Response::from_parts(parts, UnsyncBoxBody::new(counted)))
        })
    }
}

/// Whether a query asks for a watch (`watch=true` or `watch=1`).
fn is_watch(query: &str) -> bool {
    query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1")
}

/// The resource of a request path and its subresource, without names:
/// `nodes`, `nodes/status`, `leases`.
pub fn collection_of(path: &str) -> String {
    let seg: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match seg.first() {
        Some(&"api") => seg.get(2..).unwrap_or_default(),
        Some(&"apis") => seg.get(3..).unwrap_or_default(),
        _ => &seg[..],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        _ => rest,
    };
    match rest {
        [plural, _, sub, ..] => format!("{plural}/{sub}"),
        [plural, ..] => plural.to_string(),
        [] => path.to_string(),
    }
}

/// The plural of a request path's resource (bytes are counted by it).
pub fn resource_of(path: &str) -> String {
    let c = collection_of(path);
    if c.starts_with('/') {
        // Discovery and the like: the path itself.
        return c;
    }
    c.split('/').next().unwrap_or_default().to_string()
}

/// What a request did, by kind and collection: a GET without a name is a
/// LIST, a watch a WATCH.
pub fn call_of(method: &str, path: &str, watch: bool) -> String {
    let collection = collection_of(path);
    let named = collection.contains('/')
        || path.trim_end_matches('/').rsplit('/').next() != Some(collection.as_str());
    let kind = match method {
        _ if watch => "WATCH",
        "GET" if !named => "LIST",
        m => m,
    };
    format!("{kind} {collection}")
}
