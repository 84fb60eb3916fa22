//! workdo: a Postgres-native workflow runtime for object-centric work.
//!
//! See `ARCHITECTURE.md` for the map. In short: [`template`] parses and validates workflow
//! templates, [`store`] holds every SQL statement, [`pg`] and [`db`] find or start the database,
//! and [`cli`] is the `workdo` command.

pub mod cli;
pub mod db;
pub mod pg;
pub mod status;
pub mod store;
pub mod template;

pub use status::Status;
pub use store::{Store, StoreError};
