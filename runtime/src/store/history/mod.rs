//! The history wing: what happened to each object (events, written in the transaction that did
//! it, with the ready notification) and finished workflows archived out of the live tables.
//!
//! ## Methods
//! - `archive.rs`: `archived_of`, `archived`, `archive_purge_before`, `archive_pending`, `archive`,
//!   `archive_batch`.
//! - `events.rs`: `events_newest_first`.

pub(crate) mod archive;
pub(crate) mod events;

pub use archive::{Archived, ArchivedRow};
