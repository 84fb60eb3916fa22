//! State machines in the database: a job's transitions, its inbox of signals, its alarms.
//!
//! A transition runs in one transaction under the job's row lock (`FOR UPDATE`): the actions on
//! the transition, leaving the old state (its alarms cancelled), entering the new one (its enter
//! actions), the state variables, alarms, children, mails, function steps and events. If an
//! action fails, nothing of it is kept and a `transition_rollback` event says why. Signals the
//! transition sends (to itself, to a parent) wait in `signals` and are taken after it commits,
//! in order, each in a transaction of its own — a crash between the two loses nothing.
//!
//! ## Methods
//! - `actions.rs`: `machine_started`.
//! - `family.rs`: `cancel_children_of`.
//! - `jobs.rs`: `workflow_template_id`, `machine_access`, `machine_alarms_fire`,
//!   `machine_next_alarm`, `machine_view`, `machine_migrate`.
//! - `signal.rs`: `machine_job`, `machine_signal`, `machine_inbox_run`, `inbox_run_job`.
//! - `suspend.rs`: `machine_suspend`.

#[macro_use]
mod row;
mod actions;
mod family;
mod inbox;
mod outcome;
mod signal;
pub(crate) use inbox::notify_signals;
pub(crate) use inbox::signal_in;
mod jobs;
mod suspend;
mod taken;
mod unlocked;
pub use actions::MAX_SELF_RUN;
pub use jobs::MachineView;
pub use suspend::Suspension;
pub(crate) use taken::calls_ended;
pub(crate) use unlocked::WrittenJobs;

pub use outcome::{MAX_SIGNAL_DATA_BYTES, SIGNAL_CHANNEL};
pub use signal::*;
