//! maintd: a node-local Kubernetes maintenance agent.
pub mod drain;
pub mod sim;
pub mod trigger;
