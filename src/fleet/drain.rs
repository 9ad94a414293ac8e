//! `maintd drain NODE` and `maintd undrain NODE` from a workstation: a
//! NodeMaintenance for that one node, named `drain-NODE` and labelled as
//! made by `maintd drain`, created (idempotently) and deleted. The agent on
//! the node does the rest, as for any NodeMaintenance; undrain deletes
//! only an object `maintd drain` made.

use std::io::Write;

use kube::api::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::Request;
use serde_json::{Value, json};

use super::{FleetError, NODEDRAINS, NODEMAINTENANCES};
use crate::api::{MAX_NODE_NAME_LEN, NodeMaintenance, NodeMaintenanceSpec, Stage};

/// The label that marks a NodeMaintenance as made by `maintd drain`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MADE_BY_DRAIN: &str = "maintd-drain";
/// Who asked: the user and host `maintd drain` ran as.
pub const REQUESTED_BY: &str = "maintd.io/requested-by";
/// The field manager of what `maintd drain` writes.
const FIELD_MANAGER: &str = "maintd-drain";
/// The prefix of the object's name.
const PREFIX: &str = "drain-";

/// What `maintd drain` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    Created,
    /// It was there already, as `maintd drain` makes it.
    Unchanged,
    /// It was there with another stage; set back to Drain.
    Configured,
}

/// What `maintd undrain` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undrained {
    Deleted,
    /// No object of `maintd drain` for the node, and none other either.
    NothingToUndo,
}

/// The NodeMaintenance `maintd drain NODE` makes: `drain-NODE`.
pub fn maintenance_name(node: &str) -> Result<String, FleetError> {
    let name = format!("{PREFIX}{node}");
    // A DNS subdomain, as Node names are: nothing that could reach
    // another path of the API.
    let fits = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    if node.is_empty() || node.len() > MAX_NODE_NAME_LEN || !node.chars().all(fits) {
        return Err(FleetError::Usage(format!(
            "{node:?} is not a node name (1 to {MAX_NODE_NAME_LEN} lowercase letters, digits, '-' and '.')"
        )));
    }
    if name.len() > MAX_NODE_NAME_LEN {
        return Err(FleetError::Usage(format!(
            "node name {node:?} is too long for a NodeMaintenance named {PREFIX}<node> ({} characters at most); create one by hand with spec.nodeName",
            MAX_NODE_NAME_LEN - PREFIX.len()
        )));
    }
    Ok(name)
}

/// Who runs this command, for the object's annotation: `user@host`.
pub fn requester() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown host".to_string());
    format!("{user}@{host}")
}

/// The object `maintd drain` creates, checked as the agents will check
/// it, so that a bad reason is refused before anything is written.
pub fn object(node: &str, reason: &str, who: &str) -> Result<NodeMaintenance, FleetError> {
    let name = maintenance_name(node)?;
    let mut nm = NodeMaintenance::new(
        &name,
        NodeMaintenanceSpec {
            node_name: Some(node.to_string()),
            node_selector: None,
            stage: Stage::Drain,
            reason: reason.to_string(),
            drain_plan: Vec::new(),
            stage_timeout_seconds: None,
            max_concurrent_drains: None,
            cordon_ahead: None,
            wait_for_reboot: None,
            planned: false,
        },
    );
    nm.metadata.labels = Some([(MANAGED_BY.to_string(), MADE_BY_DRAIN.to_string())].into());
    nm.metadata.annotations = Some([(REQUESTED_BY.to_string(), who.to_string())].into());
    crate::api::validate(&nm).map_err(|problems| {
        FleetError::Usage(format!("nothing written: {}", problems.join("; ")))
    })?;
    Ok(nm)
}

/// Whether `obj` is the NodeMaintenance `maintd drain` made for `node`.
pub fn made_by_drain(obj: &Value, node: &str) -> bool {
    obj["metadata"]["labels"][MANAGED_BY] == MADE_BY_DRAIN && obj["spec"]["nodeName"] == node
}

/// A refusal of an object `maintd drain` did not make, naming it.
fn not_ours(name: &str, node: &str, action: &str) -> FleetError {
    FleetError::Refused(format!(
        "NodeMaintenance {name} was not made by `maintd drain {node}` (it lacks the label {MANAGED_BY}={MADE_BY_DRAIN}): {action}; kubectl delete nodemaintenance {name} removes it if that is meant"
    ))
}

/// Reads one object; None when it does not exist.
async fn get(
    client: &kube::Client,
    server: &str,
    collection: &str,
    name: &str,
    what: &str,
    need: &str,
) -> Result<Option<Value>, FleetError> {
    let req = Request::new(collection)
        .get(name, &GetParams::default())
        .map_err(|e| FleetError::Usage(format!("{what}: {e}")))?;
    match client.request::<Value>(req).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if super::api_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(FleetError::from_api(what, need, server, &e)),
    }
}

/// The node must exist: like kubectl, nothing is written for a node that
/// is not there.
pub async fn require_node(
    client: &kube::Client,
    server: &str,
    node: &str,
) -> Result<(), FleetError> {
    let found = get(
        client,
        server,
        "/api/v1/nodes",
        node,
        &format!("reading node {node}"),
        "get on nodes",
    )
    .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(FleetError::Refused(format!(
            "node {node} not found in the cluster at {server}: nothing was written (`kubectl get nodes` lists the names)"
        ))),
    }
}

/// `maintd drain NODE`: creates `drain-NODE`, or finds it there.
pub async fn drain(
    client: &kube::Client,
    server: &str,
    node: &str,
    reason: &str,
    out: &mut (dyn Write + Send),
) -> Result<Drained, FleetError> {
    let nm = object(node, reason, &requester())?;
    let name = maintenance_name(node)?;
    require_node(client, server, node).await?;
    let what = format!("creating NodeMaintenance {name}");
    let need = "create, get and patch on nodemaintenances.maintd.io";
    let body = serde_json::to_vec(&nm).map_err(|e| FleetError::Usage(format!("{what}: {e}")))?;
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    let req = Request::new(NODEMAINTENANCES)
        .create(&pp, body)
        .map_err(|e| FleetError::Usage(format!("{what}: {e}")))?;
    let outcome = match client.request::<Value>(req).await {
        Ok(_) => Drained::Created,
        Err(e) => match super::api_code(&e) {
            Some(409) => {
                let what = format!("reading NodeMaintenance {name}");
                let Some(there) = get(client, server, NODEMAINTENANCES, &name, &what, need).await?
                else {
                    return Err(FleetError::Refused(format!(
                        "NodeMaintenance {name} was there and is gone again (deleted meanwhile): run maintd drain {node} again"
                    )));
                };
                if !made_by_drain(&there, node) {
                    return Err(not_ours(&name, node, "maintd drain leaves it alone"));
                }
                if there["spec"]["stage"] == "Drain" {
                    Drained::Unchanged
                } else {
                    set_stage_drain(client, server, &name, &there, need).await?;
                    Drained::Configured
                }
            }
            Some(404) => {
                return Err(FleetError::NoCrd {
                    what,
                    server: server.to_string(),
                    resource: NODEMAINTENANCES.to_string(),
                });
            }
            _ => return Err(FleetError::from_api(&what, need, server, &e)),
        },
    };
    let said = match outcome {
        Drained::Created => "created",
        Drained::Unchanged => "unchanged",
        Drained::Configured => "configured",
    };
    writeln!(out, "nodemaintenance.maintd.io/{name} {said}")?;
    Ok(outcome)
}

/// Sets the stage of our own object back to Drain, based on the version
/// read, so a change made meanwhile is not overwritten unseen.
async fn set_stage_drain(
    client: &kube::Client,
    server: &str,
    name: &str,
    there: &Value,
    need: &str,
) -> Result<(), FleetError> {
    let what = format!("setting NodeMaintenance {name} back to stage Drain");
    let patch = json!({
        "metadata": {"resourceVersion": there["metadata"]["resourceVersion"]},
        "spec": {"stage": "Drain"},
    });
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    let req = Request::new(NODEMAINTENANCES)
        .patch(name, &pp, &Patch::Merge(patch))
        .map_err(|e| FleetError::Usage(format!("{what}: {e}")))?;
    client
        .request::<Value>(req)
        .await
        .map(|_| ())
        .map_err(|e| FleetError::from_api(&what, need, server, &e))
}

/// `maintd undrain NODE`: deletes `drain-NODE` if `maintd drain` made it;
/// refuses any other object, naming it.
pub async fn undrain(
    client: &kube::Client,
    server: &str,
    node: &str,
    out: &mut (dyn Write + Send),
) -> Result<Undrained, FleetError> {
    let name = maintenance_name(node)?;
    let need = "get and delete on nodemaintenances.maintd.io";
    let what = format!("reading NodeMaintenance {name}");
    let Some(there) = get(client, server, NODEMAINTENANCES, &name, &what, need).await? else {
        // Nothing of ours: say what else keeps the node drained, if
        // anything, rather than report it undrained.
        let others = other_maintenances(client, server, node, &name).await?;
        if let Some(first) = others.first() {
            return Err(not_ours(
                first,
                node,
                &format!(
                    "maintd drain made no NodeMaintenance for node {node}, and {} still select{} it; maintd undrain leaves {} alone",
                    others.join(", "),
                    if others.len() == 1 { "s" } else { "" },
                    if others.len() == 1 { "it" } else { "them" },
                ),
            ));
        }
        writeln!(
            out,
            "node {node} has no NodeMaintenance from maintd drain: nothing to undo"
        )?;
        return Ok(Undrained::NothingToUndo);
    };
    if !made_by_drain(&there, node) {
        return Err(not_ours(&name, node, "maintd undrain leaves it alone"));
    }
    let what = format!("deleting NodeMaintenance {name}");
    // Only the object just looked at: one made again meanwhile is not
    // deleted unseen.
    let dp = DeleteParams {
        preconditions: there["metadata"]["uid"].as_str().map(|uid| Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let req = Request::new(NODEMAINTENANCES)
        .delete(&name, &dp)
        .map_err(|e| FleetError::Usage(format!("{what}: {e}")))?;
    match client.request::<Value>(req).await {
        Ok(_) => {}
        // Deleted meanwhile: what was asked is done.
        Err(e) if super::api_code(&e) == Some(404) => {}
        Err(e) => return Err(FleetError::from_api(&what, need, server, &e)),
    }
    writeln!(out, "nodemaintenance.maintd.io \"{name}\" deleted")?;
    Ok(Undrained::Deleted)
}

/// The NodeMaintenance objects other than `ours` that the node's agent
/// reports select it (its NodeDrain's `maintenances`).
pub async fn other_maintenances(
    client: &kube::Client,
    server: &str,
    node: &str,
    ours: &str,
) -> Result<Vec<String>, FleetError> {
    let what = format!("reading NodeDrain {node}");
    let drain = get(
        client,
        server,
        NODEDRAINS,
        node,
        &what,
        "get on nodedrains.maintd.io",
    )
    .await?;
    Ok(drain
        .as_ref()
        .and_then(|d| d["status"]["maintenances"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|n| *n != ours)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_names_its_node_and_who_asked_and_is_valid() {
        let nm = object("node-a", "kernel 6.12", "ops@laptop").unwrap();
        let v = serde_json::to_value(&nm).unwrap();
        assert_eq!(v["metadata"]["name"], "drain-node-a");
        assert_eq!(v["metadata"]["labels"][MANAGED_BY], MADE_BY_DRAIN);
        assert_eq!(v["metadata"]["annotations"][REQUESTED_BY], "ops@laptop");
        assert_eq!(v["spec"]["nodeName"], "node-a");
        assert_eq!(v["spec"]["stage"], "Drain");
        assert!(made_by_drain(&v, "node-a"));
        assert!(!made_by_drain(&v, "node-b"), "another node's is not ours");
        let mut foreign = v.clone();
        foreign["metadata"]["labels"] = json!({});
        assert!(!made_by_drain(&foreign, "node-a"));
    }

    #[test]
    fn names_that_cannot_be_are_refused_before_anything_is_written() {
        for bad in ["", "Node-A", "../nodes", "a/b", "node a"] {
            let e = maintenance_name(bad).unwrap_err().to_string();
            assert!(e.contains("is not a node name"), "{bad}: {e}");
        }
        let long = "n".repeat(250);
        let e = maintenance_name(&long).unwrap_err().to_string();
        assert!(e.contains("too long") && e.contains("247"), "{e}");
        assert_eq!(maintenance_name(&"n".repeat(247)).unwrap().len(), 253);
        let e = object("node-a", &"x".repeat(5000), "me")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("nothing written: ") && e.contains("reason"),
            "{e}"
        );
    }
}
