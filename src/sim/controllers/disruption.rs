//! The disruption controller: recomputes each budget's status from the
//! live pods and the disruptions the Eviction API recorded, expiring those
//! not confirmed by a deletion within two minutes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::sim::eviction::{DISRUPTED_POD_TIMEOUT_SECS, budget_status};
use crate::sim::meta;
use crate::sim::resources::Gr;
use crate::sim::select::selector_object_matches;
use crate::sim::state::SimState;
use crate::sim::verbs::write_status;

/// Recomputes the status of every budget in a namespace; returns how soon
/// to look again for a recorded disruption to expire, if any is pending.
pub(super) fn disruption(sim: &SimState, ns: &str) -> Option<Duration> {
    let pdbs = sim.store().list(&Gr::pdbs(), Some(ns));
    let mut recheck: Option<Duration> = None;
    for pdb in pdbs {
        let (st, disrupted) = {
            let store = sim.store();
            budget_status(&store, &pdb)
        };
        let any = sim
            .store()
            .list(&Gr::pods(), Some(ns))
            .iter()
            .any(|p| selector_object_matches(&pdb["spec"]["selector"], p));
        for at in disrupted.as_object().into_iter().flat_map(|m| m.values()) {
            let age = at.as_str().and_then(meta::age_secs).unwrap_or(0);
            let left = Duration::from_secs(
                u64::try_from(DISRUPTED_POD_TIMEOUT_SECS - age).unwrap_or(0) + 1,
            );
            recheck = Some(recheck.map_or(left, |r| r.min(left)));
        }
        let allowed = st.disruptions_allowed > 0;
        let status = json!({
            "currentHealthy": st.current_healthy,
            "desiredHealthy": st.desired_healthy,
            "disruptionsAllowed": st.disruptions_allowed,
            "expectedPods": st.expected_pods,
            "disruptedPods": disrupted,
            "observedGeneration": pdb["metadata"]["generation"],
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": if allowed { "True" } else { "False" },
                "reason": if allowed { "SufficientPods" } else if any { "InsufficientPods" } else { "NoPods" },
                "message": "",
                "observedGeneration": pdb["metadata"]["generation"],
                "lastTransitionTime": meta::now_time(),
            }],
        });
        // Only write when something moved, so the condition time is stable.
        let same = |k: &str| pdb["status"][k] == status[k];
        let no_disrupted = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
        let disrupted_same = pdb["status"]["disruptedPods"] == status["disruptedPods"]
            || (no_disrupted(&pdb["status"]["disruptedPods"])
                && no_disrupted(&status["disruptedPods"]));
        if [
            "disruptionsAllowed",
            "currentHealthy",
            "expectedPods",
            "desiredHealthy",
            "observedGeneration",
        ]
        .into_iter()
        .all(same)
            && disrupted_same
        {
            continue;
        }
        // A merge patch keeps keys it does not name: a pod no longer
        // disrupted is removed by naming it with null.
        let mut patch = status;
        if let Some(old) = pdb["status"]["disruptedPods"].as_object() {
            for k in old.keys() {
                if patch["disruptedPods"].get(k).is_none() {
                    patch["disruptedPods"][k] = Value::Null;
                }
            }
        }
        write_status(
            sim,
            &Gr::pdbs(),
            ns,
            meta::name(&pdb),
            "disruption-controller",
            patch,
        );
    }
    recheck
}
