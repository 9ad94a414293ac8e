//! Carrying out a round's faults on the real control plane, at their
//! offsets, one after the other; each one over (what it killed running
//! again, the network healed) before the next.

use std::time::Duration;

use tokio::time::Instant;

use super::agents::AgentProcess;
use super::plan::{Fault, Timed};
use crate::common::fault_proxy::FaultProxy;
use crate::common::real::Real;

/// How long a restarted API server may take to be ready again.
const RESTART: Duration = Duration::from_secs(120);

/// The API server's priority and fairness, made to refuse maintd: a
/// priority level with no seats of its own and none to borrow, which
/// answers 429 at once, and a FlowSchema sending maintd's ServiceAccount
/// there ahead of the built-in `service-accounts` one.
const THROTTLE: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
 {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
  "metadata": {"name": "soak-throttle-maintd"},
  "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0,
   "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}},
 {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
  "metadata": {"name": "soak-throttle-maintd"},
  "spec": {"priorityLevelConfiguration": {"name": "soak-throttle-maintd"}, "matchingPrecedence": 500,
   "distinguisherMethod": {"type": "ByUser"},
   "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "maintd", "name": "maintd"}}],
    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}]}"#;

/// What a fault needs to act on.
pub struct Targets<'a> {
    pub real: &'a Real,
    pub proxy: &'a FaultProxy,
    pub agents: &'a mut [AgentProcess],
}

/// Injects `faults`, each at `start + at` (or at once, if the one before
/// ran past it). Returns what was done, in words, for the report.
pub async fn inject(faults: &[Timed], start: Instant, t: &mut Targets<'_>) -> Vec<String> {
    let mut done = Vec::new();
    for f in faults {
        tokio::time::sleep_until(start + f.at).await;
        let began = start.elapsed();
        match one(f.fault, t).await {
            Ok(()) => done.push(format!(
                "{} at {:.1}s, over at {:.1}s",
                f.fault,
                began.as_secs_f64(),
                start.elapsed().as_secs_f64()
            )),
            Err(e) => done.push(format!(
                "{} at {:.1}s FAILED: {e}",
                f.fault,
                began.as_secs_f64()
            )),
        }
    }
    done
}

async fn one(fault: Fault, t: &mut Targets<'_>) -> Result<(), String> {
    match fault {
        Fault::ApiServer { down } => {
            t.real.component("kill", "kube-apiserver")?;
            tokio::time::sleep(down).await;
            t.real.component("start", "kube-apiserver")?;
            ready(t.real).await
        }
        Fault::Etcd { down } => {
            t.real.component("kill", "etcd")?;
            tokio::time::sleep(down).await;
            t.real.component("start", "etcd")?;
            ready(t.real).await
        }
        Fault::Agent { node, down } => {
            let agent = &mut t.agents[node % t.agents.len()];
            agent.kill().await;
            tokio::time::sleep(down).await;
            agent.start();
            Ok(())
        }
        Fault::BlackHole { secs } => {
            t.proxy.black_hole();
            tokio::time::sleep(Duration::from_secs(secs)).await;
            t.proxy.heal();
            Ok(())
        }
        Fault::Reset => {
            t.proxy.reset_all();
            Ok(())
        }
        Fault::HalfOpen => {
            t.proxy.abandon_all();
            Ok(())
        }
        Fault::Throttle { secs } => {
            let kc = t.real.admin_kubeconfig();
            let (ok, _, err) =
                crate::common::real::kubectl(&kc, &["apply", "-f", "-"], Some(THROTTLE));
            if !ok {
                return Err(format!("the throttling FlowSchema: {err}"));
            }
            tokio::time::sleep(Duration::from_secs(secs)).await;
            let (ok, _, err) = crate::common::real::kubectl(
                &kc,
                &[
                    "delete",
                    "flowschema,prioritylevelconfiguration",
                    "soak-throttle-maintd",
                    "--ignore-not-found",
                ],
                None,
            );
            if ok {
                Ok(())
            } else {
                Err(format!("removing the throttling FlowSchema: {err}"))
            }
        }
    }
}

/// Waits (bounded) until the API server answers /readyz.
pub async fn ready(real: &Real) -> Result<(), String> {
    let deadline = Instant::now() + RESTART;
    loop {
        let (ok, _, _) = real.kubectl(&["get", "--raw", "/readyz", "--request-timeout=5s"]);
        if ok {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the API server was not ready {RESTART:?} after the restart: {}",
                real.alive().err().unwrap_or_default()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
