//! The agent's side of medik8s compatibility: letting go of objects being
//! deleted once the node is no longer held for them.

use std::time::Duration;

use super::Agent;

/// The most one pass may spend releasing: it runs in the agent's loop,
/// which must stay free to answer logind.
const PASS_BUDGET: Duration = Duration::from_secs(5);

impl Agent {
    /// Whether one of this node's medik8s objects waits for its finalizer
    /// to be removed (a cheap look at the index).
    pub(super) fn medik8s_waiting(&self) -> bool {
        self.medik8s.as_ref().is_some_and(|m| {
            m.index
                .all()
                .iter()
                .any(|o| crate::api::medik8s::awaits_release(o, &self.config.node))
        })
    }

    /// Takes medik8s' finalizer off this node's objects that are being
    /// deleted (see [`crate::api::medik8s::awaits_release`]), once the node
    /// is not held for them: another trigger `held` it, or the undo left
    /// nothing behind. Within [`PASS_BUDGET`]; a failure is logged, and
    /// false returned if one failed or the budget ran out, to be tried
    /// again shortly.
    pub(super) async fn release_medik8s_objects(&self, held: bool) -> bool {
        use crate::api::medik8s;
        let Some(m) = &self.medik8s else { return true };
        let waiting: Vec<_> = m
            .index
            .all()
            .into_iter()
            .filter(|o| medik8s::awaits_release(o, &self.config.node))
            .collect();
        // The leftovers check reads the stash directory: only when there
        // is something to release.
        if waiting.is_empty() || (!held && self.has_leftovers()) {
            return true;
        }
        let pass = async {
            let mut ok = true;
            for obj in &waiting {
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                let ops = &self.drainer.ops;
                match ops
                    .remove_finalizer(medik8s::PATH, obj, medik8s::FINALIZER)
                    .await
                {
                    Ok(()) => tracing::info!(
                        name,
                        "the medik8s NodeMaintenance no longer holds the node; removed its finalizer"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "will retry");
                        ok = false;
                    }
                }
            }
            ok
        };
        tokio::time::timeout(PASS_BUDGET, pass)
            .await
            .unwrap_or_else(|_| {
                tracing::warn!("removing medik8s finalizers took too long; will retry");
                false
            })
    }
}
