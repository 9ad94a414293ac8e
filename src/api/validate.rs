//! What is wrong with a NodeMaintenance, checked by the agent. An invalid
//! object causes no action; its problems go into a `Valid=False` condition.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{NodeMaintenance, Stage, stage::STAGES};
use crate::drain::plan::{PlanError, selector_matches, validate_entries};

/// Most drain plan entries an object may have (the CRD's `maxItems` too).
pub const MAX_PLAN_ENTRIES: usize = 1000;
/// Longest `spec.reason`, in bytes (the CRD's `maxLength` too).
pub const MAX_REASON_LEN: usize = 1024;
/// Longest `spec.stageTimeoutSeconds` (the CRD's `maximum` too): a week. A
/// stage that may take longer has no timeout worth the name.
pub const MAX_STAGE_TIMEOUT_SECONDS: i64 = 7 * 24 * 3600;
/// Largest `spec.maxConcurrentDrains` (the CRD's `maximum` too): more than
/// any cluster has nodes.
pub const MAX_CONCURRENT_DRAINS: i32 = 100_000;
/// Largest `spec.cordonAhead` (the CRD's `maximum` too): each node cordoned
/// ahead watches the object's drain slots, so the line is kept short.
pub const MAX_CORDON_AHEAD: i32 = 1000;
/// `spec.waitForReboot.timeoutSeconds` when unset: an hour.
pub const DEFAULT_REBOOT_TIMEOUT_SECONDS: i64 = 3600;
/// Shortest `spec.waitForReboot.timeoutSeconds`.
pub const MIN_REBOOT_TIMEOUT_SECONDS: i64 = 5;
/// Longest `spec.waitForReboot.timeoutSeconds`: a week.
pub const MAX_REBOOT_TIMEOUT_SECONDS: i64 = 7 * 24 * 3600;
/// Longest `spec.nodeName`: a DNS subdomain, as Node names are.
pub const MAX_NODE_NAME_LEN: usize = 253;

/// Decodes an object from the API. Stages are read leniently (see
/// [`Stage`]); anything else that does not fit the type is an error naming
/// the object and the field serde stumbled on.
pub fn parse(obj: &Value) -> Result<NodeMaintenance, Vec<String>> {
    serde_json::from_value(obj.clone()).map_err(|e| {
        vec![format!(
            "NodeMaintenance {:?} does not decode: {e}; fix the object to match the maintd.io/v1alpha1 schema",
            obj["metadata"]["name"].as_str().unwrap_or("<unnamed>")
        )]
    })
}

/// Every problem with `nm`, each one sentence naming the field; `Ok` if
/// the agents may act on it.
pub fn validate(nm: &NodeMaintenance) -> Result<(), Vec<String>> {
    let spec = &nm.spec;
    let mut problems = Vec::new();
    if let Stage::Unknown(s) = &spec.stage {
        problems.push(format!(
            "spec.stage {s:?} is not a stage; use one of {}",
            STAGES.join(", ")
        ));
    }
    match (&spec.node_name, &spec.node_selector) {
        (Some(_), Some(_)) => {
            problems.push("spec sets both nodeName and nodeSelector; set exactly one".to_string())
        }
        (None, None) => problems
            .push("spec sets neither nodeName nor nodeSelector; set exactly one".to_string()),
        (Some(name), None) if name.is_empty() => {
            problems.push("spec.nodeName is empty; name the node".to_string())
        }
        _ => {}
    }
    if let Some(sel) = &spec.node_selector {
        // selector_matches checks the selector before matching anything.
        match selector_matches(sel, &BTreeMap::new()) {
            Err(PlanError::Selector(e)) => problems.push(format!("spec.nodeSelector: {e}")),
            Err(e) => problems.push(format!("spec.nodeSelector: {e}")),
            Ok(_) => {}
        }
    }
    if spec.drain_plan.len() > MAX_PLAN_ENTRIES {
        problems.push(format!(
            "spec.drainPlan has {} entries; at most {MAX_PLAN_ENTRIES} are allowed",
            spec.drain_plan.len()
        ));
    } else if let Err(e) = validate_entries(&spec.drain_plan) {
        problems.push(format!("spec.drainPlan: {e}"));
    }
    if spec.reason.len() > MAX_REASON_LEN {
        problems.push(format!(
            "spec.reason is {} bytes long; at most {MAX_REASON_LEN} are allowed",
            spec.reason.len()
        ));
    }
    if let Some(n) = spec.max_concurrent_drains
        && !(1..=MAX_CONCURRENT_DRAINS).contains(&n)
    {
        problems.push(format!(
            "spec.maxConcurrentDrains is {n}; give 1 to {MAX_CONCURRENT_DRAINS}, or leave it unset to drain every selected node at once"
        ));
    }
    if let Some(n) = spec.cordon_ahead {
        if !(0..=MAX_CORDON_AHEAD).contains(&n) {
            problems.push(format!(
                "spec.cordonAhead is {n}; give 0 to {MAX_CORDON_AHEAD}, or leave it unset to cordon a node only when it takes its drain slot"
            ));
        }
        if spec.max_concurrent_drains.is_none() {
            problems.push(
                "spec.cordonAhead needs spec.maxConcurrentDrains: nodes are cordoned ahead of their turn, so there must be turns".to_string(),
            );
        }
    }
    if let Some(w) = &spec.wait_for_reboot {
        if spec.max_concurrent_drains.is_none() {
            problems.push(
                "spec.waitForReboot needs spec.maxConcurrentDrains: a node's turn ends when it has rebooted, so there must be turns".to_string(),
            );
        }
        if let Some(t) = w.timeout_seconds
            && !(MIN_REBOOT_TIMEOUT_SECONDS..=MAX_REBOOT_TIMEOUT_SECONDS).contains(&t)
        {
            problems.push(format!(
                "spec.waitForReboot.timeoutSeconds is {t}; give {MIN_REBOOT_TIMEOUT_SECONDS} to {MAX_REBOOT_TIMEOUT_SECONDS} seconds (a week) or leave it unset for {DEFAULT_REBOOT_TIMEOUT_SECONDS}"
            ));
        }
    }
    if let Some(t) = spec.stage_timeout_seconds
        && !(1..=MAX_STAGE_TIMEOUT_SECONDS).contains(&t)
    {
        problems.push(format!(
            "spec.stageTimeoutSeconds is {t}; give 1 to {MAX_STAGE_TIMEOUT_SECONDS} seconds (a week) or leave it unset"
        ));
    }
    if let Some(name) = &spec.node_name
        && name.len() > MAX_NODE_NAME_LEN
    {
        problems.push(format!(
            "spec.nodeName is {} bytes long; a node name has at most {MAX_NODE_NAME_LEN}",
            name.len()
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}
