//! The drain plan: pods on the node + KEP-4212 plan entries → ordered stages.
//!
//! Pure: no client, no async, no clock. The executor runs the stages in order
//! (every pod of stage k gone before stage k+1 starts); `maintd plan` and the
//! status endpoint show the same [`DrainPlan`].
//!
//! - Default plan (no entries): Default pods, then DaemonSet pods, then static
//!   pods; within each type one stage per distinct priority present, lowest
//!   first, so system-cluster-critical and system-node-critical come last.
//! - Explicit entries: each entry is one stage of the pods of its type with
//!   priority ≤ its `podPriority` (and matching its `podSelector`) that no
//!   earlier entry took. Pods no entry takes are skipped as [`SkipReason::NotInPlan`].
//! - Never drained: the agent's own pod, pods opting out (`maintd.io/drain:
//!   skip` label or annotation, `cluster.x-k8s.io/drain: skip` label), and
//!   DaemonSet pods tolerating the drain taint (they would come straight back).
//! - Waited for, not evicted: pods labelled (or, for maintd's key,
//!   annotated) `maintd.io/drain: wait-completed` or
//!   `cluster.x-k8s.io/drain: wait-completed` (Cluster API's `WaitCompleted`
//!   drain behaviour): their stage waits until they finish, batch work that
//!   must not be interrupted.
//! - Completed (Succeeded/Failed) Default and DaemonSet pods are deleted up
//!   front and never waited for. Static pods always go through their stage:
//!   only stashing the manifest removes them, whatever their phase.

mod build;
mod entry;
mod pod;
mod selector;
#[cfg(test)]
mod tests;

use std::fmt;

use serde::Serialize;

pub use build::{WAIT_COMPLETED, build_plan, wait_completed};
pub use entry::{PlanEntry, PlanError, PodType, validate_entries};
pub use pod::{
    DEFAULT_GRACE_SECONDS, OwnerRef, PodInfo, SYSTEM_CLUSTER_CRITICAL, SYSTEM_NODE_CRITICAL,
    Toleration, well_known_priority,
};
pub use selector::{SelectorError, selector_matches, tolerates};

/// Annotation the kubelet puts on mirror pods of static pods.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Label or annotation with value `skip` that keeps a pod from being drained.
pub const OPT_OUT_KEY: &str = "maintd.io/drain";
/// Cluster API's opt-out label (value `skip`), honoured as well.
pub const CAPI_OPT_OUT_LABEL: &str = "cluster.x-k8s.io/drain";

/// The pod type, from the pod's owner and annotations.
///
/// Static: a mirror pod (annotation [`MIRROR_ANNOTATION`], or owned by a
/// Node). DaemonSet: its controller is a DaemonSet. Default: anything else.
pub fn classify(pod: &PodInfo) -> PodType {
    let owner_is_node = pod.owner.as_ref().is_some_and(|o| o.kind == "Node");
    if pod.annotations.contains_key(MIRROR_ANNOTATION) || owner_is_node {
        PodType::Static
    } else if pod.controller().is_some_and(|o| o.kind == "DaemonSet") {
        PodType::DaemonSet
    } else {
        PodType::Default
    }
}

/// What the plan builder needs to know besides the pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// The agent's own pod (namespace, name), from the downward API.
    pub own_pod: Option<(String, String)>,
    /// Key of the taint the agent puts on the node while draining (no value).
    pub drain_taint_key: String,
    /// Effect of that taint.
    pub drain_taint_effect: String,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            own_pod: None,
            drain_taint_key: "maintd.io/draining".to_string(),
            drain_taint_effect: "NoSchedule".to_string(),
        }
    }
}

/// An ordered drain plan for one node.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DrainPlan {
    /// Run in order; a stage starts when every pod of the previous one is gone.
    pub stages: Vec<Stage>,
    /// Succeeded/Failed pods: deleted first, never waited for.
    pub completed: Vec<PlannedPod>,
    /// Pods the plan leaves on the node, and why.
    pub skipped: Vec<SkippedPod>,
    /// Malformed pods (`pod ns/name: …`) and problems with the plan entries.
    pub warnings: Vec<String>,
}

impl DrainPlan {
    /// Every pod the plan acts on: completed pods, then stage by stage.
    pub fn pods(&self) -> impl Iterator<Item = &PlannedPod> {
        self.completed
            .iter()
            .chain(self.stages.iter().flat_map(|s| s.pods.iter()))
    }
}

/// One step of the plan: pods evicted in parallel.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// Position in [`DrainPlan::stages`], from 0.
    pub index: usize,
    pub pod_type: PodType,
    /// The stage's priority ceiling: no pod in it has a higher priority.
    pub priority: i32,
    /// For people, e.g. `Default ≤ 1000`.
    pub label: String,
    /// The plan entry this stage comes from (`None` in the default plan).
    /// Differs from `index` when an earlier entry selected no pod.
    pub entry: Option<usize>,
    /// Sorted by namespace, then name.
    pub pods: Vec<PlannedPod>,
}

impl Stage {
    /// The longest grace period in the stage: what it needs to finish.
    pub fn slowest_grace_seconds(&self) -> i64 {
        self.pods.iter().map(|p| p.grace_seconds).max().unwrap_or(0)
    }
}

/// What the executor does with a pod.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodAction {
    /// Evict through `pods/eviction` and wait for it to go.
    Evict,
    /// Already terminating: only wait for it to go.
    WaitTerminating,
    /// Completed: delete, don't wait.
    Delete,
    /// Labelled `wait-completed`: not evicted; its stage waits until it
    /// finishes (or is deleted at a shutdown's deadline).
    WaitCompleted,
}

/// Something an operator should know about a drained pod.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", content = "detail")]
pub enum PodNote {
    /// No controller owns it: once evicted, nothing recreates it.
    NoController,
    /// It mounts an emptyDir volume, whose data is lost.
    EmptyDir,
    /// A field of the pod was malformed; the text says which and what was used.
    MalformedField(String),
}

impl fmt::Display for PodNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PodNote::NoController => f.write_str("no controller: it will not be recreated"),
            PodNote::EmptyDir => f.write_str("emptyDir data will be lost"),
            PodNote::MalformedField(w) => write!(f, "malformed field: {w}"),
        }
    }
}

/// A pod the plan acts on.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlannedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_type: PodType,
    pub priority: i32,
    pub action: PodAction,
    pub notes: Vec<PodNote>,
    /// Its terminationGracePeriodSeconds: how long it may take to stop.
    pub grace_seconds: i64,
    /// The workload it belongs to (its controller, else its first owner),
    /// which the drain's Events for application owners are about.
    #[serde(skip)]
    pub owner: Option<OwnerRef>,
}

/// A pod the plan leaves alone.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SkippedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_type: PodType,
    pub reason: SkipReason,
}

/// Why a pod is not drained.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
pub enum SkipReason {
    /// The agent's own pod.
    OwnPod,
    /// Opted out, e.g. `label maintd.io/drain=skip`.
    OptOut { label_or_annotation: String },
    /// A DaemonSet pod tolerating the drain taint: evicted, it would return.
    ToleratesDrainTaint,
    /// The explicit plan has no entry selecting it.
    NotInPlan,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::OwnPod => f.write_str("the maintd agent itself"),
            SkipReason::OptOut {
                label_or_annotation,
            } => write!(f, "opted out ({label_or_annotation})"),
            SkipReason::ToleratesDrainTaint => {
                f.write_str("DaemonSet pod tolerating the drain taint: it would come back")
            }
            SkipReason::NotInPlan => f.write_str("no entry of the drain plan selects it"),
        }
    }
}
