//! The simulated cluster's object store: every object as JSON, one global
//! resourceVersion counter, an event history for watch resumption and a
//! broadcast of live changes.
//!
//! Like etcd behind a kube-apiserver, the store knows nothing about the
//! semantics of the objects; validation, defaulting and graceful deletion live
//! in `api.rs`, controllers in `kubelet.rs` and `controllers.rs`. A resource
//! may be a [`View`] of another's objects, converted on the way in and out
//! by functions its registration gives (events.k8s.io Events, `events.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::errors::ApiError;
use super::resources::{Gr, ResourceDef};

/// What happened to an object, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object. `prev` lets a filtered watch turn a change that
/// moves an object out of its selector into a DELETED, as the apiserver does.
#[derive(Debug)]
pub struct StoreEvent {
    pub rv: u64,
    pub gr: Gr,
    pub kind: EventType,
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

/// (namespace or "", name)
pub type ObjKey = (String, String);

/// Objects of one resource, ordered by namespace and name like etcd keys.
pub type Bucket = BTreeMap<ObjKey, Arc<Value>>;

pub struct Store {
    rv: u64,
    resources: BTreeMap<Gr, Arc<ResourceDef>>,
    objects: HashMap<Gr, Bucket>,
    /// Resources whose objects are another resource's.
    views: HashMap<Gr, View>,
    history: VecDeque<Arc<StoreEvent>>,
    history_cap: usize,
    /// Events at or below this resourceVersion are no longer in the history.
    compacted: u64,
    tx: broadcast::Sender<Arc<StoreEvent>>,
    /// Channels for watchers that want only part of the changes, as the
    /// apiserver's watch cache indexes them: each event wakes only the
    /// watchers it may concern, not every watch of the cluster.
    routes: HashMap<Route, broadcast::Sender<Arc<StoreEvent>>>,
    /// Objects by the uid of each owner they name, as the garbage
    /// collector's graph keeps them: collecting an owner's dependents
    /// reads its entry, not every object of the cluster.
    dependents: HashMap<String, BTreeSet<(Gr, ObjKey)>>,
    /// Pods by the node they are bound to, as the kubelet's watch sees
    /// them: a node's pods without reading every pod.
    pods_on: HashMap<String, BTreeSet<ObjKey>>,
}

/// A resource served from another resource's objects, as Kubernetes serves
/// events.k8s.io Events from the core Events' storage: one set of objects,
/// one resourceVersion each, converted field by field for each API. Reads
/// and writes of the view's resource go to its home's objects; the changes
/// it makes are the home's changes (a watcher of the view converts them).
#[derive(Debug, Clone)]
pub struct View {
    /// The resource whose objects these are.
    pub home: Gr,
    /// An object of the view as its home keeps it.
    pub to_home: fn(Value) -> Value,
    /// An object of the home as the view serves it.
    pub from_home: fn(&Value) -> Value,
}

impl View {
    fn show(&self, obj: &Value) -> Arc<Value> {
        Arc::new((self.from_home)(obj))
    }

    /// A change of the home's objects as a watcher of the view sees it.
    pub fn event(&self, ev: &StoreEvent) -> Arc<StoreEvent> {
        Arc::new(StoreEvent {
            rv: ev.rv,
            gr: ev.gr.clone(),
            kind: ev.kind,
            object: self.show(&ev.object),
            prev: ev.prev.as_ref().map(|p| self.show(p)),
        })
    }
}

/// Which changes a watcher is woken for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Route {
    /// Every change of one resource.
    Resource(Gr),
    /// Changes of the objects of one resource with this name.
    Name(Gr, String),
    /// Changes of the pods bound to this node, before or after the change.
    PodsOn(String),
}

/// How many events a watcher of a whole resource (or the controllers) may
/// fall behind before it is closed.
const CAPACITY: usize = 16_384;

/// How many events a watcher of one object or one node's pods may fall
/// behind before it is closed.
const ROUTE_CAPACITY: usize = 4096;

impl Store {
    pub fn new(history_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Store {
            rv: 1,
            resources: BTreeMap::new(),
            objects: HashMap::new(),
            views: HashMap::new(),
            history: VecDeque::with_capacity(history_cap.min(65_536)),
            history_cap: history_cap.max(1),
            compacted: 0,
            tx,
            routes: HashMap::new(),
            dependents: HashMap::new(),
            pods_on: HashMap::new(),
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.rv
    }

    pub fn compacted_rv(&self) -> u64 {
        self.compacted
    }

    /// Drops the whole event history, as a restarted API server's new watch
    /// cache has none: only watches from the current resourceVersion resume.
    pub fn forget_history(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    pub fn register(&mut self, def: ResourceDef) {
        let gr = def.gr();
        self.objects.entry(gr.clone()).or_default();
        self.resources.insert(gr, Arc::new(def));
    }

    /// Makes the registered resource `gr` a view of `view.home`'s objects.
    pub fn add_view(&mut self, gr: Gr, view: View) {
        self.objects.remove(&gr);
        self.views.insert(gr, view);
    }

    /// The view `gr` is, if it is one.
    pub fn view(&self, gr: &Gr) -> Option<&View> {
        self.views.get(gr)
    }

    /// The resource whose objects `gr` serves: its own, or a view's home.
    pub fn home<'a>(&'a self, gr: &'a Gr) -> &'a Gr {
        self.views.get(gr).map_or(gr, |v| &v.home)
    }

    pub fn unregister(&mut self, gr: &Gr) {
        self.resources.remove(gr);
        for (key, obj) in self.objects.remove(gr).unwrap_or_default() {
            self.index(gr, &key, Some(&obj), None);
        }
    }

    pub fn resource(&self, gr: &Gr) -> Option<Arc<ResourceDef>> {
        self.resources.get(gr).cloned()
    }

    pub fn resources(&self) -> impl Iterator<Item = &Arc<ResourceDef>> {
        self.resources.values()
    }

    /// Finds a served resource by group, version and plural name.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let def = self.resources.get(&Gr::new(group, plural))?;
        def.versions
            .iter()
            .any(|v| v == version)
            .then(|| def.clone())
    }

    /// Finds a resource by group and kind (for owner references and events).
    pub fn lookup_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        self.resources
            .values()
            .find(|d| d.group == group && d.kind == kind)
            .cloned()
    }

    pub fn get(&self, gr: &Gr, ns: &str, name: &str) -> Option<Arc<Value>> {
        let obj = self
            .objects
            .get(self.home(gr))?
            .get(&(ns.to_string(), name.to_string()))?;
        Some(match self.views.get(gr) {
            Some(view) => view.show(obj),
            None => obj.clone(),
        })
    }

    /// All objects of a resource, in one namespace or (None) all of them.
    pub fn list(&self, gr: &Gr, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(bucket) = self.objects.get(self.home(gr)) else {
            return Vec::new();
        };
        let objs: Vec<Arc<Value>> = match ns {
            None => bucket.values().cloned().collect(),
            Some(ns) => bucket
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
        };
        match self.views.get(gr) {
            Some(view) => objs.iter().map(|o| view.show(o)).collect(),
            None => objs,
        }
    }

    /// The objects that name `owner_uid` among their owners, ordered by
    /// resource (group, then plural) and key.
    pub fn dependents(&self, owner_uid: &str) -> Vec<(Gr, Arc<Value>)> {
        let Some(keys) = self.dependents.get(owner_uid) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|(gr, key)| Some((gr.clone(), self.objects.get(gr)?.get(key)?.clone())))
            .collect()
    }

    /// The pods bound to `node`, by namespace and name.
    pub fn pods_on(&self, node: &str) -> Vec<Arc<Value>> {
        let (Some(keys), Some(pods)) = (self.pods_on.get(node), self.objects.get(&Gr::pods()))
        else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|key| pods.get(key).cloned())
            .collect()
    }

    /// The objects whose changes `route` carries, in namespace `ns` (None:
    /// every namespace), by namespace and name.
    pub fn on_route(&self, route: &Route, ns: Option<&str>) -> Vec<Arc<Value>> {
        let in_ns = |o: &Arc<Value>| {
            ns.is_none_or(|ns| o["metadata"]["namespace"].as_str().unwrap_or("") == ns)
        };
        match route {
            Route::Resource(gr) => self.list(gr, ns),
            Route::Name(gr, name) => match ns {
                Some(ns) => self.get(gr, ns, name).into_iter().collect(),
                None => self
                    .list(gr, None)
                    .into_iter()
                    .filter(|o| o["metadata"]["name"] == name.as_str())
                    .collect(),
            },
            Route::PodsOn(node) => self.pods_on(node).into_iter().filter(in_ns).collect(),
        }
    }

    /// Keeps the indexes in step with one object's change from `old` to
    /// `new` (None: absent).
    fn index(&mut self, gr: &Gr, key: &ObjKey, old: Option<&Value>, new: Option<&Value>) {
        let owners = |o: Option<&Value>| -> BTreeSet<String> {
            o.and_then(|o| o["metadata"]["ownerReferences"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|r| r["uid"].as_str().filter(|u| !u.is_empty()))
                .map(str::to_string)
                .collect()
        };
        let (was, is) = (owners(old), owners(new));
        for uid in was.difference(&is) {
            if let Some(set) = self.dependents.get_mut(uid) {
                set.remove(&(gr.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(uid);
                }
            }
        }
        for uid in is.difference(&was) {
            self.dependents
                .entry(uid.clone())
                .or_default()
                .insert((gr.clone(), key.clone()));
        }
        if !gr.is_pods() {
            return;
        }
        let node = |o: Option<&Value>| o.and_then(bound_node).map(str::to_string);
        let (was, is) = (node(old), node(new));
        if was == is {
            return;
        }
        if let Some(was) = was
            && let Some(set) = self.pods_on.get_mut(&was)
        {
            set.remove(key);
            if set.is_empty() {
                self.pods_on.remove(&was);
            }
        }
        if let Some(is) = is {
            self.pods_on.entry(is).or_default().insert(key.clone());
        }
    }

    pub fn count(&self, gr: &Gr) -> usize {
        self.objects.get(self.home(gr)).map_or(0, |b| b.len())
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoreEvent>> {
        self.tx.subscribe()
    }

    /// Changes on one route only; a superset of what the watcher wants, so
    /// it still filters.
    pub fn subscribe_route(&mut self, route: Route) -> broadcast::Receiver<Arc<StoreEvent>> {
        // A view's changes are its home's.
        let route = match route {
            Route::Resource(gr) => Route::Resource(self.home(&gr).clone()),
            Route::Name(gr, name) => Route::Name(self.home(&gr).clone(), name),
            pods => pods,
        };
        let capacity = match route {
            Route::Resource(_) => CAPACITY,
            Route::Name(..) | Route::PodsOn(_) => ROUTE_CAPACITY,
        };
        self.routes
            .entry(route)
            .or_insert_with(|| broadcast::channel(capacity).0)
            .subscribe()
    }

    /// Sends an event on its routes; a route nobody listens to any more
    /// is dropped.
    fn route(&mut self, ev: &Arc<StoreEvent>) {
        if self.routes.is_empty() {
            return;
        }
        let name = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut routes = vec![
            Route::Resource(ev.gr.clone()),
            Route::Name(ev.gr.clone(), name(&ev.object)),
        ];
        if ev.gr.is_pods() {
            for obj in std::iter::once(&ev.object).chain(ev.prev.as_ref()) {
                if let Some(node) = bound_node(obj) {
                    let route = Route::PodsOn(node.to_string());
                    if !routes.contains(&route) {
                        routes.push(route);
                    }
                }
            }
        }
        for route in routes {
            if let Some(tx) = self.routes.get(&route)
                && tx.send(ev.clone()).is_err()
            {
                self.routes.remove(&route);
            }
        }
    }

    /// Events after `rv` that are still in the history, oldest first, or
    /// `None` if `rv` is older than the history holds (410 Gone).
    pub fn events_since(&self, rv: u64) -> Option<Vec<Arc<StoreEvent>>> {
        if rv < self.compacted {
            return None;
        }
        let start = self.history.partition_point(|e| e.rv <= rv);
        Some(self.history.iter().skip(start).cloned().collect())
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, gr: &Gr, kind: EventType, object: Arc<Value>, prev: Option<Arc<Value>>) {
        let ev = Arc::new(StoreEvent {
            rv: self.rv,
            gr: gr.clone(),
            kind,
            object,
            prev,
        });
        if self.history.len() >= self.history_cap
            && let Some(old) = self.history.pop_front()
        {
            self.compacted = old.rv;
        }
        self.history.push_back(ev.clone());
        self.route(&ev);
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(ev);
    }

    /// Stores a new object. The caller has validated and defaulted it; the
    /// store stamps the resourceVersion.
    pub fn insert(&mut self, gr: &Gr, obj: Value) -> Result<Arc<Value>, ApiError> {
        match self.views.get(gr).cloned() {
            Some(view) => Ok(view.show(&*self.insert_at(&view.home, (view.to_home)(obj), gr)?)),
            None => self.insert_at(gr, obj, gr),
        }
    }

    /// Stores a new object of `home`; an error names `asked`, the resource
    /// the client wrote to.
    fn insert_at(&mut self, home: &Gr, mut obj: Value, asked: &Gr) -> Result<Arc<Value>, ApiError> {
        let key = key_of(&obj);
        let bucket = self.objects.entry(home.clone()).or_default();
        if bucket.contains_key(&key) {
            return Err(ApiError::already_exists(asked, &key.1));
        }
        let rv = self.next_rv();
        set_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        self.index(home, &key, None, Some(&obj));
        self.objects
            .entry(home.clone())
            .or_default()
            .insert(key, obj.clone());
        self.record(home, EventType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces an existing object. An unchanged object is not written again
    /// (no new resourceVersion, no event), as the apiserver skips no-op writes.
    pub fn replace(&mut self, gr: &Gr, obj: Value) -> Result<Arc<Value>, ApiError> {
        match self.views.get(gr).cloned() {
            Some(view) => Ok(view.show(&*self.replace_at(&view.home, (view.to_home)(obj), gr)?)),
            None => self.replace_at(gr, obj, gr),
        }
    }

    fn replace_at(
        &mut self,
        home: &Gr,
        mut obj: Value,
        asked: &Gr,
    ) -> Result<Arc<Value>, ApiError> {
        let key = key_of(&obj);
        let Some(old) = self.objects.get(home).and_then(|b| b.get(&key)).cloned() else {
            return Err(ApiError::not_found(asked, &key.1));
        };
        set_rv(&mut obj, rv_of(&old));
        if *old == obj {
            return Ok(old);
        }
        let rv = self.next_rv();
        set_rv(&mut obj, rv);
        let obj = Arc::new(obj);
        self.index(home, &key, Some(&old), Some(&obj));
        self.objects
            .entry(home.clone())
            .or_default()
            .insert(key, obj.clone());
        self.record(home, EventType::Modified, obj.clone(), Some(old));
        Ok(obj)
    }

    /// Removes an object for good; the DELETED event carries a new
    /// resourceVersion, as in Kubernetes.
    pub fn remove(&mut self, gr: &Gr, ns: &str, name: &str) -> Option<Arc<Value>> {
        let view = self.views.get(gr).cloned();
        let home = view.as_ref().map_or(gr, |v| &v.home).clone();
        let key = (ns.to_string(), name.to_string());
        let old = self.objects.get_mut(&home)?.remove(&key)?;
        self.index(&home, &key, Some(&old), None);
        let rv = self.next_rv();
        let mut gone = (*old).clone();
        set_rv(&mut gone, rv);
        let gone = Arc::new(gone);
        self.record(&home, EventType::Deleted, gone.clone(), Some(old));
        Some(match view {
            Some(view) => view.show(&gone),
            None => gone,
        })
    }
}

/// The node a pod is bound to, if any.
fn bound_node(pod: &Value) -> Option<&str> {
    pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty())
}

pub fn key_of(obj: &Value) -> ObjKey {
    let meta = &obj["metadata"];
    (
        meta["namespace"].as_str().unwrap_or_default().to_string(),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

pub fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn set_rv(obj: &mut Value, rv: u64) {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name}})
    }

    #[test]
    fn history_compacts_and_reports_gone() {
        let mut s = Store::new(3);
        let gr = Gr::new("", "pods");
        for i in 0..5 {
            s.insert(&gr, pod("a", &format!("p{i}"))).unwrap();
        }
        assert!(s.events_since(1).is_none(), "rv 1 was compacted");
        let evs = s.events_since(s.compacted_rv()).unwrap();
        assert_eq!(evs.len(), 3);
        assert!(s.events_since(s.current_rv()).unwrap().is_empty());
    }

    #[test]
    fn unchanged_replace_is_not_a_write() {
        let mut s = Store::new(10);
        let gr = Gr::new("", "pods");
        let a = s.insert(&gr, pod("a", "p")).unwrap();
        let b = s.replace(&gr, (*a).clone()).unwrap();
        assert_eq!(rv_of(&a), rv_of(&b));
        let mut changed = (*a).clone();
        changed["spec"] = json!({"x": 1});
        let c = s.replace(&gr, changed).unwrap();
        assert!(rv_of(&c) > rv_of(&a));
    }

    #[test]
    fn list_by_namespace_stays_in_namespace() {
        let mut s = Store::new(10);
        let gr = Gr::new("", "pods");
        for (ns, n) in [("a", "1"), ("ab", "2"), ("b", "3"), ("a", "4")] {
            s.insert(&gr, pod(ns, n)).unwrap();
        }
        let names: Vec<_> = s.list(&gr, Some("a")).iter().map(|o| key_of(o).1).collect();
        assert_eq!(names, ["1", "4"]);
        assert_eq!(s.list(&gr, None).len(), 4);
    }

    /// A watcher on a route hears every change it may care about and none
    /// of the rest: a pod bound to its node (the change that moves the pod
    /// onto the node included), its pods' deletion; not other nodes' pods.
    #[test]
    fn routes_carry_the_changes_their_watchers_want_and_no_others() {
        let mut s = Store::new(100);
        let pods = Gr::new("", "pods");
        let nodes = Gr::new("", "nodes");
        let mut on_n1 = s.subscribe_route(Route::PodsOn("n1".into()));
        let mut node_n1 = s.subscribe_route(Route::Name(nodes.clone(), "n1".into()));
        let mut all_pods = s.subscribe_route(Route::Resource(pods.clone()));
        let unbound = s.insert(&pods, pod("a", "web")).unwrap();
        s.insert(
            &pods,
            json!({"metadata": {"namespace": "a", "name": "other"}, "spec": {"nodeName": "n2"}}),
        )
        .unwrap();
        let mut bound = (*unbound).clone();
        bound["spec"] = json!({"nodeName": "n1"});
        s.replace(&pods, bound).unwrap();
        s.remove(&pods, "a", "web");
        s.insert(&nodes, json!({"metadata": {"name": "n2"}}))
            .unwrap();
        s.insert(&nodes, json!({"metadata": {"name": "n1"}}))
            .unwrap();
        let drain = |rx: &mut broadcast::Receiver<Arc<StoreEvent>>| {
            std::iter::from_fn(|| rx.try_recv().ok())
                .map(|e| (e.kind, key_of(&e.object).1))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            drain(&mut on_n1),
            [
                (EventType::Modified, "web".to_string()),
                (EventType::Deleted, "web".to_string())
            ]
        );
        assert_eq!(drain(&mut node_n1), [(EventType::Added, "n1".to_string())]);
        assert_eq!(drain(&mut all_pods).len(), 4, "every pod change");
        // Nobody listens to n1's node any more: its route goes.
        drop(node_n1);
        s.insert(&nodes, json!({"metadata": {"name": "n3"}}))
            .unwrap();
        s.replace(
            &nodes,
            json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}}),
        )
        .unwrap();
        assert!(!s.routes.contains_key(&Route::Name(nodes, "n1".into())));
    }

    /// The owner and node indexes follow every kind of change: a new
    /// object, an owner or node that changes, a removal, and a resource
    /// that stops being served.
    #[test]
    fn owner_and_node_indexes_follow_every_change() {
        let mut s = Store::new(100);
        let pods = Gr::pods();
        let leases = Gr::new("coordination.k8s.io", "leases");
        let owned = |ns: &str, name: &str, owners: &[&str], node: &str| {
            let refs: Vec<Value> = owners.iter().map(|u| json!({"uid": u})).collect();
            json!({"metadata": {"namespace": ns, "name": name, "ownerReferences": refs},
                   "spec": {"nodeName": node}})
        };
        let names =
            |objs: Vec<Arc<Value>>| -> Vec<String> { objs.iter().map(|o| key_of(o).1).collect() };
        let dependents = |s: &Store, uid: &str| -> Vec<(String, String)> {
            s.dependents(uid)
                .into_iter()
                .map(|(gr, o)| (gr.plural.clone(), key_of(&o).1))
                .collect()
        };
        s.insert(&pods, owned("a", "p1", &["rs-1"], "n1")).unwrap();
        s.insert(&pods, owned("a", "p2", &["rs-1", "other"], "n2"))
            .unwrap();
        s.insert(&pods, owned("b", "p3", &[], "")).unwrap();
        s.insert(&leases, owned("a", "l1", &["rs-1"], "n1"))
            .unwrap();
        assert_eq!(
            dependents(&s, "rs-1"),
            [
                ("pods".into(), "p1".into()),
                ("pods".into(), "p2".into()),
                ("leases".into(), "l1".into())
            ]
        );
        assert_eq!(names(s.pods_on("n1")), ["p1"], "a lease is not a pod");
        assert_eq!(names(s.pods_on("n2")), ["p2"]);
        assert!(s.pods_on("").is_empty(), "an unbound pod is on no node");

        // p1 changes owner and node; p3 is bound.
        s.replace(&pods, owned("a", "p1", &["other"], "n2"))
            .unwrap();
        s.replace(&pods, owned("b", "p3", &[], "n1")).unwrap();
        assert_eq!(
            dependents(&s, "rs-1"),
            [("pods".into(), "p2".into()), ("leases".into(), "l1".into())]
        );
        assert_eq!(
            dependents(&s, "other"),
            [("pods".into(), "p1".into()), ("pods".into(), "p2".into())]
        );
        assert_eq!(names(s.pods_on("n1")), ["p3"]);
        assert_eq!(names(s.pods_on("n2")), ["p1", "p2"]);

        s.remove(&pods, "a", "p2").unwrap();
        assert_eq!(dependents(&s, "other"), [("pods".into(), "p1".into())]);
        assert_eq!(names(s.pods_on("n2")), ["p1"]);

        s.unregister(&leases);
        assert!(
            dependents(&s, "rs-1").is_empty(),
            "a resource no longer served owns nothing"
        );
        s.remove(&pods, "a", "p1").unwrap();
        s.remove(&pods, "b", "p3").unwrap();
        assert!(
            s.dependents.is_empty() && s.pods_on.is_empty(),
            "nothing is left behind"
        );
    }

    /// A list reads only what its route carries: one object by name (in a
    /// namespace, or in every one), one node's pods (in a namespace, or in
    /// every one), or the whole resource.
    #[test]
    fn a_route_holds_the_objects_it_carries_changes_of() {
        let mut s = Store::new(100);
        let pods = Gr::pods();
        let on = |ns: &str, name: &str, node: &str| json!({"metadata": {"namespace": ns, "name": name}, "spec": {"nodeName": node}});
        for (ns, name, node) in [
            ("a", "p", "n1"),
            ("b", "p", "n2"),
            ("b", "q", "n1"),
            ("a", "r", ""),
        ] {
            s.insert(&pods, on(ns, name, node)).unwrap();
        }
        let keys =
            |objs: Vec<Arc<Value>>| -> Vec<ObjKey> { objs.iter().map(|o| key_of(o)).collect() };
        let key = |ns: &str, name: &str| (ns.to_string(), name.to_string());
        let by_name = Route::Name(pods.clone(), "p".into());
        assert_eq!(keys(s.on_route(&by_name, Some("b"))), [key("b", "p")]);
        assert_eq!(
            keys(s.on_route(&by_name, None)),
            [key("a", "p"), key("b", "p")]
        );
        assert!(s.on_route(&by_name, Some("c")).is_empty());
        let on_n1 = Route::PodsOn("n1".into());
        assert_eq!(
            keys(s.on_route(&on_n1, None)),
            [key("a", "p"), key("b", "q")]
        );
        assert_eq!(keys(s.on_route(&on_n1, Some("b"))), [key("b", "q")]);
        let all = Route::Resource(pods.clone());
        assert_eq!(
            keys(s.on_route(&all, Some("a"))),
            [key("a", "p"), key("a", "r")]
        );
        assert_eq!(s.on_route(&all, None).len(), 4);
    }
}
