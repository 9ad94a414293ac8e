//! Eviction decided as the API server decides it, run in-process against
//! `SimState` (no HTTP: the verbs the server calls, from many threads).

use std::sync::{Arc, Barrier};

use serde_json::{Value, json};

use super::*;
use crate::state::SimConfig;
use crate::verbs::{Writer, create, remove_now, write_status};

fn writer() -> Writer {
    Writer {
        manager: "test".into(),
        force: false,
        user: None,
    }
}

fn def(sim: &SimState, gr: &Gr) -> Arc<crate::resources::ResourceDef> {
    sim.store().resource(gr).expect("served")
}

/// A Running, Ready pod labelled `set`.
fn pod(sim: &SimState, name: &str, set: &str) {
    let body = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"set": set}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "registry.example/app:1"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    });
    create(
        sim,
        &def(sim, &Gr::pods()),
        Some("default"),
        body,
        &writer(),
        true,
    )
    .expect("pod");
}

/// A budget over `set` whose status (as the disruption controller last
/// wrote it) allows `allowed` disruptions of `healthy` pods.
fn budget(sim: &SimState, name: &str, set: &str, healthy: i64, allowed: i64) {
    let body = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"set": set}}, "minAvailable": healthy - allowed},
    });
    create(
        sim,
        &def(sim, &Gr::pdbs()),
        Some("default"),
        body,
        &writer(),
        false,
    )
    .expect("pdb");
    let status = json!({
        "currentHealthy": healthy, "desiredHealthy": healthy - allowed,
        "disruptionsAllowed": allowed, "expectedPods": healthy, "observedGeneration": 1,
    });
    write_status(
        sim,
        &Gr::pdbs(),
        "default",
        name,
        "disruption-controller",
        status,
    );
}

fn pdb_status(sim: &SimState, name: &str) -> Value {
    sim.store()
        .get(&Gr::pdbs(), "default", name)
        .map(|p| p["status"].clone())
        .unwrap_or_default()
}

#[test]
fn fifty_parallel_evictions_against_a_budget_of_three_grant_exactly_three_every_round() {
    const ROUNDS: usize = 1_000;
    const PODS: usize = 50;
    let sim = SimState::new(SimConfig::default());
    for round in 0..ROUNDS {
        let set = format!("r{round}");
        for i in 0..PODS {
            pod(&sim, &format!("{set}-{i}"), &set);
        }
        budget(&sim, &set, &set, PODS as i64, 3);
        let barrier = Barrier::new(PODS);
        let results: Vec<Result<(), ApiError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..PODS)
                .map(|i| {
                    let (sim, barrier, set) = (&sim, &barrier, &set);
                    s.spawn(move || {
                        barrier.wait();
                        evict(sim, "default", &format!("{set}-{i}"), &json!({}))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("an eviction thread panicked"))
                .collect()
        });
        let granted = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(granted, 3, "round {round}");
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            assert_eq!(
                (e.code, e.message.as_str()),
                (429, REFUSED),
                "round {round}"
            );
        }
        assert_eq!(sim.invariants.violations(), Vec::<String>::new());
        let st = pdb_status(&sim, &set);
        assert_eq!(st["disruptionsAllowed"], 0, "round {round}: {st}");
        assert_eq!(
            st["disruptedPods"].as_object().map(|m| m.len()),
            Some(3),
            "round {round}: {st}"
        );
        let mut store = sim.store();
        for i in 0..PODS {
            remove_now(
                &mut store,
                &Gr::pods(),
                "default",
                &format!("{set}-{i}"),
                false,
            );
        }
        remove_now(&mut store, &Gr::pdbs(), "default", &set, false);
    }
}

#[test]
fn a_budget_whose_status_lags_its_spec_refuses_as_not_yet_processed() {
    let sim = SimState::new(SimConfig::default());
    pod(&sim, "p", "s");
    budget(&sim, "b", "s", 1, 1);
    // The spec changes (generation 2); the controller has not caught up.
    let pdbs = def(&sim, &Gr::pdbs());
    verbs::patch(
        &sim,
        &pdbs,
        "default",
        "b",
        Part::Main,
        verbs::PatchType::Merge,
        &json!({"spec": {"minAvailable": 1}}),
        &writer(),
    )
    .expect("spec patched");
    let e = evict(&sim, "default", "p", &json!({})).expect_err("refused");
    assert_eq!((e.code, e.message.as_str()), (429, REFUSED));
    assert_eq!(
        e.causes.first().map(|c| c.1.as_str()),
        Some("The disruption budget b is still being processed by the server.")
    );
    // Once the controller has observed generation 2, the eviction goes.
    write_status(
        &sim,
        &Gr::pdbs(),
        "default",
        "b",
        "disruption-controller",
        json!({"observedGeneration": 2}),
    );
    evict(&sim, "default", "p", &json!({})).expect("granted");
}

#[test]
fn a_disrupted_pod_counts_as_gone_until_deleted_or_two_minutes_pass() {
    let sim = SimState::new(SimConfig::default());
    for p in ["a", "b", "c"] {
        pod(&sim, p, "s");
    }
    budget(&sim, "b", "s", 3, 1);
    let store = sim.store();
    let pdb = store.get(&Gr::pdbs(), "default", "b").expect("pdb");
    drop(store);
    // Recorded just now and still running (its deletion not seen yet):
    // not healthy, so nothing more may go.
    let mut just_now = (*pdb).clone();
    just_now["status"]["disruptedPods"] = json!({"a": meta::now_time()});
    let (st, kept) = budget_status(&sim.store(), &just_now).expect("counted");
    assert_eq!((st.current_healthy, st.disruptions_allowed), (2, 0));
    assert_eq!(kept, json!({"a": just_now["status"]["disruptedPods"]["a"]}));
    // Recorded more than two minutes ago and never deleted: counted again.
    let mut expired = (*pdb).clone();
    expired["status"]["disruptedPods"] =
        json!({"a": meta::time_after(-(DISRUPTED_POD_TIMEOUT_SECS + 1))});
    let (st, kept) = budget_status(&sim.store(), &expired).expect("counted");
    assert_eq!((st.current_healthy, st.disruptions_allowed), (3, 1));
    assert_eq!(kept, json!({}));
}

#[test]
fn percentages_round_up() {
    assert_eq!(scaled(&json!("50%"), 3), 2);
    assert_eq!(scaled(&json!("10%"), 10), 1);
    assert_eq!(scaled(&json!("34%"), 3), 2);
    assert_eq!(scaled(&json!(2), 10), 2);
    assert_eq!(scaled(&json!("0%"), 10), 0);
    assert_eq!(scaled(&json!("bogus"), 10), 0);
}

#[test]
fn an_eviction_granted_on_a_status_the_live_pods_cannot_afford_is_recorded_as_a_violation() {
    let sim = SimState::new(SimConfig::default());
    // The status says three healthy pods and one disruption allowed, but
    // only two are there: a budget of two has nothing to give.
    for p in ["a", "b"] {
        pod(&sim, p, "s");
    }
    budget(&sim, "b", "s", 3, 1);
    evict(&sim, "default", "a", &json!({})).expect("granted from the status");
    let violations = sim.invariants.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].contains("default/a") && violations[0].contains("needs 2 healthy pods"),
        "{violations:?}"
    );
}

#[test]
fn a_direct_deletion_explains_a_shortfall_until_the_controller_has_recounted() {
    let sim = SimState::new(SimConfig::default());
    for p in ["a", "b", "c"] {
        pod(&sim, p, "s");
    }
    budget(&sim, "b", "s", 3, 1);
    // Someone deletes "c" without the Eviction API; the status still
    // allows one: the eviction of "a" is what the API server would grant.
    sim.invariants
        .deleting_pod(&sim.store(), "default", "c", "kubectl/v1.33");
    remove_now(&mut sim.store(), &Gr::pods(), "default", "c", false);
    evict(&sim, "default", "a", &json!({})).expect("granted from the status");
    assert_eq!(sim.invariants.violations(), Vec::<String>::new());
    let bypasses = sim.invariants.bypasses();
    assert_eq!(bypasses.len(), 1);
    assert_eq!(
        (
            bypasses[0].pod.as_str(),
            bypasses[0].budget.as_str(),
            bypasses[0].by.as_str()
        ),
        ("default/c", "default/b", "kubectl/v1.33")
    );
}
