//! The disruption controller: recomputes each budget's status from the
//! live pods and the disruptions the Eviction API recorded, expiring those
//! not confirmed by a deletion within two minutes. Like upstream, it
//! writes the status with an update conditioned on the resourceVersion it
//! read: an eviction that took a disruption in between wins, and the
//! controller looks again.

use std::time::Duration;

use serde_json::{Value, json};

use crate::eviction::{DISRUPTED_POD_TIMEOUT_SECS, StatusWriter, budget_status, write_status};
use crate::meta;
use crate::resources::{Gr, ResourceDef};
use crate::select::selector_object_matches;
use crate::state::SimState;
use crate::verbs::Writer;

/// How soon to look again at a budget whose status write lost a race.
const CONFLICT_RETRY: Duration = Duration::from_millis(20);

/// Recomputes the status of every budget in a namespace; returns how soon
/// to look again (a recorded disruption about to expire, or a write that
/// lost a race), if anything is pending.
pub(super) fn disruption(sim: &SimState, ns: &str) -> Option<Duration> {
    let pdbs = sim.store().list(&Gr::pdbs(), Some(ns));
    let def = sim.store().resource(&Gr::pdbs())?;
    let mut recheck: Option<Duration> = None;
    let mut sooner = |d: Duration| recheck = Some(recheck.map_or(d, |r: Duration| r.min(d)));
    for pdb in pdbs {
        let (counted, any) = {
            let store = sim.store();
            let counted = budget_status(&store, &pdb);
            let any = store
                .list(&Gr::pods(), Some(ns))
                .iter()
                .any(|p| selector_object_matches(&pdb["spec"]["selector"], p));
            (counted, any)
        };
        let (st, disrupted) = match counted {
            Ok(c) => c,
            Err(why) => {
                fail_safe(sim, &def, &pdb, &why);
                continue;
            }
        };
        for at in disrupted.as_object().into_iter().flat_map(|m| m.values()) {
            let age = at.as_str().and_then(meta::age_secs).unwrap_or(0);
            sooner(Duration::from_secs(
                u64::try_from(DISRUPTED_POD_TIMEOUT_SECS - age).unwrap_or(0) + 1,
            ));
        }
        let old = &pdb["status"];
        let allowed = st.disruptions_allowed > 0;
        let reason = if allowed {
            "SufficientPods"
        } else if any {
            "InsufficientPods"
        } else {
            "NoPods"
        };
        let no_disrupted = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
        let unchanged = old["disruptionsAllowed"] == json!(st.disruptions_allowed)
            && old["currentHealthy"] == json!(st.current_healthy)
            && old["desiredHealthy"] == json!(st.desired_healthy)
            && old["expectedPods"] == json!(st.expected_pods)
            && old["observedGeneration"] == pdb["metadata"]["generation"]
            && (old["disruptedPods"] == disrupted
                || (no_disrupted(&old["disruptedPods"]) && no_disrupted(&disrupted)));
        // Only write when something moved, so the condition time is stable.
        if unchanged {
            continue;
        }
        let old_cond = old["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"));
        let status_word = if allowed { "True" } else { "False" };
        let since = match old_cond {
            Some(c) if c["status"] == status_word => c["lastTransitionTime"].clone(),
            _ => json!(meta::now_time()),
        };
        let mut new = (*pdb).clone();
        new["status"] = json!({
            "currentHealthy": st.current_healthy,
            "desiredHealthy": st.desired_healthy,
            "disruptionsAllowed": st.disruptions_allowed,
            "expectedPods": st.expected_pods,
            "disruptedPods": disrupted,
            "observedGeneration": pdb["metadata"]["generation"],
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": status_word,
                "reason": reason,
                "message": "",
                "observedGeneration": pdb["metadata"]["generation"],
                "lastTransitionTime": since,
            }],
        });
        let writer = Writer {
            manager: "disruption-controller".into(),
            force: false,
            user: None,
        };
        match write_status(sim, &def, &pdb, new, &writer, StatusWriter::Controller) {
            Ok(_) => {}
            // The budget changed since it was read (an eviction took a
            // disruption, or its spec moved): recompute from the new one.
            Err(e) if e.code == 409 => sooner(CONFLICT_RETRY),
            Err(e) => {
                tracing::debug!(pdb = %meta::name(&pdb), error = %e.message, "simulated disruption controller could not write status");
            }
        }
    }
    recheck
}

/// What upstream's `failSafe` writes when a budget cannot be counted: no
/// disruption allowed, and a DisruptionAllowed condition saying why; the
/// rest of the status (observedGeneration included) stays as it was. A
/// change of the budget's pods brings the controller back to try again.
fn fail_safe(sim: &SimState, def: &ResourceDef, pdb: &Value, why: &str) {
    let old = &pdb["status"];
    let mut status = if old.is_object() {
        old.clone()
    } else {
        json!({})
    };
    status["disruptionsAllowed"] = json!(0);
    let prev = old["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionAllowed"));
    let since = match prev {
        Some(c) if c["status"] == "False" => c["lastTransitionTime"].clone(),
        _ => json!(meta::now_time()),
    };
    let cond = json!({
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "SyncFailed",
        "message": why,
        "observedGeneration": old["observedGeneration"].as_i64().unwrap_or(0),
        "lastTransitionTime": since,
    });
    let mut conds: Vec<Value> = old["conditions"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter(|c| c["type"] != "DisruptionAllowed")
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    conds.push(cond);
    status["conditions"] = Value::Array(conds);
    if status == *old {
        return;
    }
    tracing::debug!(pdb = %meta::name(pdb), %why, "simulated disruption controller fails safe");
    let mut new = pdb.clone();
    new["status"] = status;
    let writer = Writer {
        manager: "disruption-controller".into(),
        force: false,
        user: None,
    };
    // A conflict means the budget moved; its event brings the controller back.
    let _ = write_status(sim, def, pdb, new, &writer, StatusWriter::Controller);
}
