//! The drain plan from pods and plan entries built to hit its rules: the
//! opt-out keys and values, mirror pods, DaemonSet pods tolerating the
//! drain taint, completed and terminating pods, priorities at and around
//! the well-known classes, selectors that match, miss or are malformed.
//! Checks: no pod the admin kept (opt-out, the agent's own pod, the taint
//! rule) is drained, mirror pods are drained as static pods only, every
//! pod is planned or skipped once, and stages keep priority order.
#![no_main]

#[path = "../common/mod.rs"]
mod common;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use maintd::drain::plan::{PlanEntry, PlanOptions, PodInfo, PodType};
use serde_json::{Map, Value, json};

#[derive(Arbitrary, Debug)]
enum Key {
    OptOut,
    CapiOptOut,
    Mirror,
    App,
    Tier,
    Other(String),
}

impl Key {
    fn text(&self) -> String {
        match self {
            Key::OptOut => "maintd.io/drain".into(),
            Key::CapiOptOut => "cluster.x-k8s.io/drain".into(),
            Key::Mirror => "kubernetes.io/config.mirror".into(),
            Key::App => "app".into(),
            Key::Tier => "tier".into(),
            Key::Other(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Val {
    Skip,
    WaitCompleted,
    Web,
    Db,
    Other(String),
    NotAString(i64),
}

impl Val {
    fn json(&self) -> Value {
        match self {
            Val::Skip => "skip".into(),
            Val::WaitCompleted => "wait-completed".into(),
            Val::Web => "web".into(),
            Val::Db => "db".into(),
            Val::Other(s) => s.clone().into(),
            Val::NotAString(n) => json!(n),
        }
    }
    fn text(&self) -> String {
        match self.json() {
            Value::String(s) => s,
            other => other.to_string(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Priority {
    Unset,
    Value(i32),
    ClusterCritical,
    NodeCritical,
    Class(String),
    Malformed(String),
}

#[derive(Arbitrary, Debug)]
enum OwnerKind {
    ReplicaSet,
    DaemonSet,
    Node,
    Job,
    Other(String),
}

#[derive(Arbitrary, Debug)]
struct Owner {
    kind: OwnerKind,
    controller: Option<bool>,
}

#[derive(Arbitrary, Debug)]
struct Toleration {
    drain_key: bool,
    exists: bool,
    effect: u8,
}

#[derive(Arbitrary, Debug)]
struct Pod {
    namespace: u8,
    name: u8,
    uid: u8,
    labels: Vec<(Key, Val)>,
    annotations: Vec<(Key, Val)>,
    priority: Priority,
    owners: Vec<Owner>,
    phase: u8,
    deleting: bool,
    tolerations: Vec<Toleration>,
    empty_dir: bool,
    grace: Option<i64>,
}

impl Pod {
    fn json(&self) -> Value {
        let map = |kv: &[(Key, Val)]| -> Value {
            Value::Object(
                kv.iter()
                    .map(|(k, v)| (k.text(), v.json()))
                    .collect::<Map<_, _>>(),
            )
        };
        let mut spec = json!({"containers": [{"name": "c"}]});
        match &self.priority {
            Priority::Unset => {}
            Priority::Value(n) => spec["priority"] = json!(n),
            Priority::ClusterCritical => {
                spec["priorityClassName"] = "system-cluster-critical".into()
            }
            Priority::NodeCritical => spec["priorityClassName"] = "system-node-critical".into(),
            Priority::Class(c) => spec["priorityClassName"] = c.clone().into(),
            Priority::Malformed(s) => spec["priority"] = s.clone().into(),
        }
        if let Some(g) = self.grace {
            spec["terminationGracePeriodSeconds"] = json!(g);
        }
        if self.empty_dir {
            spec["volumes"] = json!([{"name": "tmp", "emptyDir": {}}]);
        }
        let effects = ["", "NoSchedule", "NoExecute", "PreferNoSchedule"];
        spec["tolerations"] = self
            .tolerations
            .iter()
            .map(|t| {
                let mut v = json!({"effect": effects[usize::from(t.effect) % effects.len()]});
                if t.drain_key {
                    v["key"] = "maintd.io/draining".into();
                }
                v["operator"] = if t.exists { "Exists" } else { "Equal" }.into();
                v
            })
            .collect();
        let owners: Vec<Value> = self
            .owners
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let kind = match &o.kind {
                    OwnerKind::ReplicaSet => "ReplicaSet".to_string(),
                    OwnerKind::DaemonSet => "DaemonSet".to_string(),
                    OwnerKind::Node => "Node".to_string(),
                    OwnerKind::Job => "Job".to_string(),
                    OwnerKind::Other(s) => s.clone(),
                };
                let mut v = json!({"apiVersion": "apps/v1", "kind": kind, "name": format!("o{i}"), "uid": format!("u{i}")});
                if let Some(c) = o.controller {
                    v["controller"] = c.into();
                }
                v
            })
            .collect();
        let phases = ["Running", "Pending", "Succeeded", "Failed", "Unknown", ""];
        let mut meta = json!({
            "namespace": format!("ns{}", self.namespace % 3),
            "name": format!("p{}", self.name % 8),
            "uid": format!("uid-{}", self.uid % 8),
            "labels": map(&self.labels),
            "annotations": map(&self.annotations),
            "ownerReferences": owners,
        });
        if self.deleting {
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        json!({
            "metadata": meta,
            "spec": spec,
            "status": {"phase": phases[usize::from(self.phase) % phases.len()]},
        })
    }
}

#[derive(Arbitrary, Debug)]
enum Selector {
    Labels(Vec<(Key, Val)>),
    In(Key, Vec<Val>),
    NotIn(Key, Vec<Val>),
    Exists(Key),
    DoesNotExist(Key),
    Operator(Key, String, Vec<Val>),
}

impl Selector {
    fn json(&self) -> Value {
        let values = |vs: &[Val]| vs.iter().map(Val::text).collect::<Vec<_>>();
        match self {
            Selector::Labels(kv) => {
                json!({"matchLabels": kv.iter().map(|(k, v)| (k.text(), Value::String(v.text()))).collect::<Map<_, _>>()})
            }
            Selector::In(k, vs) => {
                json!({"matchExpressions": [{"key": k.text(), "operator": "In", "values": values(vs)}]})
            }
            Selector::NotIn(k, vs) => {
                json!({"matchExpressions": [{"key": k.text(), "operator": "NotIn", "values": values(vs)}]})
            }
            Selector::Exists(k) => {
                json!({"matchExpressions": [{"key": k.text(), "operator": "Exists"}]})
            }
            Selector::DoesNotExist(k) => {
                json!({"matchExpressions": [{"key": k.text(), "operator": "DoesNotExist"}]})
            }
            Selector::Operator(k, op, vs) => {
                json!({"matchExpressions": [{"key": k.text(), "operator": op, "values": values(vs)}]})
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Entry {
    pod_type: u8,
    priority: Priority,
    selector: Option<Selector>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    pods: Vec<Pod>,
    entries: Option<Vec<Entry>>,
    own_pod: Option<(u8, u8)>,
}

fuzz_target!(|input: Input| {
    if input.pods.len() > 64 || input.entries.as_ref().is_some_and(|e| e.len() > 16) {
        return;
    }
    let pods: Vec<PodInfo> = input
        .pods
        .iter()
        .map(|p| PodInfo::from_json(&p.json()))
        .collect();
    let entries: Option<Vec<PlanEntry>> = input.entries.as_ref().map(|es| {
        es.iter()
            .map(|e| PlanEntry {
                pod_type: [PodType::Default, PodType::DaemonSet, PodType::Static]
                    [usize::from(e.pod_type) % 3],
                pod_priority: match &e.priority {
                    Priority::Value(n) => *n,
                    Priority::ClusterCritical => 2_000_000_000,
                    Priority::NodeCritical => 2_000_001_000,
                    _ => 0,
                },
                pod_selector: e
                    .selector
                    .as_ref()
                    .and_then(|s| serde_json::from_value(s.json()).ok()),
            })
            .collect()
    });
    let opts = PlanOptions {
        own_pod: input
            .own_pod
            .map(|(ns, name)| (format!("ns{}", ns % 3), format!("p{}", name % 8))),
        ..PlanOptions::default()
    };
    common::plan_and_check(&pods, entries.as_deref(), &opts);
});
