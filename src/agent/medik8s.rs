//! The agent's side of medik8s compatibility: letting go of objects being
//! deleted once the node is no longer held for them.

use std::time::Duration;

use super::Agent;

impl Agent {
    /// Takes medik8s' finalizer off this node's objects that are being
    /// deleted (see [`crate::api::medik8s::awaits_release`]). A failure is
    /// logged; returns false if one failed, to be tried again shortly.
    pub(super) async fn release_medik8s_objects(&self) -> bool {
        use crate::api::medik8s;
        let Some(m) = &self.medik8s else { return true };
        let mut ok = true;
        for obj in m.index.all() {
            if !medik8s::awaits_release(&obj, &self.config.node) {
                continue;
            }
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            // Bounded: this runs in the agent's loop, which must stay free
            // to answer a shutdown.
            let call = self
                .drainer
                .ops
                .remove_finalizer(medik8s::PATH, &obj, medik8s::FINALIZER);
            match tokio::time::timeout(Duration::from_secs(10), call).await {
                Ok(Ok(())) => tracing::info!(
                    name,
                    "the medik8s NodeMaintenance no longer holds the node; removed its finalizer"
                ),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "will retry");
                    ok = false;
                }
                Err(_) => {
                    tracing::warn!(name, "removing the finalizer timed out; will retry");
                    ok = false;
                }
            }
        }
        ok
    }
}
