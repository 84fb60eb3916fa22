//! Dynamic dispatch: observers, generators, composition, queues of generated steps, failures and recomposition.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod dispatch;
mod dispatch_commit;
mod dispatch_failures;
mod dispatch_queues;
mod recompose;
mod recompose_watch;
