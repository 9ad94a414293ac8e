//! What must hold of every drain plan, whatever the pods and entries: the
//! checks the `plan`, `pod` and `nodemaintenance` targets share.
#![allow(dead_code)]

use maintd::drain::plan::{
    CAPI_OPT_OUT_LABEL, DrainPlan, MIRROR_ANNOTATION, OPT_OUT_KEY, PlanEntry, PlanOptions,
    PodAction, PodInfo, PodType, SkipReason, classify, selector_matches, tolerates,
    validate_entries,
};

/// The admin's word that keeps `pod` on the node, if any.
fn opted_out(pod: &PodInfo) -> bool {
    pod.labels.get(OPT_OUT_KEY).is_some_and(|v| v == "skip")
        || pod
            .annotations
            .get(OPT_OUT_KEY)
            .is_some_and(|v| v == "skip")
        || pod
            .labels
            .get(CAPI_OPT_OUT_LABEL)
            .is_some_and(|v| v == "skip")
}

fn own(pod: &PodInfo, opts: &PlanOptions) -> bool {
    opts.own_pod
        .as_ref()
        .is_some_and(|(ns, name)| pod.namespace == *ns && pod.name == *name)
}

fn tolerates_drain_taint(pod: &PodInfo, opts: &PlanOptions) -> bool {
    pod.tolerations
        .iter()
        .any(|t| tolerates(t, &opts.drain_taint_key, "", &opts.drain_taint_effect))
}

/// Builds the plan for `pods` as the agent does and checks it.
pub fn plan_and_check(pods: &[PodInfo], entries: Option<&[PlanEntry]>, opts: &PlanOptions) {
    let plan = maintd::drain::plan::build_plan(pods, entries, opts);
    check_plan(pods, entries, opts, &plan);
}

/// Every rule of the plan module's docs, as a user of `maintd plan` sees it.
pub fn check_plan(
    pods: &[PodInfo],
    entries: Option<&[PlanEntry]>,
    opts: &PlanOptions,
    plan: &DrainPlan,
) {
    let same = |a: &PodInfo, ns: &str, name: &str, uid: &str| {
        a.namespace == ns && a.name == name && a.uid == uid
    };
    // Each pod is accounted for exactly once: acted on or skipped.
    let acted = plan.pods().count();
    assert_eq!(
        acted + plan.skipped.len(),
        pods.len(),
        "every pod is planned or skipped, once"
    );
    for (i, stage) in plan.stages.iter().enumerate() {
        assert_eq!(stage.index, i, "stages are numbered in order");
        assert!(!stage.pods.is_empty(), "no empty stage");
        assert!(!stage.label.is_empty());
        for p in &stage.pods {
            assert_eq!(p.pod_type, stage.pod_type, "a stage holds one pod type");
            assert!(
                p.priority <= stage.priority,
                "pod {}/{} of priority {} in stage {} of ceiling {}",
                p.namespace,
                p.name,
                p.priority,
                i,
                stage.priority
            );
            assert!(p.grace_seconds >= 0, "a grace period is never negative");
            assert_ne!(
                p.action,
                PodAction::Delete,
                "stages evict or wait, never delete"
            );
            if p.action == PodAction::WaitCompleted {
                assert_ne!(p.pod_type, PodType::Static);
            }
            // Some input pod of this identity may be drained by this stage.
            let ok = pods.iter().any(|pod| {
                same(pod, &p.namespace, &p.name, &p.uid)
                    && !opted_out(pod)
                    && !own(pod, opts)
                    && classify(pod) == p.pod_type
                    && (p.pod_type != PodType::DaemonSet || !tolerates_drain_taint(pod, opts))
                    && match (entries, stage.entry) {
                        (Some(es), Some(e)) => es[e]
                            .pod_selector
                            .as_ref()
                            .is_none_or(|sel| selector_matches(sel, &pod.labels).unwrap_or(false)),
                        (None, None) => true,
                        _ => false,
                    }
            });
            assert!(
                ok,
                "stage {i} drains {}/{} ({}), which the rules keep on the node",
                p.namespace, p.name, p.uid
            );
        }
    }
    for p in &plan.completed {
        assert_eq!(p.action, PodAction::Delete);
        assert_ne!(p.pod_type, PodType::Static, "a static pod is only stashed");
        assert!(pods.iter().any(|pod| {
            same(pod, &p.namespace, &p.name, &p.uid)
                && !opted_out(pod)
                && !own(pod, opts)
                && matches!(pod.phase.as_str(), "Succeeded" | "Failed")
        }));
    }
    for s in &plan.skipped {
        assert!(!s.reason.to_string().is_empty());
        if let SkipReason::OptOut {
            label_or_annotation,
        } = &s.reason
        {
            assert!(label_or_annotation.ends_with("=skip"));
        }
    }
    // Mirror pods are static pods: only ever in a Static stage.
    for p in plan.pods() {
        let mirrored = pods.iter().any(|pod| {
            same(pod, &p.namespace, &p.name, &p.uid)
                && pod.annotations.contains_key(MIRROR_ANNOTATION)
        });
        let plain = pods.iter().any(|pod| {
            same(pod, &p.namespace, &p.name, &p.uid)
                && !pod.annotations.contains_key(MIRROR_ANNOTATION)
        });
        if mirrored && !plain {
            assert_eq!(
                p.pod_type,
                PodType::Static,
                "a mirror pod is drained as static"
            );
        }
    }
    // Stages keep priority order.
    match entries {
        None => {
            for w in plan.stages.windows(2) {
                assert!(
                    (w[0].pod_type, w[0].priority) < (w[1].pod_type, w[1].priority),
                    "default plan: {} before {}",
                    w[0].label,
                    w[1].label
                );
                assert_eq!((w[0].entry, w[1].entry), (None, None));
            }
        }
        Some(es) => {
            for w in plan.stages.windows(2) {
                assert!(w[0].entry < w[1].entry, "stages follow the entries");
            }
            for s in &plan.stages {
                let e = &es[s.entry.expect("an entry's stage names its entry")];
                assert_eq!((s.pod_type, s.priority), (e.pod_type, e.pod_priority));
            }
            if validate_entries(es).is_ok() {
                for w in plan.stages.windows(2) {
                    assert!(
                        (w[0].pod_type, w[0].priority) <= (w[1].pod_type, w[1].priority),
                        "a valid plan drains in type and priority order"
                    );
                }
            } else {
                assert!(
                    !plan.warnings.is_empty(),
                    "an invalid plan is said out loud"
                );
            }
        }
    }
    for w in &plan.warnings {
        assert!(!w.trim().is_empty(), "a warning says something");
    }
    for pod in pods {
        for w in &pod.warnings {
            assert!(!w.trim().is_empty(), "a pod's warning says something");
        }
    }
    // The plan is what `maintd plan` and the status endpoint show.
    serde_json::to_string(plan).expect("a plan serializes");
}

/// `text` as JSON, or None: the watch hands the agent JSON, so text that is
/// not JSON says nothing about the agent.
pub fn json(data: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(data).ok()
}

/// A Vec of JSON values from `v` (an array, or one value).
pub fn values(v: &serde_json::Value) -> Vec<serde_json::Value> {
    match v {
        serde_json::Value::Array(a) => a.clone(),
        serde_json::Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}
