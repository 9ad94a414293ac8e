//! One round of the real fault soak: a fresh pool of nodes and workloads,
//! a maintenance, the round's faults while it runs, and every invariant
//! checked while it runs and once it is over.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::checks::{self, Checks, Watched};
use super::faults::{self, Targets};
use super::plan::{Kind, Plan};
use super::world::World;
use super::{audit, kubectl, nodedrain};
use crate::common::fault_proxy::FaultProxy;
use crate::common::real::Real;

/// After the last fault, how long the maintenance has to reach its end
/// (or to name what holds it): past a half-open connection's detection
/// (75 s), a relist and a drain behind budgets.
const DRIVE: Duration = Duration::from_secs(180);
/// Once the maintenance is deleted, how long the nodes have to be back.
const UNDO: Duration = Duration::from_secs(120);

/// What one round did and found.
#[derive(Debug)]
pub struct RoundReport {
    pub plan: Plan,
    pub faults: Vec<String>,
    pub checks: Checks,
    pub violations: Vec<String>,
    /// How the maintenance ended, in words.
    pub outcome: String,
    pub took: Duration,
}

pub async fn run(real: &Real, admin: &kube::Client, proxy: &FaultProxy, plan: Plan) -> RoundReport {
    let began = Instant::now();
    let audit_from = audit::end_of(&real.audit_log());
    let mut world = World::build(real, admin, proxy, &plan).await;
    world.start_agents();
    let mut checks = Checks::default();
    let mut violations = Vec::new();
    for a in &world.agents {
        let t = Instant::now();
        while !a.status().await.is_some_and(|s| {
            s["watches"]["node_synced"] == true && s["watches"]["pods_synced"] == true
        }) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the agent of {} did not list its node and pods within 60 s; its log:\n{}",
                a.node,
                a.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let uid = create_maintenance(real, &world, &plan).await;
    let start = Instant::now();
    let stop = CancellationToken::new();
    let watched = Watched::new(&plan, &world, &uid);
    let samples = checks::watch(admin.clone(), watched.clone(), stop.clone());
    let updater = matches!(plan.kind, Kind::Rolling { reboot: true, .. }).then(|| {
        tokio::spawn(updater(
            admin.clone(),
            world.pool.clone(),
            uid.clone(),
            stop.clone(),
        ))
    });

    let done = {
        let mut targets = Targets {
            real,
            proxy,
            agents: &mut world.agents,
        };
        faults::inject(&plan.faults, start, &mut targets).await
    };
    // Whatever the faults did, the control plane runs again.
    if let Err(dead) = real.alive() {
        violations.push(format!("the control plane after the faults: {dead}"));
    }

    let outcome = drive(admin, &plan, &world, &uid, &mut violations).await;
    for a in &mut world.agents {
        if let Some(why) = a.exited() {
            violations.push(why);
        }
    }
    checks::finished_or_named(admin, &plan, &world, &uid, &mut checks, &mut violations).await;

    // The maintenance ends: everything it did is undone.
    delete_maintenance(real, &world).await;
    checks::undone(admin, &watched, UNDO, &mut checks, &mut violations).await;
    stop.cancel();
    if let Some(u) = updater {
        let _ = u.await;
    }
    if let Ok(s) = samples.await {
        checks.merge(&s.checks);
        violations.extend(s.violations);
    }

    let verdict = audit::judge(
        &real.audit_log(),
        audit_from,
        &world.namespace,
        &world.workloads,
    );
    checks.add(
        "evictions and deletes judged against their budgets",
        verdict.judged,
    );
    violations.extend(verdict.violations);
    if verdict.judged == 0 && !plan.stuck {
        violations.push(
            "the audit log shows no eviction of maintd's in the round: the budget judge saw nothing"
                .to_string(),
        );
    }
    if !violations.is_empty() {
        for a in &world.agents {
            violations.push(format!("the end of {}'s log:\n{}", a.node, a.log_tail(15)));
        }
    }
    world.tear_down(real, admin).await;
    RoundReport {
        plan,
        faults: done,
        checks,
        violations,
        outcome: format!(
            "{outcome}; {} evictions, {} refused by budgets, {} requests refused by priority and fairness",
            verdict.evictions, verdict.refused, verdict.throttled
        ),
        took: began.elapsed(),
    }
}

async fn create_maintenance(real: &Real, world: &World, plan: &Plan) -> String {
    let mut spec = json!({"stage": "Drain", "reason": format!("fault soak, seed {}", plan.seed)});
    match plan.kind {
        Kind::Drain => spec["nodeName"] = json!(world.pool[0]),
        Kind::Rolling { slots, reboot } => {
            spec["nodeSelector"] = json!({"matchLabels": {"pool": world.namespace}});
            spec["maxConcurrentDrains"] = json!(slots);
            if reboot {
                spec["waitForReboot"] = json!({"timeoutSeconds": 900});
            }
        }
    }
    let nm = json!({
        "apiVersion": "maintd.io/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": world.maintenance}, "spec": spec,
    });
    let (ok, _, err) = kubectl(real, &["apply", "-f", "-"], Some(&nm.to_string())).await;
    assert!(ok, "the NodeMaintenance: {err}");
    let (ok, out, err) = kubectl(
        real,
        &[
            "get",
            "nodemaintenance.maintd.io",
            &world.maintenance,
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    )
    .await;
    assert!(ok, "the NodeMaintenance's uid: {err}");
    out
}

/// Deletes the round's NodeMaintenance, trying again while the API server
/// is away.
async fn delete_maintenance(real: &Real, world: &World) {
    for _ in 0..60 {
        let (ok, _, _) = kubectl(
            real,
            &[
                "delete",
                "nodemaintenance.maintd.io",
                &world.maintenance,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        )
        .await;
        if ok {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until the maintenance has done what it can: every selected node
/// drained (its turn over, for turns that end with a reboot), or, with a
/// budget that allows nothing, the drain blocked on it by name. Bounded by
/// [`DRIVE`]; says how it ended.
async fn drive(
    admin: &kube::Client,
    plan: &Plan,
    world: &World,
    uid: &str,
    violations: &mut Vec<String>,
) -> String {
    let deadline = Instant::now() + DRIVE;
    let t = Instant::now();
    loop {
        let reached = match plan.kind {
            Kind::Drain if plan.stuck => nodedrain(admin, &world.pool[0]).await.is_some_and(|d| {
                d["status"]["phase"] == "Blocked"
                    && d["status"]["blockers"].as_array().is_some_and(|b| {
                        b.iter()
                            .any(|b| b["pod"].as_str().is_some_and(|p| p.starts_with("stuck-")))
                    })
            }),
            Kind::Drain => drained(admin, &world.pool[0]).await,
            Kind::Rolling { reboot: true, .. } => {
                let mut all = true;
                for n in &world.pool {
                    all &= turn_done(admin, n, uid).await;
                }
                all
            }
            Kind::Rolling { reboot: false, .. } => {
                let mut all = true;
                for n in &world.pool {
                    all &= drained(admin, n).await;
                }
                all
            }
        };
        if reached {
            return format!("done {:.1}s after the faults", t.elapsed().as_secs_f64());
        }
        if Instant::now() >= deadline {
            violations.push(format!(
                "the maintenance did not reach its end within {DRIVE:?} of the last fault"
            ));
            return "did not finish".to_string();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn drained(admin: &kube::Client, node: &str) -> bool {
    nodedrain(admin, node)
        .await
        .is_some_and(|d| d["status"]["phase"] == "Drained")
}

pub async fn turn_done(admin: &kube::Client, node: &str, uid: &str) -> bool {
    let Ok(n) = Api::<Node>::all(admin.clone()).get(node).await else {
        return false;
    };
    let n = serde_json::to_value(n).unwrap_or(Value::Null);
    maintd::api::turns::done(&n).iter().any(|u| u == uid)
}

/// The OS updater of a rolling maintenance whose turns end with a reboot:
/// a node drained in its turn reboots (its boot ID changes), once.
async fn updater(admin: kube::Client, pool: Vec<String>, uid: String, stop: CancellationToken) {
    let nodes: Api<Node> = Api::all(admin.clone());
    let mut rebooted: BTreeMap<String, String> = BTreeMap::new();
    while !stop.is_cancelled() {
        for n in &pool {
            let Ok(node) = nodes.get(n).await else {
                continue;
            };
            let node = serde_json::to_value(node).unwrap_or(Value::Null);
            let Some(turn) = maintd::api::turns::record(&node) else {
                continue;
            };
            let boot = maintd::api::turns::boot_id(&node)
                .unwrap_or_default()
                .to_string();
            if turn.uid != uid || turn.boot_id != boot || rebooted.get(n) == Some(&boot) {
                continue;
            }
            if !drained(&admin, n).await {
                continue;
            }
            let next = format!("{boot}-r");
            let patch = json!({"status": {"nodeInfo": {"bootID": next}}});
            if nodes
                .patch_status(n, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .is_ok()
            {
                rebooted.insert(n.clone(), boot);
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
    }
}
