//! The drain engine's pure core: which pods go, in which order, and how much
//! of a shutdown budget each stage may use.
//!
//! Everything here is plain data in, plain data out — no client, no async, no
//! clock — so the executor and the shutdown trigger can stay thin and these
//! decisions can be tested exhaustively.
//!
//! - [`plan`]: pods on the node + KEP-4212 drain plan entries → ordered stages.
//! - [`budget`]: a logind delay budget → one time share per stage.

pub mod budget;
pub mod plan;

// The engine's I/O side: running the plan, the static pod stash, and what a
// drain reports as it goes.
pub mod budget_watches;
pub mod eviction_requests;
pub mod executor;
pub mod progress;
pub mod static_path;
pub mod static_pods;
pub mod volumes;
