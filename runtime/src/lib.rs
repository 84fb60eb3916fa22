//! workdo: a Postgres-native workflow runtime for object-centric work.
//!
//! See `ARCHITECTURE.md` for the map. In short: [`template`] parses and validates workflow
//! templates, [`store`] holds every SQL statement, [`pg`] and [`db`] find or start the database,
//! and [`cli`] is the `workdo` command.

pub mod alerts;
pub mod api;
pub mod bench;
pub mod cli;
pub mod db;
pub mod demo;
pub mod function;
pub mod pg;
pub mod retry;
pub mod schedules;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod template;
pub mod worker;

pub use status::Status;
pub use store::{Store, StoreError};

/// Make ring rustls's process-wide crypto provider (for HTTPS function calls and SMTPS);
/// calling it again is harmless.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
