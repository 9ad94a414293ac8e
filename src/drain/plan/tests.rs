//! Table-driven tests of the drain plan, and the helpers that keep the tables
//! short: a tiny pod builder and a one-line-per-stage rendering of a plan.

mod entries;
mod json;
mod ordering;
mod selectors;
mod skips;

use super::*;

/// A running pod `ns/<name>` of priority 0, controlled by a ReplicaSet.
fn pod(name: &str) -> PodInfo {
    PodInfo {
        namespace: "ns".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        owner: Some(owner("ReplicaSet", true)),
        phase: "Running".into(),
        ..PodInfo::default()
    }
}

fn owner(kind: &str, controller: bool) -> OwnerRef {
    OwnerRef {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: "owner".into(),
        uid: "owner-uid".into(),
        controller,
    }
}

/// Builder methods for [`pod`].
trait PodBuilder: Sized {
    fn edit(self, f: impl FnOnce(&mut PodInfo)) -> Self;
    fn ns(self, ns: &str) -> Self {
        self.edit(|p| p.namespace = ns.into())
    }
    fn prio(self, priority: i32) -> Self {
        self.edit(|p| p.priority = priority)
    }
    fn owned(self, kind: &str, controller: bool) -> Self {
        self.edit(|p| p.owner = Some(owner(kind, controller)))
    }
    fn ds(self) -> Self {
        self.owned("DaemonSet", true)
    }
    fn mirror(self) -> Self {
        self.owned("Node", true).annot(MIRROR_ANNOTATION, "hash")
    }
    fn bare(self) -> Self {
        self.edit(|p| p.owner = None)
    }
    fn label(self, k: &str, v: &str) -> Self {
        self.edit(|p| drop(p.labels.insert(k.into(), v.into())))
    }
    fn annot(self, k: &str, v: &str) -> Self {
        self.edit(|p| drop(p.annotations.insert(k.into(), v.into())))
    }
    fn phase(self, phase: &str) -> Self {
        self.edit(|p| p.phase = phase.into())
    }
    fn deleting(self) -> Self {
        self.edit(|p| p.deleting = true)
    }
    fn tol(self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        let t = Toleration {
            key: key.into(),
            operator: operator.into(),
            value: value.into(),
            effect: effect.into(),
        };
        self.edit(|p| p.tolerations.push(t))
    }
    fn empty_dir(self) -> Self {
        self.edit(|p| p.has_empty_dir = true)
    }
    fn grace(self, seconds: i64) -> Self {
        self.edit(|p| p.termination_grace_seconds = seconds)
    }
}

impl PodBuilder for PodInfo {
    fn edit(mut self, f: impl FnOnce(&mut PodInfo)) -> Self {
        f(&mut self);
        self
    }
}

fn entry(pod_type: PodType, pod_priority: i32) -> PlanEntry {
    PlanEntry {
        pod_type,
        pod_priority,
        pod_selector: None,
    }
}

/// An entry with a selector written as its JSON (`{"matchLabels": …}`).
fn entry_sel(pod_type: PodType, pod_priority: i32, selector: serde_json::Value) -> PlanEntry {
    PlanEntry {
        pod_selector: Some(serde_json::from_value(selector).unwrap()),
        ..entry(pod_type, pod_priority)
    }
}

/// The options every table uses: the agent runs as `maintd/maintd-x1`.
fn opts() -> PlanOptions {
    PlanOptions {
        own_pod: Some(("maintd".into(), "maintd-x1".into())),
        ..PlanOptions::default()
    }
}

/// One line per stage (`<label>: a b(wait)`), then `completed: …`, then one
/// `skip <pod>: <reason>` per skipped pod. Pods in namespace `ns` by name only.
fn render(plan: &DrainPlan) -> Vec<String> {
    fn id(namespace: &str, name: &str) -> String {
        if namespace == "ns" {
            name.to_string()
        } else {
            format!("{namespace}/{name}")
        }
    }
    fn pods(pods: &[PlannedPod]) -> String {
        let ids = pods.iter().map(|p| {
            let wait = if p.action == PodAction::WaitTerminating {
                "(wait)"
            } else {
                ""
            };
            format!("{}{wait}", id(&p.namespace, &p.name))
        });
        ids.collect::<Vec<_>>().join(" ")
    }
    let mut lines: Vec<String> = plan
        .stages
        .iter()
        .map(|s| format!("{}: {}", s.label, pods(&s.pods)))
        .collect();
    if !plan.completed.is_empty() {
        lines.push(format!("completed: {}", pods(&plan.completed)));
    }
    for s in &plan.skipped {
        let reason = match &s.reason {
            SkipReason::OptOut {
                label_or_annotation,
            } => format!("OptOut({label_or_annotation})"),
            other => format!("{other:?}"),
        };
        lines.push(format!("skip {}: {reason}", id(&s.namespace, &s.name)));
    }
    lines
}

struct Case {
    name: &'static str,
    pods: Vec<PodInfo>,
    entries: Option<Vec<PlanEntry>>,
    want: &'static [&'static str],
}

/// Builds every case's plan and reports all mismatches at once.
fn run(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for c in &cases {
        let plan = build_plan(&c.pods, c.entries.as_deref(), &opts());
        let got = render(&plan);
        if got != c.want {
            failures.push(format!(
                "case {:?}\n  got:  {got:#?}\n  want: {:#?}",
                c.name, c.want
            ));
        }
        for (i, stage) in plan.stages.iter().enumerate() {
            assert_eq!(stage.index, i, "case {:?}: stage indices run 0..n", c.name);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
