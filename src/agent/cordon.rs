//! Someone uncordons the node while maintd's drain holds it: maintd
//! cordons it again and says who did it (a Warning Event naming the writer
//! found in the Node's managedFields), as OpenShift's machine-config daemon
//! does. Pods scheduled onto the node meanwhile are drained with the rest:
//! the drain plans from the node's pods as they are.

use std::time::Duration;

use serde_json::Value;

use super::reconcile::Reconciler;
use crate::cluster::TaintSpec;
use crate::drain::progress::EventKind;

/// Pause after a failed attempt, before the loop tries again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

impl Reconciler {
    /// Cordons the node again if a drain holds it (maintd's taint is on
    /// it) and it is not cordoned. One attempt at a time.
    pub(super) fn keep_cordoned(&mut self) {
        if self.running.is_none() || self.recordon.is_some() {
            return;
        }
        let agent = self.agent.clone();
        let Some(node) = agent.node.by_name(&agent.config.node) else {
            return;
        };
        if node["spec"]["unschedulable"] == true || !carries(&node, &agent.drainer.taint) {
            return;
        }
        let by = uncordoned_by(&node);
        self.recordon = Some(tokio::spawn(async move {
            let drainer = &agent.drainer;
            match drainer.ops.mark(&drainer.taint, true).await {
                Ok(_) => {
                    let p = agent.progress();
                    let mut ev = p.event(EventKind::NodeRecordoned);
                    ev.message = format!(
                        "the node was uncordoned{by} while maintd drains it; cordoned it again"
                    );
                    p.emit(ev);
                }
                Err(e) => {
                    agent.warn(format!(
                        "the node was uncordoned{by} while maintd drains it, and cordoning it again failed: {e}; retrying"
                    ));
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }));
    }
}

/// Whether the node carries maintd's own taint (its drain marked it).
pub(super) fn carries(node: &Value, taint: &TaintSpec) -> bool {
    node["spec"]["taints"].as_array().is_some_and(|ts| {
        ts.iter()
            .any(|t| t["key"] == taint.key.as_str() && t["effect"] == taint.effect.as_str())
    })
}

/// Who uncordoned the node, as far as its managedFields tell: the manager
/// that owns `spec.unschedulable` (now false), e.g. ` by kubectl-patch (at
/// 2026-11-24T10:00:00Z)`. A client that removed the field instead (as
/// `kubectl uncordon` does) owns nothing and leaves no trace, which is said.
pub(super) fn uncordoned_by(node: &Value) -> String {
    let owner = crate::cluster::unschedulable_owners(node)
        .into_iter()
        .find(|(m, _)| !m.starts_with("maintd/"));
    match owner {
        Some((manager, time)) => format!(" by {manager} (at {time})"),
        None => " (by a client the Node's managedFields do not name: `kubectl uncordon` removes the field and leaves no owner)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_uncordoner_is_the_owner_of_spec_unschedulable_if_any() {
        let node = json!({"metadata": {"managedFields": [
            {"manager": "kubeadm", "operation": "Update", "time": "2026-11-01T00:00:00Z",
             "fieldsV1": {"f:metadata": {"f:labels": {}}}},
            {"manager": "maintd/node-a", "operation": "Update", "time": "2026-11-24T10:00:05Z",
             "fieldsV1": {"f:spec": {"f:taints": {}}}},
            {"manager": "rancher", "operation": "Update", "time": "2026-11-24T10:00:07Z",
             "fieldsV1": {"f:spec": {"f:unschedulable": {}}}},
            {"manager": "kubelet", "operation": "Update", "subresource": "status",
             "time": "2026-11-24T10:00:09Z", "fieldsV1": {"f:status": {}}},
        ]}});
        assert_eq!(
            uncordoned_by(&node),
            " by rancher (at 2026-11-24T10:00:07Z)"
        );
        let unnamed = uncordoned_by(&json!({"metadata": {}}));
        assert!(unnamed.contains("do not name"), "{unnamed}");
    }
}
