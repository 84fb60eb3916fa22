//! The engine on a real Postgres: steps, queues, claims and leases, counts, events, the schema, loading templates, restarts, kills and misbehaving functions, the hot tables' vacuums.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod bulk_from;
mod chaos;
mod counts;
mod counts_updates;
mod engine;
mod engine_events;
mod engine_plans;
mod engine_queues;
mod everyday;
mod fuzz;
mod leases;
mod loading;
mod lock_order;
mod misbehaving;
mod restart;
mod runtime_lifecycle;
mod schema;
mod templates;
mod unknown_names;
mod upkeep;
