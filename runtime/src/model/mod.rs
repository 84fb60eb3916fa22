//! The model: what workdo's words mean, as pure data and pure functions (no I/O, no SQL).
//!
//! - [`status`]: a step's statuses and the state machine between them.
//! - [`template`]: templates (YAML and WorkDo XML), their parsers and validation.
//! - [`schedule`]: cron schedule specs and their next fire times.
//! - [`outcome`]: what a function call produced (the protocol's types).
//! - [`retry`]: back-off, and the decision a function's outcome leads to.
//! - [`alert`]: alert mail as text.
//! - [`object_id`]: the one rule for object ids.
//!
//! - [`dispatch`]: dynamic dispatch: bricklets, observers' matching rules, generators'
//!   construction rules and the composition of subnets.
//!
//! - [`machine`]: state machines: states, transitions, actions, the expression language.

pub mod alert;
pub mod dispatch;
pub mod machine;
pub mod object_id;
pub mod outcome;
pub mod retry;
pub mod schedule;
pub mod status;
pub mod template;
