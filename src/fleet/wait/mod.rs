//! `drain NODE --wait` and `undrain NODE --wait`: a line each time the
//! node's drain moves, read from its NodeDrain (and the NodeMaintenance's
//! `Valid` condition, the Node's cordon), until it is done, something
//! says it cannot be, or the bound runs out. Watched, not polled.

use std::io::Write;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::follow::{Change, Follower};
use super::{FleetError, NODEDRAINS, NODEMAINTENANCES};
use crate::api::status::VALID_CONDITION;

mod undrained;
pub use undrained::{UndrainVerdict, undrain_line, undrain_verdict, until_undrained};

/// What the NodeDrain's state comes to for `maintd drain --wait`.
#[derive(Debug, PartialEq, Eq)]
pub enum DrainVerdict {
    Waiting,
    Drained,
    Failed(String),
}

/// Whether the agent has taken up `maintenance` (its NodeDrain lists it).
fn taken_up(nd: &Value, maintenance: &str) -> bool {
    nd["status"]["maintenances"]
        .as_array()
        .is_some_and(|a| a.iter().any(|m| m == maintenance))
}

/// Drained once the agent reports the node drained for `maintenance`: an
/// old `Drained` from before it saw the object does not count.
pub fn drain_verdict(nd: Option<&Value>, maintenance: &str) -> DrainVerdict {
    let Some(nd) = nd.filter(|nd| taken_up(nd, maintenance)) else {
        return DrainVerdict::Waiting;
    };
    match nd["status"]["phase"].as_str() {
        Some("Drained") => DrainVerdict::Drained,
        Some("Failed") => DrainVerdict::Failed(
            nd["status"]["lastError"]
                .as_str()
                .unwrap_or("no error given")
                .to_string(),
        ),
        _ => DrainVerdict::Waiting,
    }
}

/// One line on where the drain stands.
pub fn drain_line(node: &str, nd: Option<&Value>, maintenance: &str) -> String {
    let Some(nd) = nd else {
        return format!("{node}: no NodeDrain yet: is maintd running on {node}?");
    };
    let st = &nd["status"];
    let phase = st["phase"].as_str().unwrap_or("unknown");
    if !taken_up(nd, maintenance) {
        return format!(
            "{node}: {phase}; its agent has not taken up NodeMaintenance {maintenance} yet"
        );
    }
    let mut line = format!("{node}: {phase}");
    if let Some(stage) = st["stage"].as_str() {
        line.push_str(&format!(", stage {stage}"));
    }
    let total = st["podsTotal"].as_i64().unwrap_or(0);
    if total > 0 {
        line.push_str(&format!(
            ", {} of {total} pods left",
            st["podsRemaining"].as_i64().unwrap_or(0)
        ));
    }
    let blocked = super::table::blocked_by(st);
    if blocked != super::table::NONE {
        line.push_str(&format!("; {blocked}"));
    }
    line
}

/// A bound as a person reads it: 1h, 15m, 90s.
fn said(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The latest state of one object, from its follower's changes.
fn keep(slot: &mut Option<Value>, change: Change) {
    match change {
        Change::Listed(items) => *slot = items.into_iter().next(),
        Change::Applied(o) => *slot = Some(o),
        Change::Deleted(_) => *slot = None,
    }
}

fn follower(
    client: &kube::Client,
    server: &str,
    path: &str,
    name: &str,
    what: &str,
    need: &str,
) -> Follower {
    Follower::new(
        client.clone(),
        server,
        path,
        Some(format!("metadata.name={name}")),
        what,
        need,
    )
}

/// Prints `line` after the time since `start`, if it says something new.
fn progress(
    out: &mut (dyn Write + Send),
    start: Instant,
    last: &mut String,
    line: String,
) -> Result<(), FleetError> {
    if *last != line {
        writeln!(out, "[{:>6.1}s] {line}", start.elapsed().as_secs_f64())?;
        out.flush()?;
        *last = line;
    }
    Ok(())
}

/// Waits until the node's agent reports it drained for `maintenance`.
pub async fn until_drained(
    client: &kube::Client,
    server: &str,
    node: &str,
    maintenance: &str,
    timeout: Duration,
    out: &mut (dyn Write + Send),
) -> Result<(), FleetError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let need = "list and watch on nodedrains.maintd.io and nodemaintenances.maintd.io";
    let mut drains = follower(
        client,
        server,
        NODEDRAINS,
        node,
        &format!("NodeDrain {node}"),
        need,
    );
    let mut objects = follower(
        client,
        server,
        NODEMAINTENANCES,
        maintenance,
        &format!("NodeMaintenance {maintenance}"),
        need,
    );
    let (mut nd, mut nm) = (None, None);
    let (mut nd_listed, mut nm_listed) = (false, false);
    let mut last = String::new();
    loop {
        tokio::select! {
            c = drains.next() => { keep(&mut nd, c?); nd_listed = true; }
            c = objects.next() => { keep(&mut nm, c?); nm_listed = true; }
            () = tokio::time::sleep_until(deadline) => {
                writeln!(out, "{}", drain_line(node, nd.as_ref(), maintenance))?;
                return Err(FleetError::Refused(format!(
                    "timed out after {}: node {node} is not drained; NodeMaintenance {maintenance} stays and the drain goes on (maintd undrain {node} gives up)",
                    said(timeout)
                )));
            }
        }
        if !(nd_listed && nm_listed) {
            continue;
        }
        let Some(object) = &nm else {
            return Err(FleetError::Refused(format!(
                "NodeMaintenance {maintenance} was deleted while waiting (maintd undrain {node}, or by hand): node {node} is not reported drained"
            )));
        };
        if let Some(invalid) = object["status"]["conditions"].as_array().and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == VALID_CONDITION && c["status"] == "False")
        }) {
            return Err(FleetError::Refused(format!(
                "NodeMaintenance {maintenance} is invalid, so no agent acts on it: {}",
                invalid["message"].as_str().unwrap_or("no reason given")
            )));
        }
        progress(
            out,
            start,
            &mut last,
            drain_line(node, nd.as_ref(), maintenance),
        )?;
        match drain_verdict(nd.as_ref(), maintenance) {
            DrainVerdict::Waiting => {}
            DrainVerdict::Drained => {
                writeln!(out, "node/{node} drained")?;
                return Ok(());
            }
            DrainVerdict::Failed(why) => {
                return Err(FleetError::Refused(format!(
                    "the drain of node {node} failed: {why}"
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn nd(phase: &str, maintenances: &[&str], triggers: &[&str]) -> Value {
        json!({"metadata": {"name": "node-a"}, "status": {
            "phase": phase, "maintenances": maintenances, "triggers": triggers,
            "podsTotal": 8, "podsRemaining": 3, "stage": "2/5: Default ≤ 0",
            "lastError": "2 pods left after every stage's time ran out"}})
    }

    #[test]
    fn drained_counts_only_once_the_agent_took_up_the_object() {
        let m = "drain-node-a";
        assert_eq!(drain_verdict(None, m), DrainVerdict::Waiting);
        assert_eq!(
            drain_verdict(Some(&nd("Drained", &[], &[])), m),
            DrainVerdict::Waiting,
            "an old Drained before the object was seen"
        );
        assert_eq!(
            drain_verdict(Some(&nd("Drained", &["rack-7", m], &[])), m),
            DrainVerdict::Drained
        );
        assert!(matches!(
            drain_verdict(Some(&nd("Failed", &[m], &[])), m),
            DrainVerdict::Failed(why) if why.contains("time ran out")
        ));
        assert_eq!(
            drain_line("node-a", Some(&nd("Draining", &[m], &[])), m),
            "node-a: Draining, stage 2/5: Default ≤ 0, 3 of 8 pods left"
        );
        assert!(drain_line("node-a", None, m).contains("is maintd running on node-a?"));
        assert!(
            drain_line("node-a", Some(&nd("Idle", &[], &[])), m)
                .contains("has not taken up NodeMaintenance drain-node-a")
        );
    }
}
