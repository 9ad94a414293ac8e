//! Support for the real-node tests (tests/real_kubelet_*.rs): a real
//! kubelet with containerd (scripts/real-node) on a control plane of its
//! own, deploy/ installed on it, workloads whose processes take real time
//! to stop, and what the API server's audit log and a watch of the pods
//! say happened.

pub mod install;
pub mod node;
pub mod scenario;
pub mod timeline;
pub mod workloads;
