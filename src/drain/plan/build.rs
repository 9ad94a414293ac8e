//! [`build_plan`]: sorting the node's pods into stages.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{
    CAPI_OPT_OUT_LABEL, DrainPlan, OPT_OUT_KEY, PlanEntry, PlanOptions, PlannedPod, PodAction,
    PodInfo, PodNote, PodType, SkipReason, SkippedPod, Stage, classify, selector_matches,
    tolerates, validate_entries, well_known_priority,
};

/// Builds the drain plan for `pods` (all on one node).
///
/// `entries: None` gives the default plan; `Some` follows the KEP-4212 entries
/// (see the module docs). Never fails: callers are expected to refuse an
/// invalid plan with [`validate_entries`] first, but if one gets here anyway
/// it is followed in the order given, an entry with a malformed selector
/// selects nothing (so nothing is drained that the admin did not ask for), and
/// a warning says so. Malformed pods are planned from their defaults, with a
/// warning and a [`PodNote::MalformedField`] each.
pub fn build_plan(
    pods: &[PodInfo],
    entries: Option<&[PlanEntry]>,
    opts: &PlanOptions,
) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let mut sorted: Vec<&PodInfo> = pods.iter().collect();
    sorted.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));

    let mut candidates = Vec::new();
    for pod in sorted {
        let pod_type = classify(pod);
        plan.warnings.extend(
            pod.warnings
                .iter()
                .map(|w| format!("pod {}/{}: {w}", pod.namespace, pod.name)),
        );
        if let Some(reason) = skip_reason(pod, opts) {
            plan.skipped.push(skipped(pod, pod_type, reason));
            continue;
        }
        if let Some(w) = odd_opt_out(pod) {
            // Drained like any pod, but a likely typo of the opt-out is said
            // out loud: its owner meant to keep it, and would not know.
            plan.warnings
                .push(format!("pod {}/{}: {w}", pod.namespace, pod.name));
        }
        if pod_type != PodType::Static && matches!(pod.phase.as_str(), "Succeeded" | "Failed") {
            let mut planned = planned(pod, pod_type);
            planned.action = PodAction::Delete;
            plan.completed.push(planned);
        } else if pod_type == PodType::DaemonSet && tolerates_drain_taint(pod, opts) {
            plan.skipped
                .push(skipped(pod, pod_type, SkipReason::ToleratesDrainTaint));
        } else {
            candidates.push((pod, pod_type));
        }
    }

    let stages = match entries {
        None => default_stages(&candidates),
        Some(entries) => {
            if let Err(e) = validate_entries(entries) {
                plan.warnings.push(format!(
                    "{e} (following the entries as given; an entry with a malformed selector selects no pods)"
                ));
            }
            entry_stages(&candidates, entries, &mut plan)
        }
    };
    plan.stages = stages
        .into_iter()
        .filter(|s| !s.pods.is_empty())
        .enumerate()
        .map(|(index, stage)| Stage { index, ..stage })
        .collect();
    plan
}

/// The default plan: one stage per (type, priority) present, in that order.
fn default_stages(candidates: &[(&PodInfo, PodType)]) -> Vec<Stage> {
    let mut groups: BTreeMap<(PodType, i32), Vec<PlannedPod>> = BTreeMap::new();
    for (pod, pod_type) in candidates {
        groups
            .entry((*pod_type, pod.priority))
            .or_default()
            .push(planned(pod, *pod_type));
    }
    groups
        .into_iter()
        .map(|((pod_type, priority), pods)| Stage {
            index: 0,
            pod_type,
            priority,
            label: stage_label(pod_type, priority, None),
            entry: None,
            pods,
        })
        .collect()
}

/// One stage per entry; each pod goes to the first entry that selects it.
fn entry_stages(
    candidates: &[(&PodInfo, PodType)],
    entries: &[PlanEntry],
    plan: &mut DrainPlan,
) -> Vec<Stage> {
    let mut stages: Vec<Stage> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| Stage {
            index: 0,
            pod_type: e.pod_type,
            priority: e.pod_priority,
            label: stage_label(e.pod_type, e.pod_priority, e.pod_selector.as_ref()),
            entry: Some(i),
            pods: Vec::new(),
        })
        .collect();
    let mut broken = vec![false; entries.len()];
    for (pod, pod_type) in candidates {
        let mut taken = false;
        for (i, entry) in entries.iter().enumerate() {
            if broken[i] || entry.pod_type != *pod_type || pod.priority > entry.pod_priority {
                continue;
            }
            let selected = match &entry.pod_selector {
                None => true,
                Some(sel) => match selector_matches(sel, &pod.labels) {
                    Ok(m) => m,
                    Err(e) => {
                        broken[i] = true;
                        plan.warnings
                            .push(format!("drain plan entry {i} selects no pods: {e}"));
                        false
                    }
                },
            };
            if selected {
                stages[i].pods.push(planned(pod, *pod_type));
                taken = true;
                break;
            }
        }
        if !taken {
            plan.skipped
                .push(skipped(pod, *pod_type, SkipReason::NotInPlan));
        }
    }
    stages
}

/// The rules that keep a pod on the node whatever the plan says.
fn skip_reason(pod: &PodInfo, opts: &PlanOptions) -> Option<SkipReason> {
    if let Some((ns, name)) = &opts.own_pod
        && pod.namespace == *ns
        && pod.name == *name
    {
        return Some(SkipReason::OwnPod);
    }
    let opt_out = |source: &str, key: &str| SkipReason::OptOut {
        label_or_annotation: format!("{source} {key}=skip"),
    };
    if pod.labels.get(OPT_OUT_KEY).is_some_and(|v| v == "skip") {
        return Some(opt_out("label", OPT_OUT_KEY));
    }
    if pod
        .annotations
        .get(OPT_OUT_KEY)
        .is_some_and(|v| v == "skip")
    {
        return Some(opt_out("annotation", OPT_OUT_KEY));
    }
    if pod
        .labels
        .get(CAPI_OPT_OUT_LABEL)
        .is_some_and(|v| v == "skip")
    {
        return Some(opt_out("label", CAPI_OPT_OUT_LABEL));
    }
    None
}

/// The opt-out keys a pod carries, with where and their value.
fn opt_out_values(pod: &PodInfo) -> [(&'static str, &'static str, Option<&String>); 3] {
    [
        ("label", OPT_OUT_KEY, pod.labels.get(OPT_OUT_KEY)),
        ("annotation", OPT_OUT_KEY, pod.annotations.get(OPT_OUT_KEY)),
        (
            "label",
            CAPI_OPT_OUT_LABEL,
            pod.labels.get(CAPI_OPT_OUT_LABEL),
        ),
    ]
}

/// The value that makes a pod waited for instead of evicted.
pub const WAIT_COMPLETED: &str = "wait-completed";

/// Where a pod asks to be waited for until it completes, e.g.
/// `label cluster.x-k8s.io/drain=wait-completed`.
pub fn wait_completed(pod: &PodInfo) -> Option<String> {
    opt_out_values(pod)
        .into_iter()
        .find(|(_, _, v)| v.is_some_and(|v| v == WAIT_COMPLETED))
        .map(|(source, key, _)| format!("{source} {key}={WAIT_COMPLETED}"))
}

/// An opt-out key with a value other than `skip` or `wait-completed`,
/// which does not opt out.
fn odd_opt_out(pod: &PodInfo) -> Option<String> {
    opt_out_values(pod)
        .into_iter()
        .find_map(|(source, key, value)| {
            value.filter(|v| *v != "skip" && *v != WAIT_COMPLETED).map(|v| {
                format!(
                    "{source} {key}={v:?} does not opt out (only \"skip\" does; \"{WAIT_COMPLETED}\" waits for it to finish); the pod is drained"
                )
            })
        })
}

fn tolerates_drain_taint(pod: &PodInfo, opts: &PlanOptions) -> bool {
    pod.tolerations
        .iter()
        .any(|t| tolerates(t, &opts.drain_taint_key, "", &opts.drain_taint_effect))
}

fn planned(pod: &PodInfo, pod_type: PodType) -> PlannedPod {
    let mut notes = Vec::new();
    // A DaemonSet pod always has a controller, and a static pod comes back
    // from its stashed manifest: "not recreated" only concerns Default pods.
    if pod_type == PodType::Default && pod.controller().is_none() {
        notes.push(PodNote::NoController);
    }
    if pod.has_empty_dir {
        notes.push(PodNote::EmptyDir);
    }
    notes.extend(pod.warnings.iter().cloned().map(PodNote::MalformedField));
    PlannedPod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        pod_type,
        priority: pod.priority,
        action: if pod.deleting {
            PodAction::WaitTerminating
        } else if pod_type != PodType::Static && wait_completed(pod).is_some() {
            PodAction::WaitCompleted
        } else {
            PodAction::Evict
        },
        notes,
        grace_seconds: pod.termination_grace_seconds,
        owner: pod.owner.clone(),
    }
}

fn skipped(pod: &PodInfo, pod_type: PodType, reason: SkipReason) -> SkippedPod {
    SkippedPod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        pod_type,
        reason,
    }
}

/// `Default ≤ 1000`, `Default ≤ 2000000000 (system-cluster-critical)`,
/// `DaemonSet ≤ 0, app=web,tier in (a,b)`.
fn stage_label(pod_type: PodType, priority: i32, selector: Option<&LabelSelector>) -> String {
    let mut label = format!("{pod_type} ≤ {priority}");
    if well_known_priority("system-cluster-critical") == Some(priority) {
        label.push_str(" (system-cluster-critical)");
    } else if well_known_priority("system-node-critical") == Some(priority) {
        label.push_str(" (system-node-critical)");
    }
    if let Some(sel) = selector {
        label.push_str(", ");
        label.push_str(&selector_text(sel));
    }
    label
}

/// A selector in kubectl's string syntax; an empty one reads "all labels".
/// Not kube's `Selector` display: that sorts and dedups a set's values,
/// and the label should show them as the plan wrote them.
fn selector_text(sel: &LabelSelector) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for req in sel.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default().join(",");
        parts.push(match req.operator.as_str() {
            "In" => format!("{} in ({values})", req.key),
            "NotIn" => format!("{} notin ({values})", req.key),
            "Exists" => req.key.clone(),
            "DoesNotExist" => format!("!{}", req.key),
            other => format!("{} {other} ({values})", req.key),
        });
    }
    if parts.is_empty() {
        "all labels".to_string()
    } else {
        parts.join(",")
    }
}
