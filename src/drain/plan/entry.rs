//! KEP-4212 drain plan entries, and the checks a plan must pass before use.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::selector::{SelectorError, validate_selector};

/// The kind of pod, which decides how it is drained and in which phase.
///
/// Ordered as they drain: `Default < DaemonSet < Static`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum PodType {
    /// Any pod not owned by a DaemonSet and not static; evicted first.
    Default,
    /// Controlled by a DaemonSet; evicted once the node carries the drain taint.
    DaemonSet,
    /// A static pod (mirror pod on the API); its manifest is stashed.
    Static,
}

impl fmt::Display for PodType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PodType::Default => "Default",
            PodType::DaemonSet => "DaemonSet",
            PodType::Static => "Static",
        })
    }
}

/// One entry of a KEP-4212 `drainPlan`: a stage selecting the pods of
/// `pod_type` with priority ≤ `pod_priority` (and matching `pod_selector`, if
/// any) that no earlier entry selected.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    pub pod_type: PodType,
    /// The priority ceiling of this stage (inclusive).
    pub pod_priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
}

/// Why a drain plan (or a selector in it) cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Entries must go Default, then DaemonSet, then Static.
    #[error(
        "drain plan entry {index} (podType {pod_type}) comes after entry {previous_index} \
         (podType {previous}); order the entries Default, then DaemonSet, then Static"
    )]
    TypeOutOfOrder {
        index: usize,
        pod_type: PodType,
        previous_index: usize,
        previous: PodType,
    },
    /// Within one pod type, ceilings must not go down.
    #[error(
        "drain plan entry {index} (podType {pod_type}) has podPriority {priority}, lower than \
         {previous} in entry {previous_index}; list each type's priorities in ascending order"
    )]
    PriorityOutOfOrder {
        index: usize,
        pod_type: PodType,
        priority: i32,
        previous_index: usize,
        previous: i32,
    },
    /// An entry's podSelector is malformed.
    #[error("drain plan entry {index}: podSelector {source}")]
    EntrySelector { index: usize, source: SelectorError },
    /// A selector is malformed (outside of any entry).
    #[error("label selector {0}")]
    Selector(#[from] SelectorError),
}

/// Checks that entries are in drain order and their selectors are well formed.
///
/// Order: a type never follows a later type, and `podPriority` never goes down
/// within a type (equal is allowed: the same ceiling split by selectors).
/// Reports the first problem, naming the entry by its index in the list.
pub fn validate_entries(entries: &[PlanEntry]) -> Result<(), PlanError> {
    for (index, entry) in entries.iter().enumerate() {
        if let Some(selector) = &entry.pod_selector {
            validate_selector(selector)
                .map_err(|source| PlanError::EntrySelector { index, source })?;
        }
        let Some(previous_index) = index.checked_sub(1) else {
            continue;
        };
        let previous = &entries[previous_index];
        if entry.pod_type < previous.pod_type {
            return Err(PlanError::TypeOutOfOrder {
                index,
                pod_type: entry.pod_type,
                previous_index,
                previous: previous.pod_type,
            });
        }
        if entry.pod_type == previous.pod_type && entry.pod_priority < previous.pod_priority {
            return Err(PlanError::PriorityOutOfOrder {
                index,
                pod_type: entry.pod_type,
                priority: entry.pod_priority,
                previous_index,
                previous: previous.pod_priority,
            });
        }
    }
    Ok(())
}
