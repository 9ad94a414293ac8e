//! `undrain NODE --wait`: until the Node takes pods again and its agent
//! reports the drain over, or something says it will not be.

use std::io::Write;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{follower, keep, progress, said, taken_up};
use crate::fleet::{FleetError, NODEDRAINS};

/// What the node and its NodeDrain come to for `maintd undrain --wait`.
#[derive(Debug, PartialEq, Eq)]
pub enum UndrainVerdict {
    Waiting,
    Schedulable,
    /// It stays drained or cordoned for something other than
    /// `maintd drain`: why.
    Held(String),
}

/// Whether the Node takes pods: not cordoned, no maintd drain taint.
fn schedulable(node: &Value) -> bool {
    node["spec"]["unschedulable"] != true
        && node["spec"]["taints"]
            .as_array()
            .is_none_or(|ts| ts.iter().all(|t| t["key"] != "maintd.io/draining"))
}

/// Back in service once the Node takes pods and its NodeDrain is Idle
/// with `maintenance` gone from it; held when other triggers still ask
/// for the drain, or a cordon that is not maintd's stays.
pub fn undrain_verdict(node: &Value, nd: Option<&Value>, maintenance: &str) -> UndrainVerdict {
    let Some(nd) = nd else {
        return UndrainVerdict::Waiting;
    };
    if taken_up(nd, maintenance) {
        return UndrainVerdict::Waiting;
    }
    let st = &nd["status"];
    let ours = format!("NodeMaintenance {maintenance} (");
    let triggers: Vec<&str> = st["triggers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The agent drops our trigger a moment after the object: until then,
    // wait.
    if triggers.iter().any(|t| t.starts_with(&ours)) {
        return UndrainVerdict::Waiting;
    }
    let name = node["metadata"]["name"].as_str().unwrap_or("?");
    if !triggers.is_empty() {
        return UndrainVerdict::Held(format!(
            "node {name} stays drained: {} still ask{} for it (maintd undrain removes only what maintd drain made)",
            triggers.join("; "),
            if triggers.len() == 1 { "s" } else { "" }
        ));
    }
    if st["phase"] != "Idle" {
        return UndrainVerdict::Waiting;
    }
    if schedulable(node) {
        return UndrainVerdict::Schedulable;
    }
    if node["metadata"]["annotations"][crate::cluster::CORDONED_ANNOTATION].is_string() {
        return UndrainVerdict::Waiting;
    }
    UndrainVerdict::Held(format!(
        "maintd no longer drains node {name}, but it is still cordoned, not by maintd (it was cordoned before the drain, or by someone since): kubectl uncordon {name} if it should take pods"
    ))
}

/// One line on the way back.
pub fn undrain_line(node_name: &str, node: Option<&Value>, nd: Option<&Value>) -> String {
    let Some(nd) = nd else {
        return format!("{node_name}: no NodeDrain: is maintd running on {node_name}?");
    };
    let phase = nd["status"]["phase"].as_str().unwrap_or("unknown");
    let cordon = match node {
        Some(n) if schedulable(n) => "schedulable",
        Some(_) => "cordoned",
        None => "node not seen yet",
    };
    format!("{node_name}: {phase}, {cordon}")
}

/// Waits until the node takes pods again and its NodeDrain is Idle without
/// `maintenance`.
pub async fn until_undrained(
    client: &kube::Client,
    server: &str,
    node: &str,
    maintenance: &str,
    timeout: Duration,
    out: &mut (dyn Write + Send),
) -> Result<(), FleetError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let need = "list and watch on nodedrains.maintd.io and nodes";
    let mut drains = follower(
        client,
        server,
        NODEDRAINS,
        node,
        &format!("NodeDrain {node}"),
        need,
    );
    let mut nodes = follower(
        client,
        server,
        "/api/v1/nodes",
        node,
        &format!("node {node}"),
        need,
    );
    let (mut nd, mut n) = (None, None);
    let (mut nd_listed, mut n_listed) = (false, false);
    let mut last = String::new();
    loop {
        tokio::select! {
            c = drains.next() => { keep(&mut nd, c?); nd_listed = true; }
            c = nodes.next() => { keep(&mut n, c?); n_listed = true; }
            () = tokio::time::sleep_until(deadline) => {
                writeln!(out, "{}", undrain_line(node, n.as_ref(), nd.as_ref()))?;
                return Err(FleetError::Refused(format!(
                    "timed out after {}: node {node} is not back in service",
                    said(timeout)
                )));
            }
        }
        if !(nd_listed && n_listed) {
            continue;
        }
        let Some(node_obj) = &n else {
            return Err(FleetError::Refused(format!(
                "node {node} was deleted while waiting for it to take pods again"
            )));
        };
        progress(
            out,
            start,
            &mut last,
            undrain_line(node, Some(node_obj), nd.as_ref()),
        )?;
        match undrain_verdict(node_obj, nd.as_ref(), maintenance) {
            UndrainVerdict::Waiting => {}
            UndrainVerdict::Schedulable => {
                writeln!(out, "node/{node} uncordoned")?;
                return Ok(());
            }
            UndrainVerdict::Held(why) => return Err(FleetError::Refused(why)),
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::wait::tests::nd;
    use serde_json::json;

    fn node(unschedulable: bool, ours: bool) -> Value {
        let mut n = json!({"metadata": {"name": "node-a", "annotations": {}}, "spec": {"unschedulable": unschedulable}});
        if ours {
            n["metadata"]["annotations"][crate::cluster::CORDONED_ANNOTATION] = json!("true");
        }
        n
    }

    #[test]
    fn back_in_service_needs_the_node_and_its_agent_to_say_so() {
        let m = "drain-node-a";
        let ours = "NodeMaintenance drain-node-a (stage Drain)";
        let cases = [
            (
                node(true, true),
                Some(nd("Drained", &[m], &[ours])),
                UndrainVerdict::Waiting,
            ),
            (
                node(true, true),
                Some(nd("Drained", &[], &[ours])),
                UndrainVerdict::Waiting,
            ),
            (
                node(true, true),
                Some(nd("Drained", &[], &[])),
                UndrainVerdict::Waiting,
            ),
            (
                node(true, true),
                Some(nd("Idle", &[], &[])),
                UndrainVerdict::Waiting,
            ),
            (
                node(false, false),
                Some(nd("Drained", &[], &[])),
                UndrainVerdict::Waiting,
            ),
            (node(false, false), None, UndrainVerdict::Waiting),
            (
                node(false, false),
                Some(nd("Idle", &[], &[])),
                UndrainVerdict::Schedulable,
            ),
        ];
        for (n, d, want) in cases {
            assert_eq!(undrain_verdict(&n, d.as_ref(), m), want, "{n} {d:?}");
        }
        let held = undrain_verdict(
            &node(true, true),
            Some(&nd(
                "Drained",
                &["rack-7"],
                &["NodeMaintenance rack-7 (stage Drain)"],
            )),
            m,
        );
        assert!(
            matches!(&held, UndrainVerdict::Held(w) if w.contains("NodeMaintenance rack-7 (stage Drain) still asks")),
            "{held:?}"
        );
        let cordoned = undrain_verdict(&node(true, false), Some(&nd("Idle", &[], &[])), m);
        assert!(
            matches!(&cordoned, UndrainVerdict::Held(w) if w.contains("kubectl uncordon node-a")),
            "{cordoned:?}"
        );
    }
}
