//! The agent against the simulated cluster with the rights it ships with:
//! deploy/'s namespace, ServiceAccount, roles and node-confinement policy
//! installed in the simulator, and a client that authenticates as that
//! ServiceAccount with a token bound to the agent's node, as a pod's
//! projected token is. The demo, the tests and the benchmarks run the
//! agent this way, never with an admin's rights, so a rule deploy/ lacks
//! fails there before it fails on a cluster.

use maintd_sim::SimCluster;
use maintd_sim::scenario::Scenario;

/// The objects of deploy/ that give the agent its rights.
const BASE: &[&str] = &[
    include_str!("../deploy/base/namespace.yaml"),
    include_str!("../deploy/base/rbac.yaml"),
    include_str!("../deploy/node-confinement/policy.yaml"),
];

/// What deploy/medik8s/ adds.
const MEDIK8S: &str = include_str!("../deploy/medik8s/rbac.yaml");

/// The agent's ServiceAccount, as deploy/ names it.
pub const NAMESPACE: &str = "maintd";
pub const SERVICE_ACCOUNT: &str = "maintd";

#[derive(Debug, thiserror::Error)]
#[error("installing deploy/'s {what} in the simulated cluster: {message}")]
pub struct InstallError {
    what: &'static str,
    message: String,
}

fn install(sim: &SimCluster, what: &'static str, docs: &[&str]) -> Result<(), InstallError> {
    let err = |message: String| InstallError { what, message };
    let mut objects = Vec::new();
    for doc in docs {
        let parsed: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(doc).map_err(|e| err(e.to_string()))?;
        objects.extend(parsed.into_iter().filter(|o| !o.is_null()));
    }
    // Objects already there (installed by an earlier call) stay as they are.
    objects.retain(|o| !sim.has_object(o));
    Scenario {
        objects,
        ..Scenario::default()
    }
    .apply(&sim.state, None)
    .map_err(|e| err(e.to_string()))
}

/// Installs the agent's rights as `kubectl apply -k deploy/` does (and
/// medik8s' as `deploy/medik8s/` adds them, when `medik8s`). Idempotent.
pub fn install_rights(sim: &SimCluster, medik8s: bool) -> Result<(), InstallError> {
    install(sim, "RBAC and admission policy", BASE)?;
    if medik8s {
        install(sim, "medik8s RBAC", &[MEDIK8S])?;
    }
    Ok(())
}

/// A token of the agent's ServiceAccount bound to `node`, its rights
/// installed first. The node must exist by the time the token is used.
pub fn agent_token(sim: &SimCluster, node: &str) -> String {
    if let Err(e) = install_rights(sim, false) {
        // deploy/ is part of this build: a file that does not load is a
        // broken checkout, and every later request would say so anyway.
        tracing::error!("{e}");
    }
    sim.service_account_token(NAMESPACE, SERVICE_ACCOUNT, Some(node))
}

/// A client of `sim` as `node`'s agent has it: deploy/'s ServiceAccount
/// with a token bound to the node, kube's retry of 429s off, and the
/// agent's User-Agent (see [`crate::cluster::agent_config`]).
pub fn agent_client(sim: &SimCluster, node: &str) -> kube::Client {
    let token = agent_token(sim, node);
    SimCluster::build(crate::cluster::agent_config(
        sim.client_config_as(&token),
        node,
    ))
}

/// A kubeconfig for `node`'s agent, for `maintd run` as a process.
pub fn agent_kubeconfig(sim: &SimCluster, node: &str) -> String {
    sim.kubeconfig_as(&agent_token(sim, node))
}
