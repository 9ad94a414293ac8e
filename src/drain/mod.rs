//! The drain: which pods go in which order (plan), running it (executor),
//! static pod manifests (static_pods), the shutdown time budget (budget) and
//! what the drain reports as it goes (progress).

pub mod budget;
pub mod executor;
pub mod plan;
pub mod progress;
pub mod static_pods;
