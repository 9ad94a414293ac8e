//! The drain as a requester of KEP-4563's EvictionRequest API
//! (`lifecycle.k8s.io/v1alpha1`, alpha in Kubernetes 1.37 behind the
//! `EvictionRequestAPI` gate). A pod that declares responders of its own
//! (`spec.evictionResponders`, such as KubeVirt's live migration) is asked
//! to leave with an EvictionRequest instead of a `policy/v1` Eviction, so
//! its responders act first and say how far they are; every other pod, and
//! every pod where the API server does not serve the API or the operator
//! turned it off, goes through the Eviction API as before.
//!
//! Each request is named `maintd-<pod uid>` and labelled with the node, so a
//! restarted agent adopts what it asked for and an undo finds what to
//! withdraw. Requests are given up the way the KEP asks: intent `Withdrawn`
//! first, deleted once the request is final (or after a bound).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use serde_json::{Value, json};

use crate::outbound::shorten;

/// The API group and version the agent speaks.
pub const API: &str = "lifecycle.k8s.io/v1alpha1";
/// maintd's requester name (a domain-prefixed path, as the KEP asks).
pub const REQUESTER: &str = "maintd.io/drain";
/// The label naming the node whose drain made a request.
pub const NODE_LABEL: &str = "maintd.io/node";
/// The responder every Eviction ends with: it calls the Eviction API. A pod
/// with no other responder gains nothing from a request.
pub const DEFAULT_RESPONDER: &str = "imperative-eviction.k8s.io/evictor";
/// How long a request given up is waited on to become final before it is
/// deleted regardless.
const RETIRE_WITHIN: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a responder's message a blocker carries.
const MESSAGE_MAX: usize = 240;

/// Whether the drain may use EvictionRequests.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// When the API server serves them (checked as each drain starts), for
    /// pods that declare responders of their own.
    #[default]
    Auto,
    /// Never: every pod goes through the Eviction API.
    Off,
}

/// Where one request stands, from its conditions and its Eviction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Responders are at work; what the active one reports.
    Pending(String),
    /// `TargetEvicted=True`: the pod has been deleted or reached its end.
    Evicted,
    /// `Failed=True` because every requester withdrew (or the request went).
    Canceled,
    /// `Failed=True` for any other reason: no responder could evict it, or
    /// the request was invalid.
    Failed { reason: String, message: String },
    /// There is no such request (deleted by someone else).
    Missing,
}

/// What creating (or adopting) a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// The request is there, with the Eviction intent.
    Requested,
    /// The API server does not serve the API (any more).
    NotServed,
    /// Refused (RBAC, admission) or failed: the Eviction API is used instead.
    Refused(String),
}

/// The drain's EvictionRequest client: discovery, and one request per pod.
#[derive(Clone)]
pub struct EvictionRequests {
    client: kube::Client,
    node: String,
    mode: Mode,
    /// Whether the API is served, as last discovered (None: not yet asked).
    served: Arc<Mutex<Option<bool>>>,
}

impl EvictionRequests {
    pub fn new(client: kube::Client, node: &str, mode: Mode) -> Self {
        EvictionRequests {
            client,
            node: node.to_string(),
            mode,
            served: Arc::default(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Asks the API server whether it serves EvictionRequests (once per
    /// drain run; a drain that starts after the feature gate was turned on
    /// or off sees the change). An answer other than yes or 404 keeps what
    /// was known, or no.
    pub async fn discover(&self) -> bool {
        if self.mode == Mode::Off {
            return false;
        }
        let path = format!("/apis/{API}");
        let answer = match self.call("GET", &path, None, "").await {
            Ok(list) => Some(serves_requests(&list)),
            Err(kube::Error::Api(s)) if s.code == 404 => Some(false),
            Err(e) => {
                tracing::debug!(error = %crate::client::explain(&e), "could not discover {API}");
                None
            }
        };
        let mut served = self.served.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(now) = answer {
            if *served != Some(now) {
                tracing::info!(
                    "the API server {} EvictionRequests ({API})",
                    if now { "serves" } else { "does not serve" }
                );
            }
            *served = Some(now);
        }
        served.unwrap_or(false)
    }

    fn served(&self) -> bool {
        self.mode == Mode::Auto
            && self
                .served
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or(false)
    }

    /// The responders of its own a pod declares, if a request is to be
    /// used for it: the API is served, not turned off, and the pod names a
    /// responder other than the default evictor.
    pub fn responders_for(&self, pod: &Value) -> Option<Vec<String>> {
        if !self.served() {
            return None;
        }
        let own = own_responders(pod);
        (!own.is_empty()).then_some(own)
    }

    /// Creates the request for a pod, or adopts the one there (an agent
    /// restarted mid-drain, a drain re-planned), putting its intent back to
    /// Eviction if it had been withdrawn.
    pub async fn request(&self, namespace: &str, pod: &str, uid: &str) -> Asked {
        let path = collection(namespace);
        let body = json!({
            "apiVersion": API,
            "kind": "EvictionRequest",
            "metadata": {
                "name": name(uid),
                "namespace": namespace,
                "labels": {NODE_LABEL: self.node},
            },
            "spec": {
                "target": {"pod": {"name": pod, "uid": uid}},
                "requesterName": REQUESTER,
                "intent": "Eviction",
            },
        });
        match self
            .call("POST", &path, Some(&body), "application/json")
            .await
        {
            Ok(_) => Asked::Requested,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                match self.set_intent(namespace, uid, "Eviction").await {
                    Ok(()) => Asked::Requested,
                    Err(why) => Asked::Refused(why),
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                *self.served.lock().unwrap_or_else(|e| e.into_inner()) = Some(false);
                Asked::NotServed
            }
            Err(e) => Asked::Refused(crate::client::explain(&e)),
        }
    }

    /// Where the request for this pod stands, with the active responder's
    /// words from the Eviction the controller made of it.
    pub async fn state(&self, namespace: &str, uid: &str) -> Result<State, String> {
        let path = format!("{}/{}", collection(namespace), name(uid));
        let request = match self.call("GET", &path, None, "").await {
            Ok(r) => r,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(State::Missing),
            Err(e) => return Err(crate::client::explain(&e)),
        };
        if let Some(done) = final_state(&request) {
            return Ok(done);
        }
        let evictions = format!(
            "/apis/{API}/namespaces/{namespace}/evictions?labelSelector={}",
            crate::outbound::url::encode(REQUESTER)
        );
        let eviction = match self.call("GET", &evictions, None, "").await {
            Ok(list) => list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .find(|e| e["spec"]["target"]["pod"]["uid"] == uid && final_state(e).is_none())
                .cloned(),
            Err(e) => return Err(crate::client::explain(&e)),
        };
        Ok(State::Pending(progress(eviction.as_ref())))
    }

    /// Withdraws the request for this pod (intent `Withdrawn`), then
    /// deletes it in the background once it is final (or after a bound),
    /// as the KEP asks of a requester that changed its mind.
    pub async fn give_up(&self, namespace: &str, uid: &str) {
        if let Err(why) = self.set_intent(namespace, uid, "Withdrawn").await {
            tracing::debug!(%namespace, %uid, %why, "could not withdraw an EvictionRequest");
        }
        self.retire(namespace, uid);
    }

    /// Deletes the request once it is final (TargetEvicted or Failed), in
    /// the background: at most [`RETIRE_WITHIN`], then deleted regardless.
    pub fn retire(&self, namespace: &str, uid: &str) {
        let this = self.clone();
        let path = format!("{}/{}", collection(namespace), name(uid));
        let namespace = namespace.to_string();
        tokio::spawn(async move {
            // The request as first seen: a newer one of the same name (the
            // drain asking again) is never deleted by this.
            let mut seen: Option<String> = None;
            let until = tokio::time::Instant::now() + RETIRE_WITHIN;
            let mut backoff = crate::index::Backoff::with(500, 5_000);
            while tokio::time::Instant::now() < until {
                match this.call("GET", &path, None, "").await {
                    Ok(r) => {
                        if seen.is_none() {
                            seen = r["metadata"]["uid"].as_str().map(str::to_string);
                        }
                        if final_state(&r).is_some() {
                            break;
                        }
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => return,
                    Err(_) => {}
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
            let body = seen.map(|u| json!({"preconditions": {"uid": u}}));
            match this
                .call("DELETE", &path, body.as_ref(), "application/json")
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => tracing::warn!(
                    %namespace, %path,
                    error = %crate::client::explain(&e),
                    "could not delete an EvictionRequest; an undo of the next drain tries again"
                ),
            }
        });
    }

    /// Withdraws every request this node's drains made that is still
    /// open (an undo, including one after an agent restart), in the
    /// background; returns how many. Nothing is asked when the API is not
    /// served.
    pub async fn withdraw_all(&self) -> Result<usize, String> {
        // Asked again: an agent restarted since the drain has not asked yet,
        // and its predecessor's requests must not go on evicting.
        if !self.served() && !self.discover().await {
            return Ok(0);
        }
        let path = format!(
            "/apis/{API}/evictionrequests?labelSelector={}",
            crate::outbound::url::encode(&format!("{NODE_LABEL}={}", self.node))
        );
        let list = match self.call("GET", &path, None, "").await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(0),
            Err(e) => {
                return Err(format!(
                    "listing EvictionRequests: {}",
                    crate::client::explain(&e)
                ));
            }
        };
        let mut n = 0;
        for r in list["items"].as_array().into_iter().flatten() {
            let (Some(ns), Some(uid)) = (
                r["metadata"]["namespace"].as_str(),
                r["spec"]["target"]["pod"]["uid"].as_str(),
            ) else {
                continue;
            };
            if r["spec"]["requesterName"] != REQUESTER || r["metadata"]["name"] != name(uid) {
                continue;
            }
            n += 1;
            if r["spec"]["intent"] == "Withdrawn" {
                self.retire(ns, uid);
            } else {
                // In the background: an undo does not wait on a slow API
                // server once per request.
                let (this, ns, uid) = (self.clone(), ns.to_string(), uid.to_string());
                tokio::spawn(async move { this.give_up(&ns, &uid).await });
            }
        }
        Ok(n)
    }

    async fn set_intent(&self, namespace: &str, uid: &str, intent: &str) -> Result<(), String> {
        let path = format!(
            "{}/{}?fieldManager=maintd",
            collection(namespace),
            name(uid)
        );
        let patch = json!({"spec": {"intent": intent}});
        match self
            .call("PATCH", &path, Some(&patch), "application/merge-patch+json")
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 && intent == "Withdrawn" => Ok(()),
            Err(e) => Err(crate::client::explain(&e)),
        }
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> Result<Value, kube::Error> {
        let mut req = Request::builder().method(method).uri(path);
        if body.is_some() {
            req = req.header("content-type", content_type);
        }
        let req = req
            .body(
                body.map(|b| serde_json::to_vec(b).unwrap_or_default())
                    .unwrap_or_default(),
            )
            .map_err(kube::Error::HttpError)?;
        match tokio::time::timeout(CALL_TIMEOUT, self.client.request::<Value>(req)).await {
            Ok(r) => r,
            Err(_) => Err(kube::Error::Service(
                format!(
                    "{method} {path}: no answer within {}s",
                    CALL_TIMEOUT.as_secs()
                )
                .into(),
            )),
        }
    }
}

/// The request's name for a pod: unique per pod incarnation, so a restarted
/// agent finds its own.
pub fn name(uid: &str) -> String {
    format!("maintd-{uid}")
}

fn collection(namespace: &str) -> String {
    format!("/apis/{API}/namespaces/{namespace}/evictionrequests")
}

/// Whether an APIResourceList lists `evictionrequests`.
fn serves_requests(list: &Value) -> bool {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["name"] == "evictionrequests")
}

/// The responders a pod declares other than the default evictor.
pub fn own_responders(pod: &Value) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in pod["spec"]["evictionResponders"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(n) = r["name"].as_str()
            && !n.is_empty()
            && n != DEFAULT_RESPONDER
            && !names.iter().any(|m| m == n)
        {
            names.push(n.to_string());
        }
    }
    names
}

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
}

/// The final state an EvictionRequest (or Eviction) shows, if any.
pub fn final_state(obj: &Value) -> Option<State> {
    if condition(obj, "TargetEvicted").is_some() {
        return Some(State::Evicted);
    }
    let failed = condition(obj, "Failed")?;
    let reason = failed["reason"].as_str().unwrap_or("").to_string();
    if reason == "CanceledDueToNoRequesters" {
        return Some(State::Canceled);
    }
    Some(State::Failed {
        message: failed["message"].as_str().unwrap_or("").to_string(),
        reason,
    })
}

/// What the active responder of an Eviction reports: its name, its
/// message, and when it expects to be done.
pub fn progress(eviction: Option<&Value>) -> String {
    let Some(ev) = eviction else {
        return "EvictionRequest made; waiting for the eviction request controller to pick a responder".into();
    };
    let active = ev["status"]["targetResponders"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["state"] == "Active")
        .and_then(|r| r["name"].as_str());
    let Some(active) = active else {
        return "EvictionRequest made; no responder is active yet".into();
    };
    let entry = ev["status"]["responders"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == active);
    // The responder's words go into the NodeDrain and Events: one line,
    // bounded.
    let mut out = format!("EvictionRequest: responder {}", shorten(active, 120));
    if let Some(m) = entry
        .and_then(|e| e["message"].as_str())
        .filter(|m| !m.trim().is_empty())
    {
        out.push_str(": ");
        out.push_str(shorten(m, MESSAGE_MAX).trim_end_matches('.'));
    } else {
        out.push_str(" is at work");
    }
    if let Some(t) = entry.and_then(|e| e["expectedCompletionTime"].as_str()) {
        out.push_str(&format!(" (expected done by {})", shorten(t, 40)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pod_with_a_responder_of_its_own_asks_through_a_request() {
        let pod = json!({"spec": {"evictionResponders": [
            {"name": DEFAULT_RESPONDER}, {"name": "live-migration.kubevirt.io/migrator"},
            {"name": "live-migration.kubevirt.io/migrator"}, {"name": ""}, {"x": 1}, 7
        ]}});
        assert_eq!(
            own_responders(&pod),
            ["live-migration.kubevirt.io/migrator"]
        );
        let default_only = json!({"spec": {"evictionResponders": [{"name": DEFAULT_RESPONDER}]}});
        assert!(own_responders(&default_only).is_empty());
        assert!(own_responders(&json!({"spec": {"evictionResponders": "x"}})).is_empty());
        assert!(own_responders(&json!({})).is_empty());
    }

    #[test]
    fn final_states_are_read_from_the_conditions() {
        let with = |conds: Value| json!({"status": {"conditions": conds}});
        assert_eq!(final_state(&json!({})), None);
        assert_eq!(
            final_state(&with(json!([
                {"type": "Failed", "status": "False", "reason": "AwaitingEviction"},
                {"type": "TargetEvicted", "status": "False"}
            ]))),
            None
        );
        assert_eq!(
            final_state(&with(
                json!([{"type": "TargetEvicted", "status": "True", "reason": "PodDeleted"}])
            )),
            Some(State::Evicted)
        );
        assert_eq!(
            final_state(&with(
                json!([{"type": "Failed", "status": "True", "reason": "CanceledDueToNoRequesters"}])
            )),
            Some(State::Canceled)
        );
        assert_eq!(
            final_state(&with(
                json!([{"type": "Failed", "status": "True", "reason": "NoFurtherResponder", "message": "none left"}])
            )),
            Some(State::Failed {
                reason: "NoFurtherResponder".into(),
                message: "none left".into()
            })
        );
        assert_eq!(final_state(&with(json!("x"))), None);
    }

    #[test]
    fn the_active_responder_is_named_with_its_words() {
        let ev = json!({"status": {
            "targetResponders": [
                {"name": "live-migration.kubevirt.io/migrator", "state": "Active"},
                {"name": DEFAULT_RESPONDER, "state": "Inactive"}
            ],
            "responders": [
                {"name": "live-migration.kubevirt.io/migrator",
                 "message": "Live migration of pod vm-1 to another node in progress.",
                 "expectedCompletionTime": "2026-11-26T01:00:00Z"},
                {"name": DEFAULT_RESPONDER}
            ]
        }});
        assert_eq!(
            progress(Some(&ev)),
            "EvictionRequest: responder live-migration.kubevirt.io/migrator: Live migration of pod vm-1 to another node in progress (expected done by 2026-11-26T01:00:00Z)"
        );
        let mut long = ev.clone();
        long["status"]["responders"][0]["message"] = json!(format!("line\n{}", "x".repeat(5000)));
        let said = progress(Some(&long));
        assert!(said.chars().count() < 400 && !said.contains('\n'), "{said}");
        let quiet =
            json!({"status": {"targetResponders": [{"name": "a.io/b", "state": "Active"}]}});
        assert_eq!(
            progress(Some(&quiet)),
            "EvictionRequest: responder a.io/b is at work"
        );
        let none =
            json!({"status": {"targetResponders": [{"name": "a.io/b", "state": "Inactive"}]}});
        assert!(progress(Some(&none)).contains("no responder is active"));
        assert!(progress(None).contains("eviction request controller"));
        assert!(progress(Some(&json!({"status": 3}))).contains("no responder"));
    }

    #[test]
    fn discovery_looks_for_the_evictionrequests_resource() {
        assert!(serves_requests(&json!({"resources": [
            {"name": "evictions"}, {"name": "evictionrequests"}
        ]})));
        assert!(!serves_requests(
            &json!({"resources": [{"name": "evictions"}]})
        ));
        assert!(!serves_requests(&json!({})));
    }
}
