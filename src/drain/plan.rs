//! Placeholder until the plan branch lands.
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PodType {
    Default,
    DaemonSet,
    Static,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    pub pod_type: PodType,
    pub pod_priority: i32,
    pub pod_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
}
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub own_pod: Option<(String, String)>,
    pub drain_taint_key: String,
    pub drain_taint_effect: String,
}
#[derive(Debug, Clone, Default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub priority: i32,
    pub kind: Option<String>,
    pub phase: String,
    pub deleting: bool,
    pub grace: i64,
}
impl PodInfo {
    pub fn from_json(v: &Value) -> PodInfo {
        let md = &v["metadata"];
        let kind = md["ownerReferences"]
            .as_array()
            .and_then(|a| a.iter().find(|o| o["controller"] == true))
            .and_then(|o| o["kind"].as_str())
            .map(str::to_string);
        let kind = if md["annotations"]["kubernetes.io/config.mirror"].is_string() {
            Some("Node".to_string())
        } else {
            kind
        };
        PodInfo {
            namespace: md["namespace"].as_str().unwrap_or("").into(),
            name: md["name"].as_str().unwrap_or("").into(),
            uid: md["uid"].as_str().unwrap_or("").into(),
            labels: BTreeMap::new(),
            priority: v["spec"]["priority"].as_i64().unwrap_or(0) as i32,
            kind,
            phase: v["status"]["phase"].as_str().unwrap_or("").into(),
            deleting: !md["deletionTimestamp"].is_null(),
            grace: v["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30),
        }
    }
}
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PodAction {
    Evict,
    WaitTerminating,
}
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_type: PodType,
    pub priority: i32,
    pub action: PodAction,
    pub grace_seconds: i64,
}
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    pub index: usize,
    pub pod_type: PodType,
    pub priority: i32,
    pub label: String,
    pub pods: Vec<PlannedPod>,
}
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum SkipReason {
    OwnPod,
}
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_type: PodType,
    pub reason: SkipReason,
}
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DrainPlan {
    pub stages: Vec<Stage>,
    pub completed: Vec<PlannedPod>,
    pub skipped: Vec<SkippedPod>,
    pub warnings: Vec<String>,
}
pub fn build_plan(
    pods: &[PodInfo],
    _entries: Option<&[PlanEntry]>,
    _opts: &PlanOptions,
) -> DrainPlan {
    let mut groups: BTreeMap<(PodType, i32), Vec<PlannedPod>> = BTreeMap::new();
    let mut completed = vec![];
    for p in pods {
        let t = match p.kind.as_deref() {
            Some("DaemonSet") => PodType::DaemonSet,
            Some("Node") => PodType::Static,
            _ => PodType::Default,
        };
        let pp = PlannedPod {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            pod_type: t,
            priority: p.priority,
            action: if p.deleting {
                PodAction::WaitTerminating
            } else {
                PodAction::Evict
            },
            grace_seconds: p.grace,
        };
        if p.phase == "Succeeded" || p.phase == "Failed" {
            completed.push(pp);
            continue;
        }
        groups.entry((t, p.priority)).or_default().push(pp);
    }
    let stages = groups
        .into_iter()
        .enumerate()
        .map(|(i, ((t, pr), pods))| Stage {
            index: i,
            pod_type: t,
            priority: pr,
            label: format!("{t:?} ≤ {pr}"),
            pods,
        })
        .collect();
    DrainPlan {
        stages,
        completed,
        skipped: vec![],
        warnings: vec![],
    }
}
