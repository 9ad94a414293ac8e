//! Cluster-wide coordination of planned drains: a counting semaphore of
//! reboot slots on coordination.k8s.io/v1 Leases in the agent's namespace,
//! and the control-plane quorum guard.
//!
//! Each group has `max_holders` slot Leases, `maintd-reboot-<group>-<i>`.
//! A slot's `spec.holderIdentity` is the node holding it. Taking a slot is
//! a create (of a missing Lease) or a replace guarded by the resourceVersion
//! that was read (of a free or expired one), so when two nodes race for a
//! slot the apiserver lets exactly one write through and the other gets 409
//! and tries the next slot. Holders renew every third of the lease
//! duration; a hold that this agent has seen unchanged for its
//! `leaseDurationSeconds`, by its own monotonic clock, is expired and may
//! be taken over, which is how a node that died holding a slot gives it
//! up. Releasing clears the holder, again guarded.
//!
//! Expiry never compares the holder's renewTime with this node's wall
//! clock (see [`LeaseClock`]): a node whose clock is wrong (just booted,
//! not yet synchronised) waits as long as any other before it takes a
//! slot over, as Kubernetes' leader election does.
//!
//! Shutdowns do not take slots: they cannot wait.

mod guard;
mod holds;
pub(crate) mod lease;
mod observed;
mod pace;
mod quorum;
mod slots;
mod waiter;

use std::time::Duration;

pub use guard::SlotGuard;
pub use holds::SlotHolds;
pub use lease::{GROUP_LABEL, holder as lease_holder, slot_name};
pub use observed::LeaseClock;
pub use quorum::{
    CONTROL_PLANE_LABEL, CONTROL_PLANE_LABELS, is_control_plane, is_control_plane_json, is_ready,
    not_ready_peers, quorum_guard,
};
pub use slots::{RebootSlots, groups_held_by};
pub use waiter::{Availability, SlotRequest, availability, wait_for_slot};

/// The group every control-plane node uses, with one holder.
pub const CONTROL_PLANE_GROUP: &str = "control-plane";

/// Default group for workers (Zincati's default group name too).
pub const DEFAULT_GROUP: &str = "default";

/// Default hold length: long enough for a node to reboot and its agent to
/// come back and resume renewing; how long a dead holder blocks others.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(300);

/// A node holding a slot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Holder {
    /// The node (the Lease's holderIdentity).
    pub holder: String,
    /// The slot Lease's name.
    pub slot: String,
}

/// What an attempt to take a slot came to.
#[derive(Debug)]
pub enum Acquisition<T> {
    /// The node holds a slot (`T` names it, or guards it).
    Acquired(T),
    /// Every slot is held by someone else.
    Full { holders: Vec<Holder> },
    /// A control-plane node may not start: these other control-plane nodes
    /// are not Ready.
    QuorumBlocked { not_ready: Vec<String> },
}

impl<T> Acquisition<T> {
    /// Whether a slot was taken.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Acquisition::Acquired(_))
    }
}

/// Why coordination failed.
#[derive(Debug, thiserror::Error)]
pub enum CoordinationError {
    #[error(
        "reboot slot lease {lease}: {message}; check the agent's RBAC for leases in its namespace and the API server, then retry"
    )]
    Api { lease: String, message: String },
    #[error(
        "node {node} no longer holds reboot slot {lease}: it expired and was taken over, or was released"
    )]
    Lost { node: String, lease: String },
    #[error("control-plane quorum guard for node {node}: {message}; retry")]
    Quorum { node: String, message: String },
    #[error("control-plane nodes not Ready: {}; a control-plane node waits until they are", not_ready.join(", "))]
    QuorumBlocked { not_ready: Vec<String> },
    /// The agent cannot tell which slots its node may take yet.
    #[error("{0}")]
    NodeUnknown(String),
}
