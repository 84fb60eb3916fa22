//! The steps wing: every status change goes through `steps_apply` (one call of `workdo.apply`,
//! which keeps `pending` and the counts true); the claim, the leases, bulk actions, paused
//! queues and the page's reads of steps are the files beside it.
//!
//! ## Methods
//! - `apply.rs`: `steps_apply`, `step_set`, `steps_promote_due`, `steps_sweep_leases`.
//! - `bulk.rs`: `objects_missing`, `steps_retry`, `steps_again`, `steps_retry_current`,
//!   `steps_skip`, `steps_prioritize`, `workflow_skip_all`.
//! - `claim.rs`: `step_claim`, `step_claim_queue`, `step_claim_objects`.
//! - `leases.rs`: `steps_renew_leases`, `steps_return_leases`.
//! - `pause.rs`: `step_pause`, `step_resume`, `paused_list`, `step_paused`.
//! - `reads.rs`: `steps_in`, `steps_in_all`, `errors_grouped`, `timings`.

mod apply;
pub(crate) mod bulk;
pub(crate) mod claim;
pub(crate) mod leases;
pub(crate) mod pause;
mod reads;
pub use bulk::StepFilter;
pub use pause::{Paused, queue_key};
pub use reads::{ErrorGroup, Timing};

pub use apply::*;
