//! The workflows wing: starting templates on objects (`initial.rs` makes their first steps), and
//! listing and deleting workflows.
//!
//! ## Methods
//! - `list.rs`: `workflows_list`, `workflow_delete_by_id`.
//! - `start.rs`: `workflow_start`, `workflow_start_in`, `workflow_delete`.

pub(crate) mod initial;
mod list;
mod start;
pub use list::WorkflowListRow;

pub use start::*;
