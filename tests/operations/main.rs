//! Operating workdo: the CLI and its private cluster, Compose, poolers, failover, the Sidekiq hand-off, alert mail, schedules and the bench.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod alerts;
mod bench;
mod cli;
mod compose;
mod failover;
mod pooler;
mod redis_urls;
mod schedules;
mod sidekiq;
