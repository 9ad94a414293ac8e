//! Simulations for the demo and tests.
pub mod dbus;
pub mod logind;
