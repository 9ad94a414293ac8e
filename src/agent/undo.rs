//! Ending a maintenance: undoing the drain until it is done, and knowing
//! whether anything of it is left on the node or the disk.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Agent;
use crate::cluster::CORDONED_ANNOTATION;

impl Agent {
    /// Whether maintd has taken the node out of scheduling already: it is
    /// cordoned and carries maintd's own taint (a drain got that far).
    pub(super) fn marked_out(&self) -> bool {
        self.node.by_name(&self.config.node).is_some_and(|n| {
            n["spec"]["unschedulable"] == true && super::cordon::carries(&n, &self.drainer.taint)
        })
    }

    /// Why a drain may not be undone though no valid trigger asks for it:
    /// an invalid NodeMaintenance that may select this node (see
    /// [`crate::trigger::maintenance::Evaluation::invalid_selecting`]).
    pub(super) fn invalid_holding(&self) -> Option<String> {
        let node = self.node.by_name(&self.config.node)?;
        let eval = self.maintenance.evaluate(&node);
        let names = eval.invalid_selecting(&node);
        (!names.is_empty()).then(|| {
            format!(
                "NodeMaintenance {} is not valid and may select this node: what it asks is not known, so maintd evicts nothing more and undoes nothing until it is valid again or deleted (kubectl get nodemaintenance -o yaml shows why in its Valid condition)",
                names.join(", ")
            )
        })
    }

    /// Whether the node or the disk still carry maintd's marks.
    pub(super) fn has_leftovers(&self) -> bool {
        let marked = self
            .node
            .by_name(&self.config.node)
            .is_some_and(|n| carries_marks(&n, &self.drainer.taint.key));
        let stashed = self
            .drainer
            .stash
            .as_ref()
            // A stash that cannot be read now (the node helper still
            // starting) may hold manifests: the undo is tried, and retried
            // until it can be read.
            .is_some_and(|s| s.stashed().map(|f| !f.is_empty()).unwrap_or(true));
        marked || stashed
    }

    pub(super) async fn undo_until_done(&self, stop: &CancellationToken) {
        let mut backoff = crate::index::Backoff::with(500, 10_000);
        while self.drainer.undo().await.is_err() {
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = stop.cancelled() => return,
            }
        }
        // Let the node watch catch up with the undo before judging leftovers.
        let node = self.node.clone();
        let name = self.config.node.clone();
        let key = self.drainer.taint.key.clone();
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            node.wait_until(move |i| i.by_name(&name).is_none_or(|n| !carries_marks(&n, &key))),
        )
        .await;
    }
}

/// Whether the node still carries maintd's cordon record or its taint.
fn carries_marks(node: &serde_json::Value, taint_key: &str) -> bool {
    node["metadata"]["annotations"][CORDONED_ANNOTATION].is_string()
        || node["spec"]["taints"]
            .as_array()
            .is_some_and(|ts| ts.iter().any(|t| t["key"] == taint_key))
}
