//! Triggers: everything that can ask for this node to be drained. Each one
//! becomes the same request to the drain engine.

pub mod local;
pub mod maintenance;
pub mod medik8s;
pub mod shutdown;
pub mod taint;

use crate::drain::plan::PlanEntry;

/// What the triggers together want for the node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    /// Why, one line per active trigger (e.g. "taint maintd.io/drain").
    pub sources: Vec<String>,
    /// Evict pods (false: cordon and taint only).
    pub evict: bool,
    /// The plan entries to use; None for the default plan.
    pub entries: Option<Vec<PlanEntry>>,
    /// A shutdown is waiting: everything must be done by then.
    pub deadline: Option<tokio::time::Instant>,
    /// A NodeMaintenance's stageTimeoutSeconds, overriding the agent's.
    pub stage_timeout: Option<std::time::Duration>,
}

impl Desired {
    pub fn active(&self) -> bool {
        !self.sources.is_empty()
    }

    /// Whether `other` asks for the same drain (same plan, same deadline),
    /// whichever triggers ask for it: a drain under way then goes on.
    pub fn same_drain(&self, other: &Desired) -> bool {
        self.evict == other.evict
            && self.entries == other.entries
            && self.deadline == other.deadline
            && self.stage_timeout == other.stage_timeout
    }
}
