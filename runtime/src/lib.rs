//! workdo: a Postgres-native workflow runtime for object-centric work.
//!
//! See `ARCHITECTURE.md` for the map. The rooms, each depending only on those above it:
//! - [`model`]: pure data and decisions (statuses, templates, schedules, retry, alert text);
//! - [`store`]: every SQL statement, and the database's connection and migrations;
//! - [`invoke`]: calling step functions (exec, warm, http, builtin);
//! - [`runtime`]: the services of `workdo up` (workers, completers, listener, maintenance,
//!   scheduler, alerts);
//! - [`api`], [`bench`], [`demo`] and [`cli`]: the surfaces; [`output`] prints for them and
//!   [`graph`] draws workflows for them;
//! - [`pg`]: the private Postgres cluster; [`telemetry`]: traces, logs and metrics;
//!   [`artifact`]: a deployed function's bytes packed, checked and unpacked (a leaf).

pub mod api;
pub mod artifact;
pub mod bench;
pub mod cli;
pub mod demo;
pub mod graph;
pub mod invoke;
pub mod model;
pub mod output;
pub mod pg;
pub mod runtime;
pub mod store;
pub mod telemetry;

pub use model::status::Status;
pub use store::{Store, StoreError};

/// Make ring rustls's process-wide crypto provider (for HTTPS function calls and SMTPS);
/// calling it again is harmless.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
