//! Objects: registering them, their properties and their documents.
//!
//! ## Methods
//! - `list.rs`: `objects_list`, `objects_find`, `object_delete`.
//! - `put.rs`: `document`, `object_put`, `objects_put`, `observers_watch`.

mod list;
mod put;
pub use list::ObjectRow;

pub use put::*;
