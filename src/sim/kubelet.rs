//! Placeholder: simulated kubelets.
use super::state::SimState;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
pub fn start(_sim: Arc<SimState>, _stop: CancellationToken) {}
