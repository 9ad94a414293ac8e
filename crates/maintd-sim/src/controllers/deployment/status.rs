//! A Deployment's status, from its ReplicaSets', with the Available and
//! Progressing conditions worded as upstream words them: what `kubectl
//! rollout status` and `kubectl get deploy` read.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{MANAGER, owned_sets, replicas, status_count};
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::write_status;

/// A condition as upstream sets it: the times kept while nothing changes.
fn condition(old: &Value, kind: &str, status: &str, reason: &str, message: &str) -> Value {
    let prev = old["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind));
    let now = json!(meta::now_time());
    let transition = match prev {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => now.clone(),
    };
    let update = match prev {
        Some(c) if c["status"] == status && c["reason"] == reason && c["message"] == message => {
            c["lastUpdateTime"].clone()
        }
        _ => now,
    };
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": update, "lastTransitionTime": transition})
}

pub(super) fn write_deployment_status(
    sim: &SimState,
    d: &Value,
    new_name: &str,
    created: bool,
    unavailable: i64,
) {
    let (new, old) = owned_sets(sim, d, new_name);
    let all: Vec<&Arc<Value>> = new.iter().chain(old.iter()).collect();
    let sum = |key: &str| all.iter().map(|rs| status_count(rs, key)).sum::<i64>();
    let want = replicas(d);
    let spec_total: i64 = all.iter().map(|rs| replicas(rs)).sum();
    let available = sum("availableReplicas");
    let updated = new.as_ref().map_or(0, |rs| status_count(rs, "replicas"));
    let total = sum("replicas");
    let available_cond = if available >= want - unavailable {
        condition(
            d,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
        )
    } else {
        condition(
            d,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    };
    let complete = updated == want && total == want && available == want;
    let progressing = if complete {
        condition(
            d,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            &format!("ReplicaSet {new_name:?} has successfully progressed."),
        )
    } else if created {
        condition(
            d,
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            &format!("Created new replica set {new_name:?}"),
        )
    } else {
        condition(
            d,
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            &format!("ReplicaSet {new_name:?} is progressing."),
        )
    };
    let status = json!({
        "observedGeneration": d["metadata"]["generation"],
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": sum("readyReplicas"),
        "availableReplicas": available,
        "unavailableReplicas": (spec_total - available).max(0),
        "conditions": [available_cond, progressing],
    });
    write_status(
        sim,
        &Gr::deployments(),
        meta::namespace(d),
        meta::name(d),
        MANAGER,
        status,
    );
}
