//! Dynamic dispatch in the database: what observers found and each generator's activation set
//! (`workflows.dispatch`), recorded in the transaction that commits the observers' own results,
//! every observer of a commit by one read and one write. Generators composing their subnets
//! are [`super::compose`]; the composition itself is [`crate::model::dispatch`];
//! migrations/0011 has the schema and why.
//!
//! ## Methods
//! - `sets.rs`: `bricklets_of`, `workflow_dispatch`.

pub(crate) mod compose;
mod observe;
pub(crate) mod recompose;
mod sets;

pub(crate) use observe::*;
pub use sets::*;
