//! The `pods/eviction` subresource with Kubernetes' PodDisruptionBudget
//! arithmetic: minAvailable / maxUnavailable as numbers or percentages,
//! healthy = Ready and not terminating, 429 with a `DisruptionBudget` cause
//! when the budget allows no disruption, 500 when several budgets match.

use serde_json::Value;

use super::errors::ApiError;
use super::meta;
use super::resources::Gr;
use super::select::selector_object_matches;
use super::state::SimState;
use super::store::Store;
use super::verbs::{self, DeleteOptions};

/// What a PodDisruptionBudget allows right now, as its status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetStatus {
    pub expected_pods: i64,
    pub current_healthy: i64,
    pub desired_healthy: i64,
    pub disruptions_allowed: i64,
}

/// Evicts a pod if its disruption budget allows it.
pub fn evict(sim: &SimState, ns: &str, name: &str, body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the Eviction must be a JSON object"));
    }
    if let Some(n) = body["metadata"]["name"].as_str()
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {name} != {n}"
        )));
    }
    let opts = DeleteOptions::from_json(&body["deleteOptions"])?;
    let decision = {
        let store = sim.store();
        let pod = store
            .get(&Gr::pods(), ns, name)
            .ok_or_else(|| ApiError::not_found(&Gr::pods(), name))?;
        check(&store, &pod)
    };
    decision?;
    let def = sim
        .store()
        .resource(&Gr::pods())
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    verbs::delete(sim, &def, ns, name, &opts).map(|_| ())
}

/// Whether the disruption budgets covering `pod` allow evicting it now.
pub fn check(store: &Store, pod: &Value) -> Result<(), ApiError> {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    // Pods that are not running, or are already going, do not count against
    // a budget.
    if matches!(phase, "Succeeded" | "Failed" | "Pending") || meta::is_terminating(pod) {
        return Ok(());
    }
    let ns = meta::namespace(pod);
    let pdbs: Vec<_> = store
        .list(&Gr::pdbs(), Some(ns))
        .into_iter()
        .filter(|p| selector_object_matches(&p["spec"]["selector"], pod))
        .collect();
    let pdb = match pdbs.as_slice() {
        [] => return Ok(()),
        [one] => one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let st = budget_status(store, pdb);
    if !meta::pod_ready(pod) {
        let always = pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow";
        if always || st.current_healthy >= st.desired_healthy {
            return Ok(());
        }
    } else if st.disruptions_allowed > 0 {
        return Ok(());
    }
    Err(ApiError::too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
    )
    .with_cause(
        "DisruptionBudget",
        &format!(
            "The disruption budget {} needs {} healthy pods and has {} currently",
            meta::name(pdb),
            st.desired_healthy,
            st.current_healthy
        ),
        "",
    ))
}

/// The disruption controller's arithmetic for one budget, from the live pods.
pub fn budget_status(store: &Store, pdb: &Value) -> BudgetStatus {
    let ns = meta::namespace(pdb);
    let pods: Vec<_> = store
        .list(&Gr::pods(), Some(ns))
        .into_iter()
        .filter(|p| selector_object_matches(&pdb["spec"]["selector"], p))
        .collect();
    let healthy = pods
        .iter()
        .filter(|p| !meta::is_terminating(p) && meta::pod_ready(p))
        .count() as i64;
    let spec = &pdb["spec"];
    let (expected, desired) = if !spec["maxUnavailable"].is_null() {
        let expected = expected_scale(store, &pods);
        let max = scaled(&spec["maxUnavailable"], expected);
        (expected, (expected - max).max(0))
    } else if !spec["minAvailable"].is_null() {
        match &spec["minAvailable"] {
            Value::Number(n) => (pods.len() as i64, n.as_i64().unwrap_or(0)),
            v => {
                let expected = expected_scale(store, &pods);
                (expected, scaled(v, expected))
            }
        }
    } else {
        (pods.len() as i64, pods.len() as i64)
    };
    BudgetStatus {
        expected_pods: expected,
        current_healthy: healthy,
        desired_healthy: desired,
        disruptions_allowed: (healthy - desired).max(0),
    }
}

/// An int-or-percent against a total, rounded up as Kubernetes does for
/// budgets.
fn scaled(v: &Value, total: i64) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => match s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
        {
            Some(pct) => (pct * total + 99) / 100,
            None => s.trim().parse().unwrap_or(0),
        },
        _ => 0,
    }
}

/// The number of pods the budget's pods' controllers want: the sum of the
/// replicas of each distinct ReplicaSet. Pods of other controllers, or of
/// none, count one each (the real controller needs a scale subresource and
/// reports an error for those; the simulator is lenient there).
fn expected_scale(store: &Store, pods: &[std::sync::Arc<Value>]) -> i64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    for p in pods {
        match meta::controller_of(p) {
            Some(("ReplicaSet", rs_name, uid)) => {
                if seen.insert(uid.to_string()) {
                    total += store
                        .get(&Gr::replicasets(), meta::namespace(p), rs_name)
                        .and_then(|rs| rs["spec"]["replicas"].as_i64())
                        .unwrap_or(1);
                }
            }
            _ => {
                if !meta::is_terminating(p) {
                    total += 1;
                }
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled(&json!("50%"), 3), 2);
        assert_eq!(scaled(&json!("10%"), 10), 1);
        assert_eq!(scaled(&json!("34%"), 3), 2);
        assert_eq!(scaled(&json!(2), 10), 2);
        assert_eq!(scaled(&json!("0%"), 10), 0);
        assert_eq!(scaled(&json!("bogus"), 10), 0);
    }
}
