//! maintd: a node-local Kubernetes maintenance agent.
pub mod sim;
