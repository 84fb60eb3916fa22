//! The connect wing: reaching Postgres (`DATABASE_URL` or the embedded cluster), following a
//! multi-host URL to the primary, migrating, and noticing a pooler that shares our session.
//!
//! - `db.rs` — `connect`, `resolve`, `migrate`, `Ping`, the request pool's options.
//! - `hosts.rs` — `Hosts`: a multi-host URL, `follow` to the writable host.
//! - `errors.rs` — `DbError`, `reason`.
//! - `redact.rs` — `redact`: passwords out of connection strings.
//! - `session.rs` — a session found shared by a transaction pooler: `mark_lost`, `is_lost`.
//!
//! ## Methods
//! - `session.rs`: `session_shared`.

pub mod db;
mod errors;
pub mod hosts;
mod redact;
pub mod session;
