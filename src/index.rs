//! The agent's view of the cluster: indexes fed by one watch each,
//! answering questions synchronously.
//!
//! Objects are kept as raw JSON rather than typed: one pod whose JSON does
//! not fit the typed model (a malformed priority or owner reference) must not
//! break the whole list, and with it the drain of every other pod. The
//! planner reads what it needs leniently and reports what was wrong.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use kube::api::WatchEvent;
use serde_json::Value;
use tokio::sync::watch;

mod run;
pub use run::WatchLists;

/// What to watch: a collection path and an optional field selector.
#[derive(Debug, Clone)]
pub struct WatchTarget {
    /// e.g. "/api/v1/pods" or "/apis/maintd.io/v1alpha1/nodemaintenances".
    pub path: String,
    pub field_selector: Option<String>,
    /// Only the objects with these labels (`key=value,...`).
    pub label_selector: Option<String>,
    /// How the watch guards against a dead connection.
    pub guard: WatchGuard,
    /// Ask for metadata only (`PartialObjectMetadata`): the objects' specs
    /// and statuses are not sent, only names, uids, generations, labels.
    pub metadata_only: bool,
    /// What is kept of each object, applied as it arrives (page by page
    /// on a list). By default everything but `metadata.managedFields`,
    /// which are often the larger part of an object and which only the
    /// agent's own Node needs (to name who uncordoned it).
    pub trim: fn(&mut Value),
}

impl WatchTarget {
    pub fn new(path: impl Into<String>, field_selector: Option<String>, guard: WatchGuard) -> Self {
        WatchTarget {
            path: path.into(),
            field_selector,
            label_selector: None,
            guard,
            metadata_only: false,
            trim: strip_managed_fields,
        }
    }

    /// The same watch, of the objects with these labels only.
    pub fn labelled(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }

    /// The same watch, keeping the objects whole, `metadata.managedFields`
    /// included.
    pub fn keeping_managed_fields(mut self) -> Self {
        self.trim = |_| {};
        self
    }

    /// The same watch, keeping of each object only what `trim` leaves: for
    /// views of many objects of which little is read.
    pub fn trimmed_with(mut self, trim: fn(&mut Value)) -> Self {
        self.trim = trim;
        self
    }

    /// The same watch, of the objects' metadata only.
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }
}

/// What a metadata-only list asks for (the API server falls back to full
/// objects where it cannot, which the index reads just as well).
const ACCEPT_METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const ACCEPT_METADATA: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// How a watch notices a dead connection, and where it reports contact
/// with the API server.
#[derive(Debug, Clone)]
pub struct WatchGuard {
    /// A watch with no event and no bookmark for this long is abandoned and
    /// made again. The API server sends a bookmark at least once a minute
    /// to a watch that asks for them, so a healthy connection never trips
    /// it and costs no extra request.
    pub idle_timeout: Duration,
    /// A view whose watch has been failing for this long is stale.
    pub stale_after: Duration,
    /// Told of every answer from the API server.
    pub health: ApiHealth,
}

impl Default for WatchGuard {
    fn default() -> Self {
        WatchGuard {
            idle_timeout: DEFAULT_WATCH_IDLE_TIMEOUT,
            stale_after: STALE_AFTER,
            health: ApiHealth::default(),
        }
    }
}

/// The default idle guard of a watch: two bookmark intervals.
pub const DEFAULT_WATCH_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// A view whose watch has been failing for longer than this is reported
/// as stale (`/readyz`, status).
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// When the API server last answered, as seen by everything of one agent
/// that talks to it (watches, API calls). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ApiHealth {
    inner: Arc<Mutex<HealthInner>>,
    /// The calls the API server refused (403), said once each.
    pub refusals: crate::refusals::Refusals,
    /// Whether the API server sends a watch's current objects first.
    pub lists: WatchLists,
}

#[derive(Debug, Default)]
struct HealthInner {
    last_ok: Option<Instant>,
    last_error: Option<(Instant, String)>,
}

impl ApiHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, HealthInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The API server answered (any answer below 500 counts: a 404 or a
    /// 429 is an API server at work).
    pub fn ok(&self) {
        self.lock().last_ok = Some(Instant::now());
    }

    /// A call failed without an answer (timeout, connection error, 5xx).
    pub fn failed(&self, why: String) {
        self.lock().last_error = Some((Instant::now(), why));
    }

    /// When the API server last answered, if ever.
    pub fn last_ok(&self) -> Option<Instant> {
        self.lock().last_ok
    }

    /// The last failure, if it is newer than the last answer.
    pub fn current_error(&self) -> Option<String> {
        let h = self.lock();
        match (&h.last_error, h.last_ok) {
            (Some((at, why)), ok) if ok.is_none_or(|ok| *at > ok) => Some(why.clone()),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Inner {
    /// uid → object
    objects: BTreeMap<String, Arc<Value>>,
    synced: bool,
    last_error: Option<String>,
    /// Since when the watch has been failing (cleared by a list or an
    /// event that arrives).
    failing_since: Option<Instant>,
    /// How long a failing watch may go before the view is stale.
    stale_after: Option<Duration>,
    /// uid → the agent's own writes the view holds ahead of the watch.
    ahead: HashMap<String, Ahead>,
}

/// The most versions of its own earlier writes a view keeps out for one
/// object (see [`Ahead`]).
const MAX_AHEAD: usize = 16;

/// An object the view holds from the agent's own write, before the watch
/// has brought it: the version held, and the versions of the agent's
/// earlier writes the watch still has to bring before it (two writes in a
/// row, the second made against the first). Those are older than what is
/// held: put in, they would take the view back until the next event
/// came, and an edit made from it then would be refused a conflict.
#[derive(Debug)]
struct Ahead {
    /// The version held; `before` holds at most [`MAX_AHEAD`].
    held: String,
    before: Vec<String>,
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

    /// How many objects there are.
    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().objects.is_empty()
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

    /// How long the watch has been failing, if it is now.
    pub fn failing_for(&self) -> Option<Duration> {
        self.lock().failing_since.map(|t| t.elapsed())
    }

    /// Why the view may be out of date: its watch has been failing for
    /// longer than its guard's `stale_after` ([`STALE_AFTER`] by default).
    pub fn stale(&self) -> Option<String> {
        let inner = self.lock();
        let since = inner.failing_since?;
        (since.elapsed() >= inner.stale_after.unwrap_or(STALE_AFTER)).then(|| {
            format!(
                "no update for {}s: {}",
                since.elapsed().as_secs(),
                inner
                    .last_error
                    .as_deref()
                    .unwrap_or("the watch keeps failing")
            )
        })
    }

    /// A receiver that changes whenever the index does, from now on (what
    /// came before counts as seen).
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

    /// Puts one object in (replacing the one with its uid).
    pub fn upsert(&self, obj: Value) {
        let Some(uid) = uid_of(&obj) else { return };
        let mut inner = self.lock();
        inner.ahead.remove(&uid);
        inner.objects.insert(uid, Arc::new(obj));
        drop(inner);
        self.bump();
    }

    /// Puts in `obj`, the object as this agent's own write left it, only if
    /// the index still holds the version the write was made against
    /// (`from`, its resourceVersion precondition): then the watch's next
    /// event for it is this very write, so the index only sees it sooner,
    /// and never goes back to an older version when the event comes.
    /// Whether it was put in.
    pub fn upsert_own_write(&self, obj: Value, from: &str) -> bool {
        let Some(uid) = uid_of(&obj) else {
            return false;
        };
        let mut inner = self.lock();
        let current = inner
            .objects
            .get(&uid)
            .is_some_and(|o| o["metadata"]["resourceVersion"].as_str() == Some(from));
        if !current {
            return false;
        }
        match obj["metadata"]["resourceVersion"].as_str() {
            Some(rv) => {
                let held = rv.to_string();
                // `from` is an earlier own write still ahead of the watch:
                // the watch brings it before this one.
                let before = match inner.ahead.remove(&uid) {
                    Some(mut a) if a.held == from => {
                        a.before.push(from.to_string());
                        // Bounded: writes kept up while the watch brings
                        // none keep only the latest (an older one let in
                        // takes the view back only until the next event).
                        if a.before.len() > MAX_AHEAD {
                            a.before.remove(0);
                        }
                        a.before
                    }
                    _ => Vec::new(),
                };
                inner.ahead.insert(uid.clone(), Ahead { held, before });
            }
            None => {
                inner.ahead.remove(&uid);
            }
        }
        inner.objects.insert(uid, Arc::new(obj));
        drop(inner);
        self.bump();
        true
    }

    /// Takes the object with `uid` out.
    pub fn remove(&self, uid: &str) {
        let mut inner = self.lock();
        inner.ahead.remove(uid);
        let removed = inner.objects.remove(uid).is_some();
        drop(inner);
        if removed {
            self.bump();
        }
    }

    /// Marks the index as holding a full view (for an index filled by
    /// [`Index::upsert`] rather than by [`Index::run`]).
    pub fn mark_synced(&self) {
        let mut inner = self.lock();
        if inner.synced && inner.failing_since.is_none() {
            return;
        }
        inner.synced = true;
        inner.failing_since = None;
        inner.last_error = None;
        drop(inner);
        self.bump();
    }

    fn replace_all(&self, items: Vec<Value>) {
        let mut inner = self.lock();
        inner.objects = items
            .into_iter()
            .filter_map(|o| Some((uid_of(&o)?, Arc::new(o))))
            .collect();
        // Listed now: as current as anything the agent wrote before.
        inner.ahead.clear();
        inner.synced = true;
        inner.last_error = None;
        inner.failing_since = None;
        drop(inner);
        self.bump();
    }

    fn apply(&self, ev: WatchEvent<Value>) {
        let mut inner = self.lock();
        inner.failing_since = None;
        match ev {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                if let Some(uid) = uid_of(&o) {
                    // An earlier own write of what the view holds already
                    // (see `Ahead`) stays out; the write held, or anything
                    // after it, ends the view's lead.
                    let rv = o["metadata"]["resourceVersion"].as_str();
                    if let Some(a) = inner.ahead.get_mut(&uid) {
                        if let Some(at) = a.before.iter().position(|b| Some(b.as_str()) == rv) {
                            a.before.remove(at);
                            return;
                        }
                        inner.ahead.remove(&uid);
                    }
                    inner.objects.insert(uid, Arc::new(o));
                }
            }
            WatchEvent::Deleted(o) => {
                if let Some(uid) = uid_of(&o) {
                    inner.ahead.remove(&uid);
                    inner.objects.remove(&uid);
                }
            }
            WatchEvent::Bookmark(_) | WatchEvent::Error(_) => return,
        }
        drop(inner);
        self.bump();
    }

    /// Wakes everyone waiting on [`Index::changes`] without changing the
    /// content (something they judge besides the objects changed).
    pub fn touch(&self) {
        self.bump();
    }

    /// Records why the view cannot be kept current (a failed list or
    /// watch, or a failed check before its watch can start); the view
    /// counts as failing from then until a list or an event arrives.
    pub fn note_error(&self, e: String) {
        let mut inner = self.lock();
        inner.last_error = Some(e);
        inner.failing_since.get_or_insert_with(Instant::now);
        drop(inner);
        self.bump();
    }
}

/// Drops `metadata.managedFields`, which nothing of the agent reads but
/// the Node's.
pub fn strip_managed_fields(o: &mut Value) {
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

/// What the agent keeps of a pod: all it reads. Of its spec, all but the
/// containers (images, commands, environment, probes, mounts: most of a
/// pod's bytes, and nothing the drain reads); of its status, the phase
/// alone (conditions, addresses and container statuses change often and
/// are read by nobody here).
pub fn trim_pod(o: &mut Value) {
    strip_managed_fields(o);
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        for k in ["containers", "initContainers", "ephemeralContainers"] {
            spec.remove(k);
        }
    }
    if let Some(status) = o.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|k, _| k == "phase");
    }
}

fn uid_of(o: &Value) -> Option<String> {
    o["metadata"]["uid"].as_str().map(str::to_string)
}

/// Exponential backoff with jitter, capped.
///
/// Not backon (in Cargo.lock only for kube-runtime, which the agent does
/// not build): its jitter only adds, up to +100 %, where this spreads ±25 %
/// around the delay, and its backoff cannot be reset, only rebuilt.
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

/// Sleeps until `at`; without one, never returns (a `select!` branch that
/// is off).
pub async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Waits for a change on `rx`, if there is a receiver; without one, never
/// returns (a `select!` branch that is off).
pub async fn changed_if_any<T>(
    rx: &mut Option<watch::Receiver<T>>,
) -> Result<(), watch::error::RecvError> {
    match rx.as_mut() {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(rv: &str, unschedulable: bool) -> Value {
        json!({"metadata": {"uid": "u1", "name": "node-a", "resourceVersion": rv},
               "spec": {"unschedulable": unschedulable}})
    }

    /// The agent's own write goes in only over the version it was made
    /// against: over anything else (the watch moved on, or is behind what
    /// the write read) the watch's events stay in charge.
    #[test]
    fn an_own_write_goes_in_only_over_the_version_it_was_made_against() {
        let index = Index::new();
        index.upsert(node("7", false));
        let changes = index.changes();
        assert!(index.upsert_own_write(node("8", true), "7"));
        assert!(changes.has_changed().unwrap(), "those waiting on it wake");
        assert_eq!(
            index.by_name("node-a").unwrap()["spec"]["unschedulable"],
            true
        );
        // The watch already brought a newer version: the write is older.
        index.upsert(node("9", false));
        assert!(!index.upsert_own_write(node("8", true), "7"));
        assert_eq!(
            index.by_name("node-a").unwrap()["metadata"]["resourceVersion"],
            "9"
        );
        // Made against a version the watch has not brought yet.
        assert!(!index.upsert_own_write(node("11", true), "10"));
        assert_eq!(
            index.by_name("node-a").unwrap()["metadata"]["resourceVersion"],
            "9"
        );
    }

    /// Two own writes in a row, the second made against the first before
    /// the watch brought it: the watch's event of the first comes after
    /// the second is in, and leaves it there. An edit of the Node made
    /// from the view then was refused a conflict: in a 1,000-node
    /// rollout, 255 of the agents' 361 Node edits refused so came within
    /// a second of the agent's own last write of that Node (6 after
    /// anyone else's).
    #[test]
    fn the_watch_bringing_an_earlier_own_write_does_not_take_the_view_back() {
        let index = Index::new();
        index.replace_all(vec![node("7", true)]);
        // The uncordon, then the conditions, each made against the last.
        assert!(index.upsert_own_write(node("8", false), "7"));
        assert!(index.upsert_own_write(node("9", false), "8"));
        let rv = || index.by_name("node-a").unwrap()["metadata"]["resourceVersion"].clone();
        let changes = index.changes();
        index.apply(WatchEvent::Modified(node("8", false)));
        assert_eq!(rv(), "9", "the first write's event after the second");
        assert!(
            !changes.has_changed().unwrap(),
            "nothing changed for those waiting"
        );
        index.apply(WatchEvent::Modified(node("9", false)));
        assert_eq!(rv(), "9");
        // Caught up: the next events are put in as they come.
        index.apply(WatchEvent::Modified(node("10", true)));
        assert_eq!(rv(), "10");
        index.apply(WatchEvent::Modified(node("8", false)));
        assert_eq!(rv(), "8", "no lead left: the watch is in charge");
    }

    /// An event the agent's writes do not account for (nothing should
    /// come between them, each made against the last) is put in: the
    /// watch knows better than the agent's record of its own writes.
    #[test]
    fn an_event_the_own_writes_do_not_account_for_is_put_in() {
        let index = Index::new();
        index.replace_all(vec![node("7", true)]);
        assert!(index.upsert_own_write(node("8", false), "7"));
        assert!(index.upsert_own_write(node("9", false), "8"));
        index.apply(WatchEvent::Modified(node("12", true)));
        let rv = || index.by_name("node-a").unwrap()["metadata"]["resourceVersion"].clone();
        assert_eq!(rv(), "12");
        index.apply(WatchEvent::Modified(node("8", false)));
        assert_eq!(rv(), "8", "the lead ended with the unknown event");
        // A list ends the lead too; so does the object's deletion.
        assert!(index.upsert_own_write(node("13", false), "8"));
        assert!(index.upsert_own_write(node("14", false), "13"));
        index.replace_all(vec![node("14", false)]);
        index.apply(WatchEvent::Modified(node("13", false)));
        assert_eq!(rv(), "13");
        assert!(index.upsert_own_write(node("15", false), "13"));
        assert!(index.upsert_own_write(node("16", false), "15"));
        index.apply(WatchEvent::Deleted(node("16", false)));
        assert!(index.by_name("node-a").is_none());
        index.apply(WatchEvent::Added(node("15", false)));
        assert_eq!(rv(), "15");
    }

    /// Own writes kept up while the watch brings none: the view keeps out
    /// the latest of them, never more than [`MAX_AHEAD`].
    #[test]
    fn a_view_keeps_out_a_bounded_number_of_its_own_earlier_writes() {
        let index = Index::new();
        index.replace_all(vec![node("100", true)]);
        for rv in 101..=140 {
            assert!(index.upsert_own_write(node(&rv.to_string(), false), &(rv - 1).to_string()));
        }
        let kept = index.lock().ahead.get("u1").map(|a| a.before.len());
        assert_eq!(kept, Some(MAX_AHEAD));
        let rv = || index.by_name("node-a").unwrap()["metadata"]["resourceVersion"].clone();
        // The latest earlier writes stay out; the held one ends the lead.
        for earlier in (140 - MAX_AHEAD)..140 {
            index.apply(WatchEvent::Modified(node(&earlier.to_string(), false)));
            assert_eq!(rv(), "140", "{earlier}");
        }
        index.apply(WatchEvent::Modified(node("140", false)));
        assert!(index.lock().ahead.is_empty());
    }

    /// A pod as a kubelet reports it: trimmed, it is a fraction of its
    /// size and reads the same to the drain (its plan entry, its volumes,
    /// whether it is ready).
    #[test]
    fn a_trimmed_pod_reads_the_same_to_the_drain() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                "labels": {"app": "web"}, "annotations": {"maintd.io/drain": "skip"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d", "uid": "r1", "controller": true}],
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {"nodeName": "node-a", "priority": 1000, "priorityClassName": "high",
                "terminationGracePeriodSeconds": 45,
                "tolerations": [{"key": "maintd.io/draining", "operator": "Exists"}],
                "volumes": [{"name": "scratch", "emptyDir": {}},
                            {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}],
                "initContainers": [{"name": "init", "image": "registry.example/init:1"}],
                "containers": [{"name": "web", "image": "registry.example/web:1",
                    "env": [{"name": "A", "value": "x".repeat(2000)}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "web", "ready": true, "image": "registry.example/web:1",
                    "state": {"running": {"startedAt": "2026-11-28T10:00:00Z"}}}]},
        });
        let mut trimmed = pod.clone();
        trim_pod(&mut trimmed);
        assert!(trimmed.to_string().len() * 3 < pod.to_string().len());
        let (a, b) = (
            crate::drain::plan::PodInfo::from_json(&pod),
            crate::drain::plan::PodInfo::from_json(&trimmed),
        );
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(trimmed["spec"]["volumes"], pod["spec"]["volumes"]);
        assert_eq!(trimmed["status"], json!({"phase": "Running"}));
    }
}
