//! The PV controller's binding, for volumes and claims that name each
//! other: a claim naming a volume (`spec.volumeName`) gets the volume's
//! `claimRef`, a volume naming a claim (`spec.claimRef`) gets the claim's
//! `volumeName`, and both then read `Bound`. A volume whose claim is gone
//! is `Released`, a claim whose volume is gone `Lost`. Nothing is
//! provisioned, and a claim naming no volume binds only to a volume that
//! names it.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{CONTROLLER_MANAGER, write};
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::Part;

/// Whether the PV controller set a volume's claimRef (it did not come so).
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a claim: the PV controller finished binding it.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// Binds what names each other, then brings every phase up to date.
pub(super) fn bind(sim: &SimState) {
    let (pvs, claims) = lists(sim);
    for claim in claims.iter().filter(|c| !meta::is_terminating(c)) {
        let named = claim["spec"]["volumeName"].as_str().unwrap_or("");
        if named.is_empty() {
            // A volume made for this claim (pre-bound) gives it its name.
            let made_for = pvs
                .iter()
                .find(|pv| !meta::is_terminating(pv) && names_claim(pv, claim));
            if let Some(pv) = made_for {
                write(
                    sim,
                    &Gr::pvcs(),
                    claim,
                    Part::Main,
                    CONTROLLER_MANAGER,
                    |c| {
                        c["spec"]["volumeName"] = json!(meta::name(pv));
                    },
                );
            }
            continue;
        }
        let Some(pv) = pvs.iter().find(|pv| meta::name(pv) == named) else {
            continue;
        };
        let claim_ref = &pv["spec"]["claimRef"];
        let unclaimed = claim_ref.is_null();
        let uid_missing =
            names_claim(pv, claim) && claim_ref["uid"].as_str().is_none_or(str::is_empty);
        if !meta::is_terminating(pv) && (unclaimed || uid_missing) {
            write(sim, &Gr::pvs(), pv, Part::Main, CONTROLLER_MANAGER, |v| {
                v["spec"]["claimRef"] = json!({
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": meta::namespace(claim), "name": meta::name(claim),
                    "uid": meta::uid(claim),
                    "resourceVersion": claim["metadata"]["resourceVersion"],
                });
                if unclaimed {
                    v["metadata"]["annotations"][BOUND_BY_CONTROLLER] = json!("yes");
                }
            });
        }
    }
    let (pvs, claims) = lists(sim);
    for pv in &pvs {
        let phase = volume_phase(pv, &claims);
        if pv["status"]["phase"] != phase {
            write(sim, &Gr::pvs(), pv, Part::Status, CONTROLLER_MANAGER, |v| {
                v["status"] = json!({"phase": phase, "lastPhaseTransitionTime": meta::now_time()});
            });
        }
    }
    for claim in &claims {
        let status = claim_status(claim, &pvs);
        if claim["status"]["phase"] != status["phase"]
            || claim["status"]["capacity"] != status["capacity"]
            || claim["status"]["accessModes"] != status["accessModes"]
        {
            write(
                sim,
                &Gr::pvcs(),
                claim,
                Part::Status,
                CONTROLLER_MANAGER,
                |c| {
                    c["status"] = status.clone();
                },
            );
        }
        if status["phase"] == "Bound" && meta::annotation(claim, BIND_COMPLETED).is_none() {
            // Read apart: the store's lock must not be held while writing.
            let now = sim
                .store()
                .get(&Gr::pvcs(), meta::namespace(claim), meta::name(claim));
            if let Some(now) = now {
                write(
                    sim,
                    &Gr::pvcs(),
                    &now,
                    Part::Main,
                    CONTROLLER_MANAGER,
                    |c| {
                        c["metadata"]["annotations"][BIND_COMPLETED] = json!("yes");
                    },
                );
            }
        }
    }
}

fn lists(sim: &SimState) -> (Vec<Arc<Value>>, Vec<Arc<Value>>) {
    let store = sim.store();
    (store.list(&Gr::pvs(), None), store.list(&Gr::pvcs(), None))
}

/// Whether `pv`'s claimRef names `claim` (by namespace and name, and by
/// uid when it has one).
pub(super) fn names_claim(pv: &Value, claim: &Value) -> bool {
    let r = &pv["spec"]["claimRef"];
    r["namespace"].as_str().unwrap_or("default") == meta::namespace(claim)
        && r["name"].as_str() == Some(meta::name(claim))
        && r["uid"]
            .as_str()
            .is_none_or(|u| u.is_empty() || u == meta::uid(claim))
}

/// Available (no claim, or a pre-bound claim not there yet), Bound (its
/// claim names it back), Released (the claim it was bound to is gone).
fn volume_phase(pv: &Value, claims: &[Arc<Value>]) -> &'static str {
    let r = &pv["spec"]["claimRef"];
    if r.is_null() {
        return "Available";
    }
    let was_bound = r["uid"].as_str().is_some_and(|u| !u.is_empty());
    let claim = claims.iter().find(|c| {
        meta::namespace(c) == r["namespace"].as_str().unwrap_or("default")
            && Some(meta::name(c)) == r["name"].as_str()
    });
    match claim {
        Some(c) if names_claim(pv, c) => match c["spec"]["volumeName"].as_str() {
            Some(v) if v == meta::name(pv) && was_bound => "Bound",
            Some(v) if !v.is_empty() && v != meta::name(pv) && was_bound => "Released",
            _ => "Available",
        },
        _ if was_bound => "Released",
        _ => "Available",
    }
}

/// Bound (with the volume's capacity and access modes) when the volume it
/// names is bound to it; Lost when a volume it was bound to is gone or
/// taken; Pending otherwise.
fn claim_status(claim: &Value, pvs: &[Arc<Value>]) -> Value {
    let named = claim["spec"]["volumeName"].as_str().unwrap_or("");
    let was_bound = matches!(claim["status"]["phase"].as_str(), Some("Bound" | "Lost"));
    let pv = pvs
        .iter()
        .find(|pv| !named.is_empty() && meta::name(pv) == named);
    match pv {
        Some(pv)
            if names_claim(pv, claim)
                && pv["spec"]["claimRef"]["uid"].as_str() == Some(meta::uid(claim)) =>
        {
            json!({
                "phase": "Bound",
                "accessModes": pv["spec"]["accessModes"],
                "capacity": pv["spec"]["capacity"],
            })
        }
        Some(pv) if was_bound && !pv["spec"]["claimRef"].is_null() && !names_claim(pv, claim) => {
            json!({"phase": "Lost"})
        }
        None if was_bound => json!({"phase": "Lost"}),
        _ => json!({"phase": "Pending"}),
    }
}
