//! The StatefulSet controller: pods named `<set>-<ordinal>`, created in
//! order (`OrderedReady`: ordinal i only once every lower one is Running and
//! Ready) or all at once (`Parallel`), removed from the highest ordinal
//! down. A pod that is gone comes back under the same name, wherever the
//! scheduler puts it: after a drain, on another node — the pod a drain that
//! waits by name (kured's "drain stuck on a fixed-name pod") mistakes for the
//! one it evicted.
//!
//! A changed template rolls out as upstream's RollingUpdate does (highest
//! ordinal first, one pod at a time, down to `partition`); with `OnDelete`
//! only pods made after the change get it.
//!
//! Differences from upstream, on purpose: no ControllerRevision objects
//! (the revision is named from the template's hash), no
//! PersistentVolumeClaims, no `maxUnavailable` for rolling updates and no
//! `minReadySeconds`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::INITIAL_NODE_ANNOTATION;
use super::pods::{create_pod, finished, new_pod, owned_pods, running_and_ready, template_hash};
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::{self, DeleteOptions, write_status};

const MANAGER: &str = "statefulset-controller";

/// The label that names the revision a StatefulSet pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The ordinal of a pod of the set `set`, from its name.
fn ordinal(set: &str, pod: &str) -> Option<i64> {
    pod.strip_prefix(set)?
        .strip_prefix('-')?
        .parse::<i64>()
        .ok()
        .filter(|o| *o >= 0)
}

/// The pod for `ordinal`, from the set's current template.
fn set_pod(sts: &Value, ordinal: i64, revision: &str, node: Option<&str>) -> Value {
    let set = meta::name(sts);
    let name = format!("{set}-{ordinal}");
    let mut pod = new_pod(sts, "apps/v1", "StatefulSet", node, vec![]);
    if let Some(m) = pod["metadata"].as_object_mut() {
        m.remove("generateName");
    }
    pod["metadata"]["name"] = json!(name);
    if !pod["metadata"]["labels"].is_object() {
        pod["metadata"]["labels"] = json!({});
    }
    let labels = &mut pod["metadata"]["labels"];
    labels["statefulset.kubernetes.io/pod-name"] = json!(name);
    labels["apps.kubernetes.io/pod-index"] = json!(ordinal.to_string());
    labels[REVISION_LABEL] = json!(revision);
    pod["spec"]["hostname"] = json!(name);
    if let Some(service) = sts["spec"]["serviceName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        pod["spec"]["subdomain"] = json!(service);
    }
    pod
}

/// Brings one StatefulSet's pods toward its spec and writes its status.
/// `placed` remembers which ordinals were made once: only an ordinal's
/// first pod goes to the set's initial node.
pub(super) fn statefulset(sim: &SimState, ns: &str, name: &str, placed: &mut HashSet<String>) {
    let Some(sts) = sim.store().get(&Gr::statefulsets(), ns, name) else {
        return;
    };
    if meta::is_terminating(&sts) {
        return;
    }
    let Some(pods_def) = sim.store().resource(&Gr::pods()) else {
        return;
    };
    let spec = &sts["spec"];
    let replicas = spec["replicas"].as_i64().unwrap_or(1).max(0);
    let start = spec["ordinals"]["start"].as_i64().unwrap_or(0).max(0);
    let ordered = spec["podManagementPolicy"].as_str() != Some("Parallel");
    let revision = format!("{name}-{}", template_hash(&spec["template"]));
    let initial = meta::annotation(&sts, INITIAL_NODE_ANNOTATION).map(str::to_string);
    let pods: BTreeMap<i64, Arc<Value>> = owned_pods(sim, ns, meta::uid(&sts))
        .into_iter()
        .filter_map(|p| ordinal(name, meta::name(&p)).map(|o| (o, p)))
        .collect();
    let delete = |pod: &Value| {
        let opts = DeleteOptions {
            uid: Some(meta::uid(pod).to_string()),
            ..Default::default()
        };
        if let Err(e) = verbs::delete(sim, &pods_def, ns, meta::name(pod), &opts) {
            tracing::debug!(pod = %meta::name(pod), error = %e.message, "{MANAGER} could not delete a pod");
        }
    };

    // The replicas, lowest ordinal first. In order, a pod that is missing,
    // going or not yet Running and Ready holds back every higher one.
    let mut all_healthy = true;
    for ord in start..start + replicas {
        let current = pods.get(&ord);
        let healthy = current.is_some_and(|p| !meta::is_terminating(p) && running_and_ready(p));
        all_healthy &= healthy;
        match current {
            Some(p) if finished(p) => {
                // A pod that ran to completion is deleted and made again
                // (a finished pod is removed at once, so the name is free).
                delete(p);
                create(sim, &sts, ord, &revision, &initial, placed);
            }
            None => create(sim, &sts, ord, &revision, &initial, placed),
            Some(_) => {}
        }
        if ordered && !healthy {
            break;
        }
    }

    // Pods beyond the count, highest ordinal first; in order only once the
    // replicas are all healthy, one at a time. An ordered set that waits
    // for anything here goes no further this pass.
    let condemned: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|(o, _)| **o < start || **o >= start + replicas)
        .map(|(_, p)| p)
        .rev()
        .collect();
    let mut waiting = ordered && !all_healthy;
    for pod in condemned {
        if ordered {
            waiting = true;
            if !all_healthy || meta::is_terminating(pod) {
                break;
            }
        } else if meta::is_terminating(pod) {
            continue;
        }
        delete(pod);
        if ordered {
            break;
        }
    }

    // A rolling update: the highest-ordinal pod of an old revision goes
    // (and comes back from the new template), once every pod above it is
    // healthy; `partition` keeps the lower ordinals as they are.
    let strategy = &spec["updateStrategy"];
    if !waiting && strategy["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate" {
        let partition = strategy["rollingUpdate"]["partition"]
            .as_i64()
            .unwrap_or(0)
            .max(0);
        for ord in (start + partition..start + replicas).rev() {
            let Some(pod) = pods.get(&ord) else {
                break;
            };
            if meta::label(pod, REVISION_LABEL) != Some(revision.as_str())
                && !meta::is_terminating(pod)
            {
                delete(pod);
                break;
            }
            if meta::is_terminating(pod) || !running_and_ready(pod) {
                break;
            }
        }
    }

    write_set_status(sim, &sts, &revision);
}

fn create(
    sim: &SimState,
    sts: &Value,
    ord: i64,
    revision: &str,
    initial: &Option<String>,
    placed: &mut HashSet<String>,
) {
    let first = placed.insert(format!("{}/{ord}", meta::uid(sts)));
    let node = initial.as_deref().filter(|_| first);
    create_pod(sim, MANAGER, set_pod(sts, ord, revision, node));
}

/// Status from the pods as they are after this pass, counted as upstream
/// counts them (a terminating pod is still one of the replicas).
fn write_set_status(sim: &SimState, sts: &Value, revision: &str) {
    let (ns, name) = (meta::namespace(sts), meta::name(sts));
    let pods: Vec<Arc<Value>> = owned_pods(sim, ns, meta::uid(sts))
        .into_iter()
        .filter(|p| ordinal(name, meta::name(p)).is_some())
        .collect();
    let created = pods
        .iter()
        .filter(|p| p["status"]["phase"].is_string())
        .count();
    let ready = pods.iter().filter(|p| running_and_ready(p)).count();
    let updated = pods
        .iter()
        .filter(|p| !meta::is_terminating(p) && meta::label(p, REVISION_LABEL) == Some(revision))
        .count();
    let wanted = sts["spec"]["replicas"].as_i64().unwrap_or(1).max(0);
    // The current revision catches up once every replica runs the update.
    let current_revision = match sts["status"]["currentRevision"].as_str() {
        Some(cur) if updated as i64 != wanted => cur.to_string(),
        _ => revision.to_string(),
    };
    let current = pods
        .iter()
        .filter(|p| {
            !meta::is_terminating(p)
                && meta::label(p, REVISION_LABEL) == Some(current_revision.as_str())
        })
        .count();
    let status = json!({
        "observedGeneration": sts["metadata"]["generation"],
        "replicas": created,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": current,
        "updatedReplicas": updated,
        "currentRevision": current_revision,
        "updateRevision": revision,
        "collisionCount": 0,
    });
    write_status(sim, &Gr::statefulsets(), ns, name, MANAGER, status);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_the_name_of_the_sets_own_pods() {
        assert_eq!(ordinal("db", "db-0"), Some(0));
        assert_eq!(ordinal("db", "db-12"), Some(12));
        assert_eq!(ordinal("db", "db-x"), None);
        assert_eq!(ordinal("db", "dbx-1"), None);
        assert_eq!(ordinal("db", "db--1"), None);
        assert_eq!(ordinal("db-a", "db-a-3"), Some(3));
    }
}
