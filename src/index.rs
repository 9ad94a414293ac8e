//! The agent's view of the cluster: indexes fed by one list+watch each,
//! answering questions synchronously.
//!
//! Objects are kept as raw JSON rather than typed: one pod whose JSON does
//! not fit the typed model (a malformed priority or owner reference) must not
//! break the whole list, and with it the drain of every other pod. The
//! planner reads what it needs leniently and reports what was wrong.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::{ObjectList, Request};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What to watch: a collection path and an optional field selector.
#[derive(Debug, Clone)]
pub struct WatchTarget {
    /// e.g. "/api/v1/pods" or "/apis/maintd.io/v1alpha1/nodemaintenances".
    pub path: String,
    pub field_selector: Option<String>,
}

#[derive(Default)]
struct Inner {
    /// uid → object
    objects: BTreeMap<String, Arc<Value>>,
    synced: bool,
    last_error: Option<String>,
}

/// A set of objects kept current by a watch. Cheap to clone.
#[derive(Clone)]
pub struct Index {
    inner: Arc<Mutex<Inner>>,
    /// Bumped on every change; waiters subscribe to it.
    generation: Arc<watch::Sender<u64>>,
}

impl Default for Index {
    fn default() -> Self {
        Self::new()
    }
}

impl Index {
    pub fn new() -> Self {
        let (tx, _) = watch::channel(0);
        Index {
            inner: Arc::default(),
            generation: Arc::new(tx),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// Every object, in uid order.
    pub fn all(&self) -> Vec<Arc<Value>> {
        self.lock().objects.values().cloned().collect()
    }

    pub fn get(&self, uid: &str) -> Option<Arc<Value>> {
        self.lock().objects.get(uid).cloned()
    }

    /// The first object with this name (for single-object watches).
    pub fn by_name(&self, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .objects
            .values()
            .find(|o| o["metadata"]["name"].as_str() == Some(name))
            .cloned()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.lock().objects.contains_key(uid)
    }

    /// Whether the first list has been received.
    pub fn synced(&self) -> bool {
        self.lock().synced
    }

    pub fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    /// A receiver that changes whenever the index does.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Waits until `done` holds for the index's content.
    pub async fn wait_until(&self, mut done: impl FnMut(&Index) -> bool) {
        let mut rx = self.changes();
        loop {
            if done(self) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    fn replace_all(&self, items: Vec<Value>) {
        let mut inner = self.lock();
        inner.objects = items
            .into_iter()
            .filter_map(|o| Some((uid_of(&o)?, Arc::new(o))))
            .collect();
        inner.synced = true;
        inner.last_error = None;
        drop(inner);
        self.bump();
    }

    fn apply(&self, ev: WatchEvent<Value>) {
        let mut inner = self.lock();
        match ev {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                if let Some(uid) = uid_of(&o) {
                    inner.objects.insert(uid, Arc::new(o));
                }
            }
            WatchEvent::Deleted(o) => {
                if let Some(uid) = uid_of(&o) {
                    inner.objects.remove(&uid);
                }
            }
            WatchEvent::Bookmark(_) | WatchEvent::Error(_) => return,
        }
        drop(inner);
        self.bump();
    }

    fn set_error(&self, e: String) {
        self.lock().last_error = Some(e);
        self.bump();
    }

    /// Keeps the index current until `stop`: list, then watch from the
    /// list's resourceVersion, resuming after each watch ends and listing
    /// again after a 410. Errors are retried with capped backoff.
    pub async fn run(self, client: kube::Client, target: WatchTarget, stop: CancellationToken) {
        let req = Request::new(target.path.clone());
        let mut backoff = Backoff::new();
        'relist: loop {
            let mut lp = ListParams::default();
            if let Some(fs) = &target.field_selector {
                lp = lp.fields(fs);
            }
            let list = tokio::select! {
                r = list_all(&client, &req, &lp) => r,
                _ = stop.cancelled() => return,
            };
            let mut rv = match list {
                Ok((items, rv)) => {
                    self.replace_all(items);
                    backoff.reset();
                    rv
                }
                Err(e) => {
                    self.set_error(format!("listing {}: {e}", target.path));
                    tracing::warn!(path = %target.path, error = %e, "list failed; retrying");
                    if sleep_or_stop(backoff.next_delay(), &stop).await {
                        return;
                    }
                    continue 'relist;
                }
            };
            loop {
                let mut wp = WatchParams::default().timeout(290);
                if let Some(fs) = &target.field_selector {
                    wp = wp.fields(fs);
                }
                let http_req = match req.watch(&wp, &rv) {
                    Ok(r) => r,
                    Err(e) => {
                        self.set_error(format!("building watch request: {e}"));
                        return;
                    }
                };
                let stream = tokio::select! {
                    s = client.request_events::<Value>(http_req) => s,
                    _ = stop.cancelled() => return,
                };
                let mut stream = match stream {
                    Ok(s) => s.boxed(),
                    Err(e) => {
                        self.set_error(format!("watching {}: {e}", target.path));
                        if sleep_or_stop(backoff.next_delay(), &stop).await {
                            return;
                        }
                        continue 'relist;
                    }
                };
                loop {
                    let next = tokio::select! {
                        n = stream.try_next() => n,
                        _ = stop.cancelled() => return,
                    };
                    match next {
                        Ok(Some(WatchEvent::Error(e))) if e.code == 410 => continue 'relist,
                        Ok(Some(WatchEvent::Error(e))) => {
                            self.set_error(format!("watch of {}: {}", target.path, e.message));
                            if sleep_or_stop(backoff.next_delay(), &stop).await {
                                return;
                            }
                            continue 'relist;
                        }
                        Ok(Some(ev)) => {
                            if let Some(new_rv) = event_rv(&ev) {
                                rv = new_rv;
                            }
                            self.apply(ev);
                        }
                        // The server ended the watch (timeout): resume.
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(path = %target.path, error = %e, "watch broke; resuming");
                            if sleep_or_stop(Duration::from_millis(200), &stop).await {
                                return;
                            }
                            break;
                        }
                    }
                }
            }
        }
    }
}

async fn list_all(
    client: &kube::Client,
    req: &Request,
    lp: &ListParams,
) -> Result<(Vec<Value>, String), kube::Error> {
    let mut items = Vec::new();
    let mut lp = lp.clone();
    lp.limit = Some(500);
    loop {
        let http_req = req.list(&lp).map_err(kube::Error::BuildRequest)?;
        let page: ObjectList<Value> = client.request(http_req).await?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp.continue_token = Some(c),
            _ => return Ok((items, page.metadata.resource_version.unwrap_or_default())),
        }
    }
}

fn uid_of(o: &Value) -> Option<String> {
    o["metadata"]["uid"].as_str().map(str::to_string)
}

fn event_rv(ev: &WatchEvent<Value>) -> Option<String> {
    match ev {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
            o["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string)
        }
        WatchEvent::Bookmark(b) => Some(b.metadata.resource_version.clone()),
        WatchEvent::Error(_) => None,
    }
}

/// Returns true if `stop` fired first.
async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.cancelled() => true,
    }
}

/// Exponential backoff with jitter, capped.
#[derive(Debug, Clone)]
pub struct Backoff {
    next_ms: u64,
    base_ms: u64,
    cap_ms: u64,
}

impl Backoff {
    pub fn new() -> Self {
        Self::with(200, 5_000)
    }

    pub fn with(base_ms: u64, cap_ms: u64) -> Self {
        Backoff {
            next_ms: base_ms,
            base_ms,
            cap_ms,
        }
    }

    /// The next delay: grows ×2 up to the cap, with ±25 % jitter so many
    /// agents do not retry in step.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next_ms;
        self.next_ms = (self.next_ms * 2).min(self.cap_ms);
        let jitter = rand::random_range(0.75..1.25);
        Duration::from_millis(((d as f64) * jitter) as u64)
    }

    pub fn reset(&mut self) {
        self.next_ms = self.base_ms;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}
