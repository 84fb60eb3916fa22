//! The templates wing: every loaded source kept, keyed by its SHA-256; the deployed functions
//! (`functions.rs`) and the versions each workflow is pinned to (`pins.rs`).
//!
//! ## Methods
//! - `functions.rs`: `function_deploy`, `function_list`, `function_show`, `function_rollback`,
//!   `function_delete`, `function_artifact`, `function_fixed`.
//! - `pins.rs`: `function_pins`, `functions_pin_in`, `functions_unpin_in`, `functions_repin_in`,
//!   `functions_hashes_in_use`, `workflow_pins`, `workflow_template_ids`,
//!   `template_versions_active`, `functions_repin_steps_in`, `workflow_step_functions`,
//!   `bricklets_deployed_in`, `bricklet_step_function`.
//! - `save.rs`: `template_save`, `templates_save_all`, `template_current`, `template_current_in`,
//!   `template_by_id`, `spec_by_id`, `bricklet_current`, `bricklet_list`, `template_list`.
//! - `versions.rs`: `template_versions`, `template_use`.

pub mod functions;
pub(crate) mod pins;
mod save;
mod versions;

pub use save::*;
