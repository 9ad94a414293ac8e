//! Watches: a stream of JSON lines `{"type": ..., "object": ...}` from a
//! resourceVersion on, with bookmarks, 410 for a compacted resourceVersion,
//! selector transitions and timeouts, as the apiserver's watch cache serves
//! them.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::errors::ApiError;
use super::resources::{Gr, ResourceDef};
use super::select::{FieldSelector, LabelSelector};
use super::state::SimState;
use super::store::{EventType, Route, StoreEvent, View};
use super::table;

/// What a watch request asked for.
pub struct WatchRequest {
    pub def: Arc<ResourceDef>,
    pub version: String,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub resource_version: Option<String>,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Option<Duration>,
    pub table: bool,
    /// Objects as `PartialObjectMetadata` (metadata only).
    pub metadata_only: bool,
}

impl WatchRequest {
    /// The collection path the watch was made on, e.g.
    /// `/apis/policy/v1/namespaces/web/poddisruptionbudgets`.
    pub fn path(&self) -> String {
        let root = if self.def.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.def.group, self.version)
        };
        match &self.namespace {
            Some(ns) => format!("{root}/namespaces/{ns}/{}", self.def.plural),
            None => format!("{root}/{}", self.def.plural),
        }
    }

    fn matches(&self, ev_ns: &str, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && ns != ev_ns
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    fn encode(&self, kind: &str, obj: &Value) -> Bytes {
        let api_version = self.def.api_version(&self.version);
        let object = if self.metadata_only {
            super::server::partial_metadata(obj)
        } else if self.table {
            table::to_table(&self.def, std::slice::from_ref(obj), "", false)
        } else if obj["apiVersion"].as_str() != Some(api_version.as_str()) {
            let mut o = obj.clone();
            o["apiVersion"] = json!(api_version);
            o
        } else {
            return line(&json!({"type": kind, "object": obj}));
        };
        line(&json!({"type": kind, "object": object}))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut md = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        line(&json!({
            "type": "BOOKMARK",
            "object": {"kind": self.def.kind, "apiVersion": self.def.api_version(&self.version), "metadata": md},
        }))
    }
}

fn line(v: &Value) -> Bytes {
    let mut buf = serde_json::to_vec(v).unwrap_or_default();
    buf.push(b'\n');
    Bytes::from(buf)
}

/// The narrowest part of a resource that requests with these field
/// selectors concern, as the API server's watch cache indexes it: one
/// object by name, one node's pods, or else the whole resource. A watch is
/// woken only by its route's changes; a list reads only its route's
/// objects.
pub fn route_for(gr: &Gr, fields: &FieldSelector) -> Route {
    if let Some(name) = fields.equal_to("metadata.name") {
        return Route::Name(gr.clone(), name.to_string());
    }
    if gr.is_pods()
        && let Some(node) = fields.equal_to("spec.nodeName").filter(|n| !n.is_empty())
    {
        return Route::PodsOn(node.to_string());
    }
    Route::Resource(gr.clone())
}

/// Starts a watch: returns the receiving end of its stream of lines.
pub fn start(sim: &Arc<SimState>, req: WatchRequest) -> Result<mpsc::Receiver<Bytes>, ApiError> {
    let gr = req.def.gr();
    let (tx, out) = mpsc::channel::<Bytes>(1024);
    let mut initial: Vec<Bytes> = Vec::new();
    let mut gone = false;
    let rx;
    let start_rv;
    let seen;
    {
        let mut store = sim.store();
        seen = Seen {
            home: store.home(&gr).clone(),
            view: store.view(&gr).cloned(),
        };
        rx = store.subscribe_route(route_for(&gr, &req.fields));
        let asked: Option<u64> = match req.resource_version.as_deref() {
            None | Some("") | Some("0") => None,
            Some(s) => Some(
                s.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?,
            ),
        };
        let current = store.current_rv();
        match asked {
            Some(rv) if !req.send_initial_events => match store.events_since(rv) {
                Some(events) => {
                    for ev in events.iter().filter_map(|e| seen.of(e)) {
                        if let Some((kind, obj)) = transition(&req, &ev) {
                            initial.push(req.encode(kind, obj));
                        }
                    }
                }
                None => {
                    let status = ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        store.compacted_rv() + 1
                    ))
                    .status();
                    initial.push(line(&json!({"type": "ERROR", "object": status})));
                    gone = true;
                }
            },
            _ => {
                for obj in store.list(&gr, req.namespace.as_deref()) {
                    if req.labels.matches(&obj) && req.fields.matches(&obj) {
                        initial.push(req.encode("ADDED", &obj));
                    }
                }
                if req.send_initial_events && req.bookmarks {
                    initial.push(req.bookmark(current, true));
                }
            }
        }
        start_rv = current;
    }
    let interval = sim.config.bookmark_interval;
    let faults = sim.faults.clone();
    let open = sim.watches.opened(req.path());
    tokio::spawn(async move {
        let _open = open;
        for l in initial {
            if tx.send(l).await.is_err() {
                return;
            }
        }
        if gone {
            return;
        }
        stream(req, seen, rx, tx, start_rv, interval, faults).await;
    });
    Ok(out)
}

/// Which store events a watch is about, and how it sees them: a view's
/// watcher (events.k8s.io Events) hears its home's changes, converted.
struct Seen {
    home: Gr,
    view: Option<View>,
}

impl Seen {
    fn of(&self, ev: &Arc<StoreEvent>) -> Option<Arc<StoreEvent>> {
        if ev.gr != self.home {
            return None;
        }
        Some(match &self.view {
            Some(view) => view.event(ev),
            None => ev.clone(),
        })
    }
}

/// The watches being served now, by collection path: the audit log
/// records when a watch starts, this says whether it is still open.
#[derive(Debug, Default)]
pub struct OpenWatches(Arc<std::sync::Mutex<BTreeMap<String, usize>>>);

impl OpenWatches {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, usize>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a watch on `path` until the returned value is dropped.
    fn opened(&self, path: String) -> OpenWatch {
        *self.lock().entry(path.clone()).or_default() += 1;
        OpenWatch {
            open: self.0.clone(),
            path,
        }
    }

    /// Open watches per path (paths with none left out).
    pub fn snapshot(&self) -> BTreeMap<String, usize> {
        self.lock().clone()
    }

    /// How many watches are open on paths that contain `part`.
    pub fn count(&self, part: &str) -> usize {
        self.lock()
            .iter()
            .filter(|(p, _)| p.contains(part))
            .map(|(_, n)| n)
            .sum()
    }
}

/// One open watch, counted until dropped.
struct OpenWatch {
    open: Arc<std::sync::Mutex<BTreeMap<String, usize>>>,
    path: String,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.path) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.path);
            }
        }
    }
}

/// What a watcher with this request sees of one store event, if anything:
/// an object moving into or out of its selector is ADDED or DELETED.
fn transition<'a>(req: &WatchRequest, ev: &'a StoreEvent) -> Option<(&'static str, &'a Value)> {
    let ns = ev.object["metadata"]["namespace"].as_str().unwrap_or("");
    let now = req.matches(ns, &ev.object);
    let before = ev.prev.as_ref().map(|p| req.matches(ns, p));
    match ev.kind {
        EventType::Added => now.then_some(("ADDED", &ev.object)),
        EventType::Deleted => (before.unwrap_or(now)).then_some(("DELETED", &ev.object)),
        EventType::Modified => match (before.unwrap_or(true), now) {
            (true, true) => Some(("MODIFIED", &ev.object)),
            (false, true) => Some(("ADDED", &ev.object)),
            (true, false) => Some(("DELETED", &ev.object)),
            (false, false) => None,
        },
    }
}

async fn stream(
    req: WatchRequest,
    seen: Seen,
    mut rx: broadcast::Receiver<Arc<StoreEvent>>,
    tx: mpsc::Sender<Bytes>,
    start_rv: u64,
    interval: Duration,
    faults: Arc<super::faults::Faults>,
) {
    let mut last_rv = start_rv;
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let (path, name) = (
        req.path(),
        req.fields.equal_to("metadata.name").map(str::to_string),
    );
    // Events held back by a lagging-watch fault, with when each is due.
    let mut late: VecDeque<(tokio::time::Instant, Bytes)> = VecDeque::new();
    loop {
        let sleep_until = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let next_late = late.front().map(|(due, _)| *due);
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    if ev.rv <= last_rv {
                        continue;
                    }
                    last_rv = ev.rv;
                    let Some(ev) = seen.of(&ev) else {
                        continue;
                    };
                    let Some((kind, obj)) = transition(&req, &ev) else {
                        continue;
                    };
                    let lag = faults.watch_lag(&path, name.as_deref());
                    if lag.is_zero() && late.is_empty() {
                        if tx.send(req.encode(kind, obj)).await.is_err() {
                            return;
                        }
                    } else {
                        late.push_back((tokio::time::Instant::now() + lag, req.encode(kind, obj)));
                    }
                }
                // A watcher that falls this far behind is closed, as the
                // apiserver closes slow watchers; the client resumes.
                Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = async {
                match next_late {
                    Some(due) => tokio::time::sleep_until(due).await,
                    None => std::future::pending().await,
                }
            } => {
                if let Some((_, line)) = late.pop_front()
                    && tx.send(line).await.is_err()
                {
                    return;
                }
            }
            // A bookmark never runs ahead of an event held back.
            _ = tick.tick(), if req.bookmarks && late.is_empty() => {
                if tx.send(req.bookmark(last_rv, false)).await.is_err() {
                    return;
                }
            }
            _ = sleep_until => return,
            _ = tx.closed() => return,
        }
    }
}
