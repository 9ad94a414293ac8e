//! maintd: a node-local Kubernetes maintenance agent.
pub mod agent;
pub mod api;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod coordination;
pub mod demo;
pub mod drain;
pub mod fleetlock;
pub mod http;
pub mod index;
pub mod inhibitor;
pub mod logind;
pub mod metrics;
pub mod plan_cmd;
pub mod sim;
pub mod trigger;
