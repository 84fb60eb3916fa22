//! State machines: plans, alarms, calls, hierarchies, migration and processes.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod machines;
mod machines_alarms_left;
mod machines_calls_by_hand;
mod machines_hierarchy;
mod machines_migrate;
mod machines_plan;
mod machines_processes;
