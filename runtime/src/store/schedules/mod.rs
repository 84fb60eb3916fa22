//! Cron schedules as stored: loading, listing, and firing due ticks once however many
//! runtimes run (the row is claimed with `SKIP LOCKED`; its next fire time moves in the
//! transaction that starts its workflows). The spec itself is [`crate::model::schedule`].
//!
//! ## Methods
//! - `fire.rs`: `schedules_put`, `schedules_list`, `schedule_fire_now`, `schedules_fire_due`,
//!   `schedule_enable`, `schedule_delete`.

mod fire;

pub use fire::*;
