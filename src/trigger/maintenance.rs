//! The NodeMaintenance trigger: a watch on every NodeMaintenance object
//! (raw JSON, so one malformed object cannot hide the others), answering
//! synchronously what they ask of this node.
//!
//! Where the CRD is not installed, the trigger is ready with no objects and
//! checks again with a capped backoff, so the agent neither waits forever
//! nor undoes a drain because a list has not arrived yet.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Desired;
use crate::api::{self, Effective, NODEMAINTENANCES_PATH};
use crate::index::{Backoff, Index, WatchGuard, WatchTarget, sleep_until};

/// An object the agents do not act on, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    pub name: String,
    /// The raw object, for [`api::status::validation_update`].
    pub object: Arc<Value>,
    pub problems: Vec<String>,
}

/// What the NodeMaintenance objects say for this node right now.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// The effective request, if any valid object selecting the node asks
    /// something (stage Idle included: selected, nothing to do).
    pub effective: Option<Effective>,
    /// Objects that do not decode or do not validate (whatever they select).
    pub invalid: Vec<Invalid>,
    /// Every valid object, decoded (for status and the counts).
    pub valid: Vec<api::NodeMaintenance>,
}

impl Evaluation {
    /// The invalid objects that may be asking something of `node`: they
    /// name it, their selector matches it or cannot be read, or they do
    /// not decode at all. What they ask is not known, so a drain they may
    /// hold is not undone on their account.
    pub fn invalid_selecting(&self, node: &Value) -> Vec<&str> {
        self.invalid
            .iter()
            .filter(|i| may_select(&i.object, node))
            .map(|i| i.name.as_str())
            .collect()
    }
}

/// Whether the raw object `obj` may select `node` (see
/// [`Evaluation::invalid_selecting`]).
fn may_select(obj: &Value, node: &Value) -> bool {
    let spec = &obj["spec"];
    if spec["stage"].as_str() == Some("Complete") {
        return false;
    }
    let named = spec["nodeName"].as_str();
    if named.is_some_and(|n| Some(n) == node["metadata"]["name"].as_str()) {
        return true;
    }
    match spec.get("nodeSelector").filter(|s| !s.is_null()) {
        None => named.is_none() && !spec.is_object(),
        Some(raw) => {
            let labels: std::collections::BTreeMap<String, String> = node["metadata"]["labels"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            serde_json::from_value(raw.clone())
                .ok()
                .and_then(|sel| crate::drain::plan::selector_matches(&sel, &labels).ok())
                .unwrap_or(true)
        }
    }
}

/// Pure: evaluates raw objects against the node.
pub fn evaluate(objs: &[Arc<Value>], node: &Value) -> Evaluation {
    let mut out = Evaluation::default();
    for obj in objs {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        match api::parse(obj).and_then(|nm| api::validate(&nm).map(|()| nm)) {
            Ok(nm) => out.valid.push(nm),
            Err(problems) => out.invalid.push(Invalid {
                name,
                object: obj.clone(),
                problems,
            }),
        }
    }
    out.effective = api::effective(&out.valid, node);
    out
}

/// Adds what `effective` asks to `desired`: a source line; Drain evicts with
/// the object's plan (taking precedence over the default plan another
/// trigger would use); Cordon only cordons and taints. Idle adds nothing.
pub fn contribute(effective: Option<&Effective>, desired: &mut Desired) {
    let Some(e) = effective.filter(|e| e.active()) else {
        return;
    };
    desired.sources.push(e.describe());
    // Back from its reboot but not Ready: it stays cordoned and evicts
    // nothing (its pods came back with it) until it is Ready.
    if e.evict() && !e.rebooted_not_ready {
        desired.evict = true;
        if let Some((name, max)) = &e.drain_slots {
            desired.stand_down_while_waiting.push(e.describe());
            let what = if e.turn.is_some() {
                format!(
                    "a drain slot of NodeMaintenance {name} (at most {max} nodes drain and reboot at once)"
                )
            } else {
                format!(
                    "a drain slot of NodeMaintenance {name} (at most {max} nodes drain at once)"
                )
            };
            desired.slot_asks.push(super::SlotAsk {
                group: format!("nm-{name}"),
                max: *max,
                release_when_drained: e.turn.is_none(),
                turn: e.turn.clone(),
                what,
                ahead: e.cordon_ahead,
            });
        }
        desired.policy |= e.planned;
        // Neither planned nor limited: the admin asked for the drain now.
        if e.drain_slots.is_none() && !e.planned {
            desired.urgent = true;
        }
        if e.entries.is_some() {
            desired.entries = e.entries.clone();
        }
        desired.stage_timeout = e
            .stage_timeout_seconds
            .filter(|s| *s > 0)
            .map(crate::bounds::seconds);
    }
}

/// The watch on NodeMaintenance objects (maintd's own, or medik8s' with
/// [`Self::medik8s`]). Cheap to clone.
#[derive(Clone)]
pub struct MaintenanceTrigger {
    /// The objects; its `changes()` is what the agent's loop should wake on.
    pub index: Index,
    /// The API says the resource does not exist (no CRD).
    absent: Arc<watch::Sender<bool>>,
    /// The collection watched.
    path: &'static str,
    /// Which NodeMaintenance, for the log.
    kind: &'static str,
    /// With a metadata view, the objects are watched by metadata only and
    /// each one fetched when it appears or its spec changes (its
    /// generation): a status write by the status writer then costs every
    /// agent a small metadata event, not the whole object.
    meta: Option<Index>,
    /// The names of the objects there were when the objects were first
    /// known (None until then): an object that appeared since cannot have
    /// a slot this node took before the agent started.
    at_start: Arc<std::sync::Mutex<Option<BTreeSet<String>>>>,
}

impl Default for MaintenanceTrigger {
    fn default() -> Self {
        Self::new()
    }
}

impl MaintenanceTrigger {
    /// The watch on maintd's NodeMaintenance (`maintd.io`).
    pub fn new() -> Self {
        MaintenanceTrigger {
            meta: Some(Index::new()),
            ..Self::watching(NODEMAINTENANCES_PATH, "NodeMaintenance")
        }
    }

    /// The watch on medik8s' NodeMaintenance (`nodemaintenance.medik8s.io`),
    /// read with [`crate::trigger::medik8s`].
    pub fn medik8s() -> Self {
        Self::watching(api::medik8s::PATH, "medik8s NodeMaintenance")
    }

    fn watching(path: &'static str, kind: &'static str) -> Self {
        MaintenanceTrigger {
            index: Index::new(),
            absent: Arc::new(watch::channel(false).0),
            path,
            kind,
            meta: None,
            at_start: Arc::default(),
        }
    }

    /// Whether the object `name` appeared after the objects were first
    /// known, so after this agent started: no slot of its can be this
    /// node's from before (false while that is not known).
    pub fn appeared_since_start(&self, name: &str) -> bool {
        let at_start = self.at_start.lock().unwrap_or_else(|e| e.into_inner());
        at_start.as_ref().is_some_and(|names| !names.contains(name))
    }

    /// Notes the objects there are, the first time they are all known.
    fn note_first_known(&self) {
        let mut at_start = self.at_start.lock().unwrap_or_else(|e| e.into_inner());
        if at_start.is_none() {
            let objects = self.index.all();
            let names = objects
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string));
            *at_start = Some(names.collect());
        }
    }

    /// The view whose watch says whether the objects are current (the
    /// metadata view where there is one), for readiness and status.
    pub fn view(&self) -> Index {
        self.meta.clone().unwrap_or_else(|| self.index.clone())
    }

    /// Whether the agent may act on [`Self::evaluate`]: the first list
    /// arrived, or the CRD is not installed (then there is nothing to wait
    /// for). Until then "no object" means "not known yet", not "undo".
    pub fn ready(&self) -> bool {
        self.index.synced() || *self.absent.borrow()
    }

    /// Waits until [`Self::ready`].
    pub async fn wait_ready(&self) {
        let mut absent = self.absent.subscribe();
        let mut changes = self.index.changes();
        while !self.ready() {
            tokio::select! {
                r = absent.changed() => if r.is_err() { return },
                r = changes.changed() => if r.is_err() { return },
            }
        }
    }

    /// What the objects ask of `node` (the Node object as the agent's
    /// node index holds it).
    pub fn evaluate(&self, node: &Value) -> Evaluation {
        evaluate(&self.index.all(), node)
    }

    /// Keeps the index current until `stop`. While the CRD is missing (or
    /// may not be read) it checks again with a backoff capped at five
    /// minutes. A check that fails otherwise (a 500, a 429, no answer) is
    /// retried as a failed watch is, from half a second up to 30 s, and
    /// reported as the view's error: until the objects are known nothing
    /// is undone, so a few transient errors at start must not hold a node
    /// drained for minutes.
    pub async fn run(self, client: kube::Client, guard: WatchGuard, stop: CancellationToken) {
        let mut absent_backoff = Backoff::with(5_000, 300_000);
        let mut error_backoff = Backoff::with(500, 30_000);
        loop {
            let backoff = match resource_exists(&client, self.path).await {
                Ok(Presence::Present) => break,
                Ok(Presence::Absent) => {
                    // Readiness changes with it: wake whoever judges it.
                    let was = self.absent.send_replace(true);
                    self.index.touch();
                    if !was {
                        tracing::info!(
                            path = self.path,
                            "the {} CRD is not installed; that trigger is off until it is",
                            self.kind
                        );
                    }
                    &mut absent_backoff
                }
                // Refused is not absent: objects may exist that this agent
                // cannot see, and "none asks" would undo a drain they hold.
                // The trigger stays unknown (nothing is undone, /readyz
                // says why) until the agent may list them.
                Ok(Presence::Forbidden(why)) => {
                    let why = format!(
                        "the {} trigger is not known: this agent may not list {} ({why}); grant it in the agent's ClusterRole (see deploy/); until then nothing it might hold is undone",
                        self.kind, self.path
                    );
                    tracing::warn!("{why}");
                    self.view().note_error(why);
                    &mut absent_backoff
                }
                Err(e) => {
                    tracing::warn!(error = %e, "checking for the {} CRD", self.kind);
                    self.view().note_error(e);
                    &mut error_backoff
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = stop.cancelled() => return,
            }
        }
        // Present now: wait for the objects, not an earlier absence.
        self.absent.send_replace(false);
        let target = WatchTarget::new(self.path, None, guard);
        match self.meta.clone() {
            None => self.index.clone().run(client, target, stop).await,
            Some(meta) => {
                tokio::spawn(meta.clone().run(
                    client.clone(),
                    target.metadata_only(),
                    stop.clone(),
                ));
                self.follow_specs(&client, &meta, &stop).await;
            }
        }
    }

    /// Keeps the full objects in `index` in step with the metadata view:
    /// an object is fetched when it appears and when its generation
    /// changes; one that is gone from the view is dropped. The index counts
    /// as listed once every object of the view has been fetched.
    ///
    /// An object that cannot be read is read again on its own backoff (1 s
    /// doubling to a minute), however often the view changes meanwhile:
    /// every agent reads every object, so a read retried on each status
    /// write of the others would multiply with the node count.
    async fn follow_specs(&self, client: &kube::Client, meta: &Index, stop: &CancellationToken) {
        let mut changes = meta.changes();
        let mut failing = HashMap::new();
        loop {
            if meta.synced() {
                match self.fetch_changed(client, meta, &mut failing).await {
                    Ok(true) => {
                        self.note_first_known();
                        self.index.mark_synced();
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "fetching {}; will retry", self.kind);
                        meta.note_error(e);
                        // That note is not a change to the objects.
                        changes.borrow_and_update();
                    }
                }
            }
            let retry_at = failing.values().map(|r: &Retry| r.at).min();
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                _ = sleep_until(retry_at) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Fetches the objects of the view that are new or changed, except
    /// those in `failing` whose retry is not due. Ok(true): the index holds
    /// every object of the view; Ok(false): some wait for their retry; Err:
    /// a read failed now.
    async fn fetch_changed(
        &self,
        client: &kube::Client,
        meta: &Index,
        failing: &mut HashMap<String, Retry>,
    ) -> Result<bool, String> {
        let now = tokio::time::Instant::now();
        let mut failed = None;
        let mut waiting = false;
        failing.retain(|uid, _| meta.contains(uid));
        for m in meta.all() {
            let (Some(uid), Some(name)) = (
                m["metadata"]["uid"].as_str(),
                m["metadata"]["name"].as_str(),
            ) else {
                continue;
            };
            let generation = m["metadata"]["generation"].as_i64();
            let current = self
                .index
                .get(uid)
                .is_some_and(|o| o["metadata"]["generation"].as_i64() == generation);
            if current {
                continue;
            }
            if failing.get(uid).is_some_and(|r| r.at > now) {
                waiting = true;
                continue;
            }
            match fetch(client, self.path, name).await {
                Ok(found) => {
                    failing.remove(uid);
                    match found {
                        Some(obj) if obj["metadata"]["uid"] == uid => self.index.upsert(obj),
                        // Gone or replaced meanwhile: the view will say so.
                        _ => {}
                    }
                }
                Err(e) => {
                    let retry = failing.entry(uid.to_string()).or_insert_with(|| Retry {
                        at: now,
                        backoff: Backoff::with(1_000, 60_000),
                    });
                    retry.at = tokio::time::Instant::now() + retry.backoff.next_delay();
                    failed = Some(e);
                }
            }
        }
        for obj in self.index.all() {
            if let Some(uid) = obj["metadata"]["uid"].as_str()
                && !meta.contains(uid)
            {
                self.index.remove(uid);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(!waiting),
        }
    }
}

/// When an object whose read failed is read again.
struct Retry {
    at: tokio::time::Instant,
    backoff: Backoff,
}

/// One object by name (None: not found).
async fn fetch(client: &kube::Client, path: &str, name: &str) -> Result<Option<Value>, String> {
    let req = http::Request::get(format!("{path}/{name}"))
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(10), client.request::<Value>(req)).await {
        Ok(Ok(obj)) => Ok(Some(obj)),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(None),
        Ok(Err(e)) => Err(format!(
            "reading {path}/{name}: {}",
            crate::client::explain(&e)
        )),
        Err(_) => Err(format!("reading {path}/{name} timed out after 10s")),
    }
}

/// What the API says of a resource.
enum Presence {
    Present,
    /// 404: the CRD is not installed.
    Absent,
    /// 403: this agent may not read it.
    Forbidden(String),
}

/// Whether the API serves `path` (a one-item list; 404: no CRD).
async fn resource_exists(client: &kube::Client, path: &str) -> Result<Presence, String> {
    let req = http::Request::get(format!("{path}?limit=1"))
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let call = client.request::<Value>(req);
    match tokio::time::timeout(Duration::from_secs(30), call).await {
        Ok(Ok(_)) => Ok(Presence::Present),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(Presence::Absent),
        Ok(Err(kube::Error::Api(s))) if s.code == 403 => Ok(Presence::Forbidden(s.message)),
        Ok(Err(e)) => Err(format!("listing {path}: {}", crate::client::explain(&e))),
        Err(_) => Err(format!("listing {path} timed out after 30s")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_objects_that_may_select_the_node_are_named() {
        let node = json!({"metadata": {"name": "n1", "labels": {"pool": "blue"}}});
        let objs: Vec<Arc<Value>> = [
            // Names it, but asks for a stage this agent does not know.
            json!({"metadata": {"name": "named"}, "spec": {"nodeName": "n1", "stage": "Reboot"}}),
            // Its selector matches, another field is bad.
            json!({"metadata": {"name": "matching"}, "spec": {"nodeSelector": {"matchLabels": {"pool": "blue"}}, "stage": "Drain", "maxConcurrentDrains": -1}}),
            // A selector that cannot be read: it may match.
            json!({"metadata": {"name": "unreadable"}, "spec": {"nodeSelector": {"matchLabels": 7}, "stage": "Drain"}}),
            // No spec at all.
            json!({"metadata": {"name": "no-spec"}, "spec": "garbage"}),
            // Not this node's.
            json!({"metadata": {"name": "other-node"}, "spec": {"nodeName": "n2", "stage": "Reboot"}}),
            json!({"metadata": {"name": "other-pool"}, "spec": {"nodeSelector": {"matchLabels": {"pool": "red"}}, "stage": "Drain", "maxConcurrentDrains": -1}}),
            json!({"metadata": {"name": "done"}, "spec": {"nodeName": "n1", "stage": "Complete", "maxConcurrentDrains": -1}}),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let eval = evaluate(&objs, &node);
        assert_eq!(eval.invalid.len(), 7, "{:?}", eval.invalid);
        assert_eq!(
            eval.invalid_selecting(&node),
            ["named", "matching", "unreadable", "no-spec"]
        );
    }
    use serde_json::json;

    fn obj(name: &str, created: &str, spec: Value) -> Arc<Value> {
        Arc::new(json!({
            "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
            "metadata": {"name": name, "uid": name, "creationTimestamp": created},
            "spec": spec,
        }))
    }

    fn node() -> Value {
        json!({"metadata": {"name": "node-a", "labels": {"pool": "gpu"}}})
    }

    /// A rolling object whose turns end with a reboot: its slot is held
    /// past Drained; once the node booted again it asks for nothing (Ready)
    /// or for the cordon alone (not Ready yet), and a finished turn leaves
    /// the object out for good.
    #[test]
    fn a_turn_that_ends_with_a_reboot_holds_its_slot_until_the_node_is_back() {
        let spec = json!({"nodeName": "node-a", "stage": "Drain", "maxConcurrentDrains": 2,
            "waitForReboot": {"timeoutSeconds": 60}});
        let objs = [obj("roll", "2026-01-01T00:00:00Z", spec)];
        let at = |annotations: Value, boot: &str, ready: bool| {
            let mut n = node();
            n["metadata"]["annotations"] = annotations;
            n["status"] = json!({"nodeInfo": {"bootID": boot}, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]});
            let mut d = Desired::default();
            contribute(evaluate(&objs, &n).effective.as_ref(), &mut d);
            d
        };
        let fresh = at(json!({}), "boot-1", true);
        assert!(fresh.evict);
        let ask = &fresh.slot_asks[0];
        assert!(!ask.release_when_drained, "the slot is held past Drained");
        let turn = ask.turn.clone().expect("a turn");
        assert_eq!((turn.uid.as_str(), turn.slots), ("roll", 2));
        assert_eq!(turn.timeout, std::time::Duration::from_secs(60));
        assert!(ask.what.contains("drain and reboot"), "{}", ask.what);

        let started = crate::api::turns::start_patch(
            &turn.record(&at_boot("boot-1"), "2026-11-26T04:00:00Z".parse().unwrap()),
        );
        assert_eq!(
            at(started.clone(), "boot-1", true),
            fresh,
            "not rebooted yet"
        );
        let back = at(started.clone(), "boot-2", false);
        assert!(
            back.active() && !back.evict && back.slot_asks.is_empty(),
            "{back:?}"
        );
        assert!(
            !at(started, "boot-2", true).active(),
            "rebooted and Ready: over"
        );
        let done = json!({crate::api::turns::DONE_ANNOTATION: "older roll"});
        assert!(!at(done, "boot-1", true).active(), "recorded done: over");
    }

    fn at_boot(boot: &str) -> Value {
        let mut n = node();
        n["status"]["nodeInfo"]["bootID"] = json!(boot);
        n
    }

    #[test]
    fn bad_objects_are_reported_and_do_not_hide_good_ones() {
        let objs = [
            obj(
                "typo",
                "2026-01-01T00:00:00Z",
                json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": [{"podType": "Pods", "podPriority": 0}]}),
            ),
            obj(
                "both",
                "2026-01-01T00:00:00Z",
                json!({"nodeName": "node-a", "nodeSelector": {}, "stage": "Drain"}),
            ),
            obj(
                "gpu",
                "2026-01-02T00:00:00Z",
                json!({"nodeSelector": {"matchLabels": {"pool": "gpu"}}, "stage": "Cordon"}),
            ),
        ];
        let ev = evaluate(&objs, &node());
        let invalid: Vec<_> = ev.invalid.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(invalid, ["typo", "both"]);
        assert!(
            ev.invalid[0].problems[0].contains("Pods"),
            "{:?}",
            ev.invalid[0].problems
        );
        assert_eq!(
            ev.invalid[1].problems,
            ["spec sets both nodeName and nodeSelector; set exactly one"]
        );
        let e = ev.effective.expect("the valid object still applies");
        assert_eq!(
            (e.stage.as_str(), e.from.as_slice()),
            ("Cordon", &["gpu".to_string()][..])
        );
    }

    #[test]
    fn contribute_turns_the_stage_into_the_agents_request() {
        let plan = json!([{"podType": "Default", "podPriority": 100}]);
        let cases = [
            // (stage, drainPlan, want sources, evict, custom plan)
            ("Idle", json!([]), 0, false, false),
            ("Cordon", plan.clone(), 1, false, false),
            ("Drain", json!([]), 1, true, false),
            ("Drain", plan, 1, true, true),
        ];
        for (stage, drain_plan, sources, evict, custom) in cases {
            let objs = [obj(
                "m",
                "2026-01-01T00:00:00Z",
                json!({"nodeName": "node-a", "stage": stage, "drainPlan": drain_plan}),
            )];
            let ev = evaluate(&objs, &node());
            let mut d = Desired::default();
            contribute(ev.effective.as_ref(), &mut d);
            assert_eq!(d.sources.len(), sources, "{stage}");
            assert_eq!(d.evict, evict, "{stage}");
            assert_eq!(d.entries.is_some(), custom, "{stage}");
            if sources == 1 {
                assert_eq!(d.sources[0], format!("NodeMaintenance m (stage {stage})"));
            }
        }
        // Added to another trigger's request: the object's plan is used.
        let objs = [obj(
            "m",
            "2026-01-01T00:00:00Z",
            json!({"nodeName": "node-a", "stage": "Drain", "drainPlan": [{"podType": "Static", "podPriority": 5}]}),
        )];
        let mut d = Desired {
            sources: vec!["taint maintd.io/drain:NoSchedule".into()],
            evict: true,
            ..Desired::default()
        };
        contribute(evaluate(&objs, &node()).effective.as_ref(), &mut d);
        assert_eq!(d.sources.len(), 2);
        assert_eq!(d.entries.unwrap()[0].pod_priority, 5);
    }

    /// A Drain stage asked now is urgent; one limited to a few drains at
    /// once asks for the object's drain slot, one marked planned waits for
    /// the agent's policy; either way its stage timeout is passed on.
    #[test]
    fn how_a_drain_stage_waits_follows_the_objects_limits() {
        // Object m at stage Drain with a 90 s stage timeout, `extra` merged in.
        let effective = |extra: Value| {
            let mut spec =
                json!({"nodeName": "node-a", "stage": "Drain", "stageTimeoutSeconds": 90});
            json_patch::merge(&mut spec, &extra);
            evaluate(&[obj("m", "2026-01-01T00:00:00Z", spec)], &node())
                .effective
                .unwrap()
        };
        let request = |extra: Value| {
            let mut d = Desired::default();
            contribute(Some(&effective(extra)), &mut d);
            d
        };
        let now = request(json!({}));
        assert!(now.urgent && !now.policy && now.slot_asks.is_empty());
        assert_eq!(now.stage_timeout, Some(std::time::Duration::from_secs(90)));

        let limited = request(json!({"maxConcurrentDrains": 2}));
        assert!(!limited.urgent && !limited.policy);
        assert_eq!(
            limited.slot_asks,
            [crate::trigger::SlotAsk {
                group: "nm-m".into(),
                max: 2,
                release_when_drained: true,
                turn: None,
                what: "a drain slot of NodeMaintenance m (at most 2 nodes drain at once)".into(),
                ahead: 0,
            }]
        );
        assert_eq!(
            limited.slot_asks[0].line(),
            None,
            "no line with two slots and no cordonAhead: each node watches both"
        );
        // More slots: a line, a place a slot up to 100, whose nodes are
        // not cordoned.
        for (slots, places) in [(3, 3), (40, 40), (500, 100)] {
            let ask = request(json!({"maxConcurrentDrains": slots})).slot_asks[0].clone();
            let line = ask.line().expect("a line");
            assert_eq!((line.group.as_str(), line.max), ("nm.ahead.m", places));
            assert!(!ask.cordons_ahead());
            assert!(
                line.what.contains(&format!(
                    "the next {places} nodes take whichever slot frees first"
                )),
                "{}",
                line.what
            );
        }
        // With cordonAhead, a line of its own beside the drain slots.
        let ahead = request(json!({"maxConcurrentDrains": 2, "cordonAhead": 3}));
        let line = ahead.slot_asks[0].line().expect("a line");
        assert_eq!((line.group.as_str(), line.max), ("nm.ahead.m", 3));
        assert!(ahead.slot_asks[0].cordons_ahead());
        assert!(line.release_when_drained && line.line().is_none());
        assert!(
            line.what
                .starts_with("a place in line for a drain slot of NodeMaintenance m"),
            "{}",
            line.what
        );

        let planned = request(json!({"planned": true}));
        assert!(!planned.urgent && planned.policy && planned.slot_asks.is_empty());
        // A planned request stays planned when another asks too.
        let mut d = Desired {
            policy: true,
            ..Desired::default()
        };
        contribute(Some(&effective(json!({"maxConcurrentDrains": 1}))), &mut d);
        assert!(d.policy, "an object that is not planned takes nothing away");

        // A timeout of zero or less is no timeout (validation refuses it;
        // the request does not rely on that).
        let mut e = effective(json!({}));
        for t in [0, -5] {
            e.stage_timeout_seconds = Some(t);
            let mut d = Desired::default();
            contribute(Some(&e), &mut d);
            assert_eq!(d.stage_timeout, None, "{t}");
        }
    }
}
