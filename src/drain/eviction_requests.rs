//! The drain as a requester of the EvictionRequest API
//! (`lifecycle.k8s.io/v1alpha1`, alpha in Kubernetes 1.37 behind the
//! `EvictionRequestAPI` gate, KEP-4563). A pod that declares responders of
//! its own (`spec.evictionResponders`, such as KubeVirt's live migration)
//! is asked to leave with an EvictionRequest instead of a `policy/v1`
//! Eviction, so its responders act first and say how far they are; every
//! other pod, and every pod where the API server does not serve the API or
//! the operator turned it off, goes through the Eviction API as before.
//!
//! Kubernetes 1.37 serves the API but ships no controller acting on it: a
//! request nothing acts on within a bound is given up and its pod evicted
//! through the Eviction API ([`ProgressBound`]).
//!
//! Each request is named `maintd-<pod uid>` and labelled with the node, so a
//! restarted agent adopts what it asked for and an undo finds what to
//! withdraw. Requests are given up the way the API asks: intent `Withdrawn`
//! first, deleted once the request is final (or after a bound).

mod body;
mod bound;
mod read;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use serde_json::{Value, json};

pub use bound::ProgressBound;
pub use read::{State, final_state, own_responders, progress, state_of};

/// The API group and version the agent speaks.
pub const API: &str = "lifecycle.k8s.io/v1alpha1";
/// maintd's requester name (a domain-prefixed key, as the API asks).
pub const REQUESTER: &str = "maintd.io/drain";
/// The label naming the node whose drain made a request.
pub const NODE_LABEL: &str = "maintd.io/node";
/// The responder every Eviction ends with: it calls the Eviction API. A pod
/// with no other responder gains nothing from a request.
pub const DEFAULT_RESPONDER: &str = "imperative-eviction.k8s.io/evictor";
/// How long a request nothing acts on is followed before its pod is
/// evicted through the Eviction API, unless the operator says otherwise.
pub const DEFAULT_PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request given up is waited on to become final before it is
/// deleted regardless.
const RETIRE_WITHIN: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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
    progress_timeout: Duration,
    /// Whether the API is served, as last discovered (None: not yet asked).
    served: Arc<Mutex<Option<bool>>>,
}

impl EvictionRequests {
    /// `progress_timeout` bounds how long a request nothing acts on is
    /// followed (see [`ProgressBound`]).
    pub fn new(client: kube::Client, node: &str, mode: Mode, progress_timeout: Duration) -> Self {
        EvictionRequests {
            client,
            node: node.to_string(),
            mode,
            progress_timeout,
            served: Arc::default(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How long a request nothing acts on is followed.
    pub fn progress_timeout(&self) -> Duration {
        self.progress_timeout
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
            Ok(list) => Some(read::serves_requests(&list)),
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

    /// The responders of its own a pod declares, higher priority first, if
    /// a request is to be used for it: the API is served, not turned off,
    /// and the pod names a responder other than the default evictor.
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
        let sent = match body::json(&body::request(namespace, pod, uid, &self.node)) {
            Ok(b) => b,
            Err(why) => return Asked::Refused(why),
        };
        match self
            .call("POST", &path, Some(&sent), "application/json")
            .await
        {
            Ok(_) => Asked::Requested,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                match self.set_intent(namespace, uid, body::EVICTION).await {
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
    /// words from the Eviction made of it.
    pub async fn state(&self, namespace: &str, uid: &str) -> Result<State, String> {
        let path = format!("{}/{}", collection(namespace), name(uid));
        let request: EvictionRequest = match self.call("GET", &path, None, "").await {
            Ok(r) => decode(r, "EvictionRequest")?,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(State::Missing),
            Err(e) => return Err(crate::client::explain(&e)),
        };
        let conditions = request
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref());
        if let Some(done) = conditions.and_then(final_state) {
            return Ok(done);
        }
        // Every participant is a label key of the Eviction (valued
        // `requester`, `responder` or `requester-responder`).
        let list = format!(
            "/apis/{API}/namespaces/{namespace}/evictions?labelSelector={}",
            crate::outbound::url::encode(REQUESTER)
        );
        let evictions: Vec<Eviction> = match self.call("GET", &list, None, "").await {
            Ok(list) => list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["spec"]["target"]["pod"]["uid"] == uid)
                .filter_map(|e| serde_json::from_value(e.clone()).ok())
                .collect(),
            // The API server can serve requests and not Evictions (each
            // resource has its own runtime-config switch): none is made.
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(e) => return Err(crate::client::explain(&e)),
        };
        Ok(state_of(&request, &evictions))
    }

    /// Withdraws the request for this pod (intent `Withdrawn`), then
    /// deletes it in the background once it is final (or after a bound),
    /// as the API asks of a requester that changed its mind.
    pub async fn give_up(&self, namespace: &str, uid: &str) {
        self.withdraw(namespace, uid).await;
        self.retire(namespace, uid);
    }

    /// Withdraws a request nothing acted on and deletes it at once: with
    /// no controller, it would never become final.
    pub async fn give_up_untouched(&self, namespace: &str, uid: &str) {
        self.withdraw(namespace, uid).await;
        self.retire_within(namespace, uid, Duration::ZERO);
    }

    async fn withdraw(&self, namespace: &str, uid: &str) {
        if let Err(why) = self.set_intent(namespace, uid, body::WITHDRAWN).await {
            tracing::debug!(%namespace, %uid, %why, "could not withdraw an EvictionRequest");
        }
    }

    /// Deletes the request once it is final (TargetEvicted or Failed), in
    /// the background: at most [`RETIRE_WITHIN`], then deleted regardless.
    pub fn retire(&self, namespace: &str, uid: &str) {
        self.retire_within(namespace, uid, RETIRE_WITHIN);
    }

    fn retire_within(&self, namespace: &str, uid: &str, within: Duration) {
        let this = self.clone();
        let path = format!("{}/{}", collection(namespace), name(uid));
        let namespace = namespace.to_string();
        tokio::spawn(async move {
            // The request as first seen: a newer one of the same name (the
            // drain asking again) is never deleted by this.
            let mut seen: Option<String> = None;
            let until = tokio::time::Instant::now() + within;
            let mut backoff = crate::index::Backoff::with(500, 5_000);
            loop {
                match this.call("GET", &path, None, "").await {
                    Ok(r) => {
                        let r: Result<EvictionRequest, _> = serde_json::from_value(r);
                        let Ok(r) = r else { break };
                        if seen.is_none() {
                            seen = r.metadata.uid.clone();
                        }
                        let conditions = r.status.and_then(|s| s.conditions).unwrap_or_default();
                        if final_state(&conditions).is_some() {
                            break;
                        }
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => return,
                    Err(_) => {}
                }
                if tokio::time::Instant::now() >= until {
                    break;
                }
                tokio::time::sleep(backoff.next_delay()).await;
            }
            let Ok(options) = body::json(&body::delete_options(seen)) else {
                return;
            };
            match this
                .call("DELETE", &path, Some(&options), "application/json")
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
            let Ok(r) = serde_json::from_value::<EvictionRequest>(r.clone()) else {
                continue;
            };
            let (Some(ns), Some(pod)) = (&r.metadata.namespace, &r.spec.target.pod) else {
                continue;
            };
            // Only this agent's own: the label can be copied, the name
            // and requester are what it made.
            if r.spec.requester != REQUESTER || r.metadata.name != Some(name(&pod.uid)) {
                continue;
            }
            n += 1;
            if r.spec.intent == body::WITHDRAWN {
                self.retire(ns, &pod.uid);
            } else {
                // In the background: an undo does not wait on a slow API
                // server once per request.
                let (this, ns, uid) = (self.clone(), ns.clone(), pod.uid.clone());
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
        // A merge patch: its shape, not an object, so JSON by hand.
        let patch = json!({"spec": {"intent": intent}});
        match self
            .call("PATCH", &path, Some(&patch), "application/merge-patch+json")
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 && intent == body::WITHDRAWN => Ok(()),
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

/// An object read from the API server, typed; what did not fit is said.
fn decode<T: serde::de::DeserializeOwned>(v: Value, kind: &str) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("the API server's {kind} does not decode: {e}"))
}

/// The request's name for a pod: unique per pod incarnation, so a restarted
/// agent finds its own.
pub fn name(uid: &str) -> String {
    format!("maintd-{uid}")
}

fn collection(namespace: &str) -> String {
    format!("/apis/{API}/namespaces/{namespace}/evictionrequests")
}
