//! maintd: a node-local Kubernetes maintenance agent.
pub mod inhibitor;
pub mod logind;
pub mod sim;
