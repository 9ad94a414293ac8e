//! `expectedPods` of a budget given as `maxUnavailable` or a percentage: the
//! sum of the scales of the distinct controllers of its pods, found as
//! upstream's disruption controller finds them (`getPodReplicaSet`,
//! `getPodDeployment`, `getPodStatefulSet`, then any controller with a
//! `scale` subresource). A ReplicaSet run by a Deployment counts the
//! Deployment's replicas, once for all its sets, so a rollout does not
//! double the count.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::meta;
use crate::resources::Gr;
use crate::store::Store;

/// The controller owner reference of `obj`, whole.
fn controller_ref(obj: &Value) -> Option<&Value> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == true)
}

/// (group, kind, name, uid) of an owner reference.
fn parts(owner: &Value) -> (&str, &str, &str, &str) {
    let api_version = owner["apiVersion"].as_str().unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let s = |k: &str| owner[k].as_str().unwrap_or("");
    (group, s("kind"), s("name"), s("uid"))
}

fn replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// The object `owner` points to, if it is there with the same uid.
fn target(store: &Store, gr: &Gr, ns: &str, owner: &Value) -> Option<Arc<Value>> {
    let (_, _, name, uid) = parts(owner);
    store.get(gr, ns, name).filter(|o| meta::uid(o) == uid)
}

/// The (uid, scale) a pod's controller counts for, or upstream's error when
/// it has none.
fn find(store: &Store, pod: &Value, owner: &Value) -> Result<(String, i64), String> {
    let ns = meta::namespace(pod);
    let none = || format!("found no controllers for pod {:?}", meta::name(pod));
    let (group, kind, _, _) = parts(owner);
    let gr = match (group, kind) {
        ("apps", "ReplicaSet") => Gr::replicasets(),
        ("apps", "StatefulSet") => Gr::statefulsets(),
        // A Deployment controlling pods itself: its scale subresource.
        ("apps", "Deployment") => Gr::deployments(),
        _ => return Err(no_scale(store, group, kind)),
    };
    let obj = target(store, &gr, ns, owner).ok_or_else(none)?;
    if gr == Gr::replicasets()
        && let Some(d_ref) = controller_ref(&obj)
        && parts(d_ref).0 == "apps"
        && parts(d_ref).1 == "Deployment"
        && let Some(d) = target(store, &Gr::deployments(), ns, d_ref)
    {
        return Ok((meta::uid(&d).to_string(), replicas(&d)));
    }
    Ok((meta::uid(&obj).to_string(), replicas(&obj)))
}

/// Upstream's answer for a controller kind without a `scale` subresource.
/// (The simulator gives no custom resource a scale subresource.)
fn no_scale(store: &Store, group: &str, kind: &str) -> String {
    match store.lookup_kind(group, kind) {
        Some(def) => format!("{} does not implement the scale subresource", def.gr()),
        None => format!("no matches for kind {kind:?} in group {group:?}"),
    }
}

/// The budget's expected pod count from its pods' controllers, or why the
/// disruption controller cannot tell (it then fails safe: no disruption
/// allowed).
///
/// A pod without a controller is where the simulator differs: upstream
/// leaves it out of the count (and warns "UnmanagedPods", "the status of
/// the PDB cannot be calculated correctly"), which makes a maxUnavailable
/// budget over bare pods allow every disruption. The simulator counts each
/// such pod that is not terminating as one, so such budgets guard what they
/// select, as their authors mean them to.
pub(super) fn expected_scale(store: &Store, pods: &[Arc<Value>]) -> Result<i64, String> {
    let mut scales: HashMap<String, i64> = HashMap::new();
    let mut unmanaged = 0;
    for pod in pods {
        let Some(owner) = controller_ref(pod) else {
            if !meta::is_terminating(pod) {
                unmanaged += 1;
            }
            continue;
        };
        let (uid, scale) = find(store, pod, owner)?;
        scales.insert(uid, scale);
    }
    Ok(scales.values().sum::<i64>() + unmanaged)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::state::{SimConfig, SimState};
    use crate::verbs::{Writer, create};

    /// Creates `obj` (status kept) and returns it as stored.
    fn put(sim: &SimState, gr: &Gr, obj: Value) -> Arc<Value> {
        let def = sim.store().resource(gr).expect("served");
        let writer = Writer {
            manager: "test".into(),
            force: false,
            user: None,
        };
        create(sim, &def, Some("default"), obj, &writer, true).expect("created")
    }

    fn owned_by(kind: &str, owner: &Value) -> Value {
        let api = if kind == "Node" { "v1" } else { "apps/v1" };
        json!([meta::controller_ref(api, kind, owner)])
    }

    fn set(
        sim: &SimState,
        gr: &Gr,
        kind: &str,
        name: &str,
        replicas: i64,
        owner: Option<&Value>,
    ) -> Arc<Value> {
        let mut obj = json!({"kind": kind, "metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {}, "template": {}}});
        if let Some(o) = owner {
            obj["metadata"]["ownerReferences"] = owned_by("Deployment", o);
        }
        put(sim, gr, obj)
    }

    fn pod(sim: &SimState, name: &str, owner: Option<(&str, &Value)>) -> Arc<Value> {
        let mut p = json!({"kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c"}]}});
        if let Some((kind, o)) = owner {
            p["metadata"]["ownerReferences"] = owned_by(kind, o);
        }
        put(sim, &Gr::pods(), p)
    }

    #[test]
    fn a_deployments_sets_count_its_replicas_once_and_other_sets_their_own() {
        let sim = SimState::new(SimConfig::default());
        let d = set(&sim, &Gr::deployments(), "Deployment", "web", 3, None);
        // Mid-rollout: the old set still at 2, the new one at 2.
        let old = set(&sim, &Gr::replicasets(), "ReplicaSet", "web-a", 2, Some(&d));
        let new = set(&sim, &Gr::replicasets(), "ReplicaSet", "web-b", 2, Some(&d));
        let lone = set(&sim, &Gr::replicasets(), "ReplicaSet", "batch", 5, None);
        let sts = set(&sim, &Gr::statefulsets(), "StatefulSet", "db", 4, None);
        let pods = vec![
            pod(&sim, "web-a-1", Some(("ReplicaSet", &old))),
            pod(&sim, "web-a-2", Some(("ReplicaSet", &old))),
            pod(&sim, "web-b-1", Some(("ReplicaSet", &new))),
            pod(&sim, "batch-1", Some(("ReplicaSet", &lone))),
            pod(&sim, "db-0", Some(("StatefulSet", &sts))),
            pod(&sim, "bare", None),
        ];
        // 3 (the Deployment) + 5 + 4 + 1 bare pod (the simulator's leniency).
        assert_eq!(expected_scale(&sim.store(), &pods), Ok(13));
    }

    #[test]
    fn a_controller_without_scale_or_gone_makes_the_count_fail() {
        let sim = SimState::new(SimConfig::default());
        let ds = put(
            &sim,
            &Gr::daemonsets(),
            json!({"kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"selector": {}, "template": {}}}),
        );
        let node = put(
            &sim,
            &Gr::nodes(),
            json!({"kind": "Node", "metadata": {"name": "n1"}}),
        );
        let rs = set(&sim, &Gr::replicasets(), "ReplicaSet", "gone", 2, None);
        let cases = [
            (
                pod(&sim, "agent-x", Some(("DaemonSet", &ds))),
                "daemonsets.apps does not implement the scale subresource",
            ),
            (
                pod(&sim, "etcd-n1", Some(("Node", &node))),
                "nodes does not implement the scale subresource",
            ),
        ];
        for (p, want) in cases {
            assert_eq!(expected_scale(&sim.store(), &[p]), Err(want.to_string()));
        }
        let orphan = pod(&sim, "gone-1", Some(("ReplicaSet", &rs)));
        crate::verbs::remove_now(
            &mut sim.store(),
            &Gr::replicasets(),
            "default",
            "gone",
            true,
        );
        assert_eq!(
            expected_scale(&sim.store(), &[orphan]),
            Err("found no controllers for pod \"gone-1\"".to_string())
        );
    }
}
