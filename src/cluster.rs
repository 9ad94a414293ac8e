//! Every write the agent makes to its Node and its pods, by intent: mark the
//! node (cordon, drain taint), unmark it, evict a pod, delete a pod. The
//! rest of the code calls these, not patch shapes.
//!
//! The client has kube's own retry turned off: the drain paces its retries
//! itself and must see every 429 to say who blocks it.

use std::time::Duration;

use http::Request;
use serde_json::{Value, json};

/// The User-Agent of `node`'s agent, so that API audit logs and priority
/// and fairness rules can tell which node's agent made a call.
pub fn user_agent(node: &str) -> String {
    format!("maintd/{} (node {node})", env!("CARGO_PKG_VERSION"))
}

/// A client configuration made fit for an agent: kube's own retry off
/// (the drain paces its retries and must see every 429), connect and read
/// timeouts, and the agent's User-Agent. A node name that cannot go into a
/// header is left out of it.
pub fn agent_config(config: kube::Config, node: &str) -> kube::Config {
    let mut config = crate::client::with_connection_timeouts(config);
    config.default_retry = false;
    let ua = http::HeaderValue::from_str(&user_agent(node))
        .or_else(|_| http::HeaderValue::from_str(&user_agent("?")));
    if let Ok(ua) = ua {
        config.headers.push((http::header::USER_AGENT, ua));
    }
    config
}

/// Annotation maintd sets on the Node when it cordoned it, so that undo
/// uncordons only what maintd cordoned.
pub const CORDONED_ANNOTATION: &str = "maintd.io/cordoned";

/// A taint, as maintd sets and looks for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TaintSpec {
    pub key: String,
    pub value: String,
    pub effect: String,
}

impl TaintSpec {
    /// maintd's own mark while it drains: `maintd.io/draining:NoSchedule`.
    pub fn draining() -> Self {
        TaintSpec {
            key: "maintd.io/draining".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("node {node}: {message}")]
    Node { node: String, message: String },
    #[error("pod {namespace}/{name}: {message}")]
    Pod {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("{path}/{name}: {message}")]
    Object {
        path: String,
        name: String,
        message: String,
    },
}

/// What became of one eviction request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// 201: the pod is going; wait for it to disappear.
    Evicted,
    /// 404, or 409 on the uid precondition: the pod is already gone.
    Gone,
    /// 429: a PodDisruptionBudget (or a webhook) refuses for now.
    Blocked { blocker: String },
    /// 500: the pod is covered by more than one budget.
    MultipleBudgets { message: String },
    /// 403: not allowed (RBAC or admission); needs an operator.
    Forbidden { message: String },
    /// Anything else (network, 5xx): retry.
    Failed { message: String },
}

/// What one attempt to edit the Node came to.
enum Edited {
    /// Written, or nothing to do as the Node itself shows.
    Done,
    /// Nothing to do as the view shows, which may be behind.
    Unconfirmed,
    /// The Node changed since the version the edit started from.
    Conflict,
}

/// What marking or unmarking changed on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeChange {
    pub cordoned: bool,
    pub uncordoned: bool,
    pub tainted: bool,
    pub untainted: bool,
    /// A rolling turn's start was recorded (see [`ClusterOps::mark_for_turn`]).
    pub turn_started: bool,
}

/// One of the agent's writes of its own Node at a time. Each of them
/// carries the resourceVersion it was based on; two sent together from the
/// same view (the uncordon and the condition after its reboot; the cordon
/// and the turn's record as a node takes its slot, before the cordon
/// carried the record) made the second one
/// lose a conflict to the first and go round a backoff and a read: on
/// Kubernetes at 1,000 nodes, about one refused write of its Node per node
/// and seconds between a node's slot and its cordon. A writer takes this,
/// reads the view (which holds the last write's answer, see
/// [`crate::index::Index::upsert_own_write`]), writes, and puts the answer
/// in the view before the next one goes.
///
/// The edits of the Node's spec (cordon, taint, a turn's record) go before
/// its conditions: while one is on its way, retries included, the
/// conditions wait ([`Self::edits_pending`]). A cordon that got a 429 as
/// a rollout began otherwise waited, in its backoff, behind a condition
/// write that took seconds on a loaded API server.
#[derive(Clone, Default)]
pub struct NodeWrites {
    turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    edits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl NodeWrites {
    /// Waits for the writes of the Node before this one to be answered.
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Counts an edit of the Node's spec as on its way until the returned
    /// value is dropped.
    pub fn edit_pending(&self) -> PendingEdit {
        self.edits.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        PendingEdit(self.edits.clone())
    }

    /// Whether an edit of the Node's spec is on its way.
    pub fn edits_pending(&self) -> bool {
        self.edits.load(std::sync::atomic::Ordering::Acquire) > 0
    }
}

/// An edit of the Node's spec on its way (see [`NodeWrites::edit_pending`]).
pub struct PendingEdit(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for PendingEdit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The agent's writes, for one node.
#[derive(Clone)]
pub struct ClusterOps {
    client: kube::Client,
    node: String,
    /// Field manager for the agent's writes, `maintd/<node>`.
    pub manager: String,
    /// The agent's watched view of its Node: an edit starts from it, and
    /// reads the Node only when the view is behind (a 409) or says there
    /// is nothing to do.
    view: Option<crate::index::Index>,
    /// Shared with every other writer of the agent's Node.
    writes: NodeWrites,
}

impl ClusterOps {
    pub fn new(client: kube::Client, node: &str) -> Self {
        ClusterOps {
            client,
            node: node.to_string(),
            manager: format!("maintd/{node}"),
            view: None,
            writes: NodeWrites::default(),
        }
    }

    /// What the agent's other writers of its Node take their turn with
    /// (see [`NodeWrites`]).
    pub fn node_writes(&self) -> NodeWrites {
        self.writes.clone()
    }

    /// The same, starting edits of the Node from `view` (the agent's watch
    /// of it): one request instead of two while the API server fails some.
    pub fn with_view(mut self, view: crate::index::Index) -> Self {
        self.view = Some(view);
        self
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    fn node_err(&self, message: impl Into<String>) -> ClusterError {
        ClusterError::Node {
            node: self.node.clone(),
            message: message.into(),
        }
    }

    /// Reads this agent's Node from the API server.
    pub async fn get_node(&self) -> Result<Value, ClusterError> {
        let req = Request::get(format!("/api/v1/nodes/{}", self.node))
            .body(Vec::new())
            .map_err(|e| self.node_err(e.to_string()))?;
        self.client
            .request::<Value>(req)
            .await
            .map_err(|e| self.node_err(format!("reading the node: {}", crate::client::explain(&e))))
    }

    /// Edits the node with `edit` (which sees the current node and returns a
    /// merge patch, or None for no change), guarded by the node's
    /// resourceVersion; a 409 rereads and retries. Taints are an atomic
    /// list: this is how a taint edit never clobbers another controller's.
    async fn edit_node(
        &self,
        mut edit: impl FnMut(&Value) -> Option<Value>,
    ) -> Result<(), ClusterError> {
        let _pending = self.writes.edit_pending();
        let mut backoff = crate::index::Backoff::with(50, 1_000);
        // The first attempt starts from the view; after a conflict, or a
        // view that says there is nothing to do, from the Node itself.
        let mut from_view = self.view.is_some();
        for _ in 0..20 {
            match self
                .edit_once(&mut edit, std::mem::take(&mut from_view))
                .await?
            {
                Edited::Done => return Ok(()),
                // The view may be behind: nothing to do is confirmed
                // from the Node itself.
                Edited::Unconfirmed => {}
                Edited::Conflict => tokio::time::sleep(backoff.next_delay()).await,
            }
        }
        Err(self.node_err("the node kept changing under 20 attempts to edit it; will retry"))
    }

    /// One attempt of [`Self::edit_node`], in the Node's turn of writes
    /// (see [`NodeWrites`]): from the view if `from_view` and it holds the
    /// Node, else from a read of it.
    async fn edit_once(
        &self,
        edit: &mut impl FnMut(&Value) -> Option<Value>,
        from_view: bool,
    ) -> Result<Edited, ClusterError> {
        let _turn = self.writes.turn().await;
        let viewed = self
            .view
            .as_ref()
            .filter(|_| from_view)
            .and_then(|v| v.by_name(&self.node))
            .map(|n| (*n).clone());
        let from_view = viewed.is_some();
        let node = match viewed {
            Some(n) => n,
            None => self.get_node().await?,
        };
        let Some(mut patch) = edit(&node) else {
            return Ok(if from_view {
                Edited::Unconfirmed
            } else {
                Edited::Done
            });
        };
        let from = node["metadata"]["resourceVersion"].clone();
        patch["metadata"]["resourceVersion"] = from.clone();
        let body = serde_json::to_vec(&patch).map_err(|e| self.node_err(e.to_string()))?;
        let req = Request::patch(format!(
            "/api/v1/nodes/{}?fieldManager={}",
            self.node, self.manager
        ))
        .header("content-type", "application/merge-patch+json")
        .body(body)
        .map_err(|e| self.node_err(e.to_string()))?;
        match self.client.request::<Value>(req).await {
            Ok(written) => {
                // The agent sees its own write at once, not when the
                // watch brings it: what waits on it (a rolling turn's
                // slot goes to the next node once this one is
                // uncordoned) does not wait for the watch, and the next
                // write of the Node starts from it.
                if let (Some(view), Some(from)) = (&self.view, from.as_str()) {
                    view.upsert_own_write(written, from);
                }
                Ok(Edited::Done)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Edited::Conflict),
            Err(e) => {
                Err(self.node_err(format!("patching the node: {}", crate::client::explain(&e))))
            }
        }
    }

    /// Edits the node's annotations: `edit` sees the current node and
    /// returns the merge patch of its annotations (None: nothing to do),
    /// written with the node's resourceVersion as precondition.
    pub async fn annotate(
        &self,
        mut edit: impl FnMut(&Value) -> Option<Value>,
    ) -> Result<(), ClusterError> {
        self.edit_node(|node| edit(node).map(|a| json!({"metadata": {"annotations": a}})))
            .await
    }

    /// Cordons the node (recording that maintd did, unless it was already
    /// cordoned) and puts `taint` on it. Idempotent.
    pub async fn mark(&self, taint: &TaintSpec, cordon: bool) -> Result<NodeChange, ClusterError> {
        self.mark_for_turn(taint, cordon, None).await
    }

    /// [`Self::mark`], recording in the same write the start of `turn`
    /// where the Node does not show it started (or over) already: a node
    /// taking its slot is cordoned and shows its turn under way with one
    /// write of its Node, not two in a row. On a loaded API server each is
    /// a round trip of up to a second while the slot is taken and the node
    /// still schedulable, and an agent killed between the two left one
    /// without the other.
    pub async fn mark_for_turn(
        &self,
        taint: &TaintSpec,
        cordon: bool,
        turn: Option<&crate::api::turns::TurnRecord>,
    ) -> Result<NodeChange, ClusterError> {
        use crate::api::turns;
        let mut change = NodeChange::default();
        self.edit_node(|node| {
            change = NodeChange::default();
            let mut patch = json!({});
            if let Some(rec) = turn
                && turns::state(&rec.uid, node) == turns::TurnState::NotStarted
            {
                patch["metadata"]["annotations"] = turns::start_patch(rec);
                change.turn_started = true;
            }
            if cordon && node["spec"]["unschedulable"] != true {
                patch["spec"]["unschedulable"] = json!(true);
                patch["metadata"]["annotations"][CORDONED_ANNOTATION] = json!("true");
                change.cordoned = true;
            }
            let mut taints = node["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !taints
                .iter()
                .any(|t| t["key"] == taint.key.as_str() && t["effect"] == taint.effect.as_str())
            {
                let mut t =
                    json!({"key": taint.key, "effect": taint.effect, "timeAdded": crate::drain::progress::now_time()});
                if !taint.value.is_empty() {
                    t["value"] = json!(taint.value);
                }
                taints.push(t);
                patch["spec"]["taints"] = Value::Array(taints);
                change.tainted = true;
            }
            (change != NodeChange::default()).then_some(patch)
        })
        .await?;
        Ok(change)
    }

    /// Whether the node's cordon is still the one maintd made, as the
    /// Node's managedFields say who set `spec.unschedulable`: someone who
    /// uncordoned and cordoned it again since owns it now, and their cordon
    /// stays. With no owner recorded (a server that keeps no
    /// managedFields), maintd's note is trusted.
    fn cordon_is_ours(&self, node: &Value) -> bool {
        let owners = unschedulable_owners(node);
        owners.is_empty() || owners.iter().any(|(m, _)| *m == self.manager)
    }

    /// Removes maintd's taint, and uncordons the node if maintd cordoned it.
    /// A node an admin cordoned stays cordoned. Idempotent.
    pub async fn unmark(&self, taint: &TaintSpec) -> Result<NodeChange, ClusterError> {
        let mut change = NodeChange::default();
        self.edit_node(|node| {
            change = NodeChange::default();
            let mut patch = json!({});
            if node["metadata"]["annotations"][CORDONED_ANNOTATION].is_string() {
                patch["metadata"]["annotations"][CORDONED_ANNOTATION] = Value::Null;
                if node["spec"]["unschedulable"] == true && self.cordon_is_ours(node) {
                    patch["spec"]["unschedulable"] = Value::Null;
                    change.uncordoned = true;
                }
            }
            let taints = node["spec"]["taints"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let kept: Vec<Value> = taints
                .iter()
                .filter(|t| {
                    !(t["key"] == taint.key.as_str() && t["effect"] == taint.effect.as_str())
                })
                .cloned()
                .collect();
            if kept.len() != taints.len() {
                patch["spec"]["taints"] = Value::Array(kept);
                change.untainted = true;
            }
            (patch != json!({})).then_some(patch)
        })
        .await?;
        Ok(change)
    }

    /// Asks the API to evict one pod (by uid, so a newer pod of the same
    /// name is never evicted by mistake). `grace` overrides the pod's own
    /// termination grace period.
    pub async fn evict(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        grace: Option<i64>,
    ) -> EvictionOutcome {
        let mut delete_options = json!({"preconditions": {"uid": uid}});
        if let Some(g) = grace {
            delete_options["gracePeriodSeconds"] = json!(g);
        }
        // The body is written out here: kube's EvictParams serializes the
        // grace period under the wrong key.
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        });
        let req = match Request::post(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        {
            Ok(r) => r,
            Err(e) => {
                return EvictionOutcome::Failed {
                    message: e.to_string(),
                };
            }
        };
        match tokio::time::timeout(Duration::from_secs(30), self.client.request::<Value>(req)).await
        {
            Err(_) => EvictionOutcome::Failed {
                message: "the eviction request timed out after 30s".into(),
            },
            Ok(Ok(_)) => EvictionOutcome::Evicted,
            Ok(Err(kube::Error::Api(s))) => match s.code {
                404 => EvictionOutcome::Gone,
                // The uid precondition: that pod is gone (another took its
                // name); Kubernetes words it "the UID in the precondition
                // (..) does not match the UID in record". Any other
                // conflict (the budget changed under the eviction) is
                // asked again, like a refusal.
                409 if s.message.contains("UID in the precondition")
                    || s.message.contains("UID in precondition") =>
                {
                    EvictionOutcome::Gone
                }
                409 => EvictionOutcome::Blocked {
                    blocker: format!("{}; asking again", s.message),
                },
                429 => {
                    let cause = s
                        .details
                        .as_ref()
                        .and_then(|d| d.causes.iter().find(|c| !c.message.is_empty()))
                        .map(|c| c.message.clone());
                    EvictionOutcome::Blocked {
                        blocker: cause.unwrap_or(s.message.clone()),
                    }
                }
                500 if s.message.contains("more than one PodDisruptionBudget") => {
                    EvictionOutcome::MultipleBudgets {
                        message: s.message.clone(),
                    }
                }
                403 => EvictionOutcome::Forbidden {
                    message: s.message.clone(),
                },
                _ => EvictionOutcome::Failed {
                    message: format!("{} ({})", s.message, s.code),
                },
            },
            Ok(Err(e)) => EvictionOutcome::Failed {
                message: crate::client::explain(&e),
            },
        }
    }

    /// Deletes a pod (completed pods, and escalation on shutdown), by uid.
    pub async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        grace: Option<i64>,
    ) -> Result<(), ClusterError> {
        let mut opts = json!({"preconditions": {"uid": uid}});
        if let Some(g) = grace {
            opts["gracePeriodSeconds"] = json!(g);
        }
        let err = |message: String| ClusterError::Pod {
            namespace: namespace.into(),
            name: name.into(),
            message,
        };
        let req = Request::delete(format!("/api/v1/namespaces/{namespace}/pods/{name}"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&opts).unwrap_or_default())
            .map_err(|e| err(e.to_string()))?;
        match self.client.request::<Value>(req).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(err(format!("deleting: {}", crate::client::explain(&e)))),
        }
    }

    /// Takes `finalizer` off `obj`, a cluster-scoped object of the
    /// collection `path`. The JSON patch tests the list as read first, so
    /// another controller's edit of the list in between is never undone
    /// (the test fails with 422 and the caller tries again on its next
    /// look at the object).
    pub async fn remove_finalizer(
        &self,
        path: &str,
        obj: &Value,
        finalizer: &str,
    ) -> Result<(), ClusterError> {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let err = |message: String| ClusterError::Object {
            path: path.into(),
            name: name.into(),
            message,
        };
        let current = obj["metadata"]["finalizers"].clone();
        let rest: Vec<&Value> = current
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f.as_str() != Some(finalizer))
            .collect();
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": rest},
        ]);
        let req = Request::patch(format!("{path}/{name}?fieldManager={}", self.manager))
            .header("content-type", "application/json-patch+json")
            .body(serde_json::to_vec(&patch).unwrap_or_default())
            .map_err(|e| err(e.to_string()))?;
        match self.client.request::<Value>(req).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(err(format!(
                "removing finalizer {finalizer}: {}",
                crate::client::explain(&e)
            ))),
        }
    }
}

/// Who owns the Node's `spec.unschedulable`, from its managedFields (the
/// Node itself, not its status), with when they wrote: `(manager, time)`.
/// A client that removed the field (as `kubectl uncordon` does) owns
/// nothing.
pub fn unschedulable_owners(node: &Value) -> Vec<(&str, &str)> {
    node["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["subresource"].as_str().unwrap_or("").is_empty())
        .filter(|e| !e["fieldsV1"]["f:spec"]["f:unschedulable"].is_null())
        .filter_map(|e| Some((e["manager"].as_str()?, e["time"].as_str().unwrap_or("?"))))
        .collect()
}
