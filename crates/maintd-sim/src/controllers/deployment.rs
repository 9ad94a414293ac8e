//! The Deployment controller: a ReplicaSet per pod template, named
//! `<deployment>-<pod-template-hash>` and owned by the Deployment, scaled to
//! the Deployment's replicas; a changed template rolls out by scaling the new
//! set up and the old ones down within `maxSurge`/`maxUnavailable`
//! (`Recreate`: the old ones to 0 first). Status and the Available and
//! Progressing conditions are written as upstream words them, which is what
//! `kubectl rollout status` and `kubectl get deploy` read.
//!
//! Differences from upstream: no progress deadline (a rollout never times
//! out), no pause, no `minReadySeconds` (ready is available), no
//! `collisionCount` handling, no proportional scaling of a rollout whose
//! replicas change midway, a rollback reuses the old set without giving it
//! a new revision, and the template hash is the simulator's own.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::pods::{finished, owned_pods, template_hash};
use super::writer;
use crate::meta;
use crate::resources::Gr;
use crate::state::SimState;
use crate::verbs::{self, DeleteOptions, Part, PatchType};

mod status;
use status::write_deployment_status;

const MANAGER: &str = "deployment-controller";

/// The label that ties a ReplicaSet and its pods to one pod template.
pub const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED: &str = "deployment.kubernetes.io/desired-replicas";
const MAX: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations of the Deployment that are not copied to its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED,
    MAX,
];

fn replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}

fn status_count(obj: &Value, key: &str) -> i64 {
    obj["status"][key].as_i64().unwrap_or(0)
}

fn revision_of(rs: &Value) -> i64 {
    meta::annotation(rs, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// An int-or-percent of `total`, rounded up or down.
fn scaled(v: &Value, total: i64, round_up: bool, default_pct: i64) -> i64 {
    let pct = |p: i64| {
        if round_up {
            (p * total + 99) / 100
        } else {
            p * total / 100
        }
    };
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0).max(0),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.trim().parse().ok()) {
            Some(p) => pct(p),
            None => s.trim().parse().unwrap_or(0),
        },
        _ => pct(default_pct),
    }
}

/// (maxSurge, maxUnavailable) in pods, as upstream's `ResolveFenceposts`
/// makes them; `Recreate` allows neither.
fn fenceposts(d: &Value, want: i64) -> (i64, i64) {
    let strategy = &d["spec"]["strategy"];
    if strategy["type"] == "Recreate" {
        return (0, 0);
    }
    let ru = &strategy["rollingUpdate"];
    let surge = scaled(&ru["maxSurge"], want, true, 25);
    let unavailable = scaled(&ru["maxUnavailable"], want, false, 25);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable.min(want))
}

/// Brings one Deployment's ReplicaSets toward its spec and writes its status.
pub(super) fn deployment(sim: &SimState, ns: &str, name: &str) {
    let Some(d) = sim.store().get(&Gr::deployments(), ns, name) else {
        return;
    };
    if meta::is_terminating(&d) {
        return;
    }
    let want = replicas(&d);
    let (surge, unavailable) = fenceposts(&d, want);
    let recreate = d["spec"]["strategy"]["type"] == "Recreate";
    let new_name = format!("{name}-{}", template_hash(&d["spec"]["template"]));
    let (mut new, old) = owned_sets(sim, &d, &new_name);
    let old_total: i64 = old.iter().map(|rs| replicas(rs)).sum();

    let created = new.is_none();
    let new_rs = match new.take() {
        Some(rs) => rs,
        None => {
            // Upstream's NewRSNewReplicas: all at once if nothing else
            // runs, else as many as maxSurge leaves room for; Recreate
            // waits for the old pods to be gone.
            let initial = if recreate {
                if old_total > 0 || old_pods_left(sim, &old) {
                    0
                } else {
                    want
                }
            } else if old_total == 0 {
                want
            } else {
                (want + surge - old_total).clamp(0, want)
            };
            let next_revision = old.iter().map(|rs| revision_of(rs)).max().unwrap_or(0) + 1;
            match create_set(sim, &d, &new_name, initial, next_revision, surge) {
                Some(rs) => rs,
                None => return,
            }
        }
    };

    if recreate {
        for rs in &old {
            scale(sim, rs, 0, want, surge);
        }
        if !old_pods_left(sim, &old) {
            scale(sim, &new_rs, want, want, surge);
        }
    } else if old_total == 0 {
        scale(sim, &new_rs, want, want, surge);
    } else {
        roll(sim, &new_rs, &old, want, surge, unavailable);
    }

    let revision = revision_of(&new_rs).to_string();
    if meta::annotation(&d, REVISION) != Some(revision.as_str()) {
        patch(
            sim,
            &Gr::deployments(),
            &d,
            json!({"metadata": {"annotations": {REVISION: revision}}}),
        );
    }
    forget_history(sim, &d, &old);
    write_deployment_status(sim, &d, &new_name, created, unavailable);
}

/// The Deployment's ReplicaSets: the one for the current template, and the
/// others (oldest first).
fn owned_sets(sim: &SimState, d: &Value, new_name: &str) -> (Option<Arc<Value>>, Vec<Arc<Value>>) {
    let mut sets: Vec<Arc<Value>> = sim
        .store()
        .list(&Gr::replicasets(), Some(meta::namespace(d)))
        .into_iter()
        .filter(|rs| meta::controller_of(rs).is_some_and(|(_, _, uid)| uid == meta::uid(d)))
        .collect();
    sets.sort_by_key(|rs| (revision_of(rs), meta::name(rs).to_string()));
    let new = sets
        .iter()
        .position(|rs| meta::name(rs) == new_name)
        .map(|i| sets.remove(i));
    (new, sets)
}

fn create_set(
    sim: &SimState,
    d: &Value,
    name: &str,
    initial: i64,
    revision: i64,
    surge: i64,
) -> Option<Arc<Value>> {
    let hash = name.rsplit('-').next().unwrap_or_default();
    let mut template = d["spec"]["template"].clone();
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = d["spec"]["selector"].clone();
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let mut annotations: Map<String, Value> = d["metadata"]["annotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let want = replicas(d);
    annotations.insert(REVISION.into(), json!(revision.to_string()));
    annotations.insert(DESIRED.into(), json!(want.to_string()));
    annotations.insert(MAX.into(), json!((want + surge).to_string()));
    let rs = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": meta::namespace(d),
            "labels": template["metadata"]["labels"],
            "annotations": annotations,
            "ownerReferences": [meta::controller_ref("apps/v1", "Deployment", d)],
        },
        "spec": {
            "replicas": initial,
            "minReadySeconds": d["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
            "selector": selector,
            "template": template,
        },
    });
    let def = sim.store().resource(&Gr::replicasets())?;
    match verbs::create(
        sim,
        &def,
        Some(meta::namespace(d)),
        rs,
        &writer(MANAGER),
        false,
    ) {
        Ok(rs) => Some(rs),
        Err(e) => {
            tracing::debug!(replicaset = %name, error = %e.message, "{MANAGER} could not create a ReplicaSet");
            None
        }
    }
}

/// A rolling update step, as upstream's `rolloutRolling`: scale the new set
/// up within maxSurge; if it did not grow, scale the old ones down within
/// maxUnavailable (unhealthy old pods first).
fn roll(sim: &SimState, new: &Value, old: &[Arc<Value>], want: i64, surge: i64, unavailable: i64) {
    let new_spec = replicas(new);
    let old_spec: i64 = old.iter().map(|rs| replicas(rs)).sum();
    let total = new_spec + old_spec;
    let room = (want + surge - total).min(want - new_spec);
    if room > 0 {
        scale(sim, new, new_spec + room, want, surge);
        return;
    }
    let min_available = want - unavailable;
    let new_unavailable = (new_spec - status_count(new, "availableReplicas")).max(0);
    let mut cleanup = total - min_available - new_unavailable;
    if cleanup <= 0 {
        return;
    }
    let mut targets: Vec<i64> = old.iter().map(|rs| replicas(rs)).collect();
    for (rs, target) in old.iter().zip(targets.iter_mut()) {
        let unhealthy = (*target - status_count(rs, "availableReplicas")).max(0);
        let cut = unhealthy.min(cleanup);
        *target -= cut;
        cleanup -= cut;
    }
    let available: i64 = old
        .iter()
        .map(|rs| status_count(rs, "availableReplicas"))
        .sum::<i64>()
        + status_count(new, "availableReplicas");
    let mut down = (available - min_available).max(0);
    for target in targets.iter_mut() {
        let cut = (*target).min(down);
        *target -= cut;
        down -= cut;
    }
    for (rs, target) in old.iter().zip(targets) {
        if target != replicas(rs) {
            scale(sim, rs, target, want, surge);
        }
    }
}

fn scale(sim: &SimState, rs: &Value, to: i64, want: i64, surge: i64) {
    let desired = want.to_string();
    let max = (want + surge).to_string();
    if replicas(rs) == to
        && meta::annotation(rs, DESIRED) == Some(desired.as_str())
        && meta::annotation(rs, MAX) == Some(max.as_str())
    {
        return;
    }
    let body = json!({
        "metadata": {"annotations": {DESIRED: desired, MAX: max}},
        "spec": {"replicas": to},
    });
    patch(sim, &Gr::replicasets(), rs, body);
}

fn patch(sim: &SimState, gr: &Gr, obj: &Value, body: Value) {
    let Some(def) = sim.store().resource(gr) else {
        return;
    };
    let (ns, name) = (meta::namespace(obj), meta::name(obj));
    let res = verbs::patch(
        sim,
        &def,
        ns,
        name,
        Part::Main,
        PatchType::Merge,
        &body,
        &writer(MANAGER),
    );
    if let Err(e) = res {
        tracing::debug!(%name, error = %e.message, "{MANAGER} could not update {gr}");
    }
}

/// Whether any pod of the old sets is still there (Recreate waits for them).
fn old_pods_left(sim: &SimState, old: &[Arc<Value>]) -> bool {
    old.iter().any(|rs| {
        owned_pods(sim, meta::namespace(rs), meta::uid(rs))
            .iter()
            .any(|p| !finished(p))
    })
}

/// Deletes old, empty ReplicaSets beyond `revisionHistoryLimit` (10).
fn forget_history(sim: &SimState, d: &Value, old: &[Arc<Value>]) {
    let limit = d["spec"]["revisionHistoryLimit"]
        .as_i64()
        .unwrap_or(10)
        .max(0) as usize;
    let empty: Vec<&Arc<Value>> = old
        .iter()
        .filter(|rs| replicas(rs) == 0 && status_count(rs, "replicas") == 0)
        .collect();
    let Some(def) = sim.store().resource(&Gr::replicasets()) else {
        return;
    };
    for rs in empty.iter().take(empty.len().saturating_sub(limit)) {
        let _ = verbs::delete(
            sim,
            &def,
            meta::namespace(rs),
            meta::name(rs),
            &DeleteOptions::default(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenceposts_round_surge_up_and_unavailable_down() {
        let d = |strategy: Value| json!({"spec": {"strategy": strategy}});
        assert_eq!(fenceposts(&d(json!({})), 10), (3, 2));
        assert_eq!(fenceposts(&d(json!({})), 1), (1, 0));
        assert_eq!(
            fenceposts(
                &d(json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}})),
                4
            ),
            (0, 1)
        );
        assert_eq!(
            fenceposts(
                &d(json!({"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 2}})),
                3
            ),
            (2, 2)
        );
        assert_eq!(fenceposts(&d(json!({"type": "Recreate"})), 5), (0, 0));
    }
}
