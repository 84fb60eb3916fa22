//! What a signal's delivery is held to and ends in: the limits, the inbox's channel, `Moved` and
//! `Stop`. A leaf the wing's files share, so that none of them reaches back into `signal.rs`.

use crate::store::StoreError;

/// The channel `workdo.signal` and every inbox insert notify, with the job's id.
pub const SIGNAL_CHANNEL: &str = "workdo_signal";

/// The largest a signal's data may be, as JSON (64 KiB): a larger one is refused.
pub use crate::model::machine::MAX_SIGNAL_DATA_BYTES;

/// The longest a signal's name may be, in characters: a longer one is refused before anything is
/// written (a name is stored in the inbox and in every event of its transition).
pub const MAX_SIGNAL_NAME_CHARS: usize = 200;

/// The largest a job's state variables may grow, as JSON (1 MiB): a transition that would make
/// them larger rolls back, saying so.
pub const MAX_VARIABLES_BYTES: usize = 1024 * 1024;

/// What taking a signal did: the transition (from, to, whether the job finished), or that it
/// was queued in a suspended job's inbox.
pub(crate) struct Moved {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) finished: bool,
    pub(crate) queued: bool,
    /// The job's inbox may hold signals now: it held some when the job was locked, or the
    /// transition sent the job one (or set an alarm). When not, nothing follows this signal.
    pub(crate) inbox: bool,
}

/// Why a transition stopped: the signal is not accepted (nothing was attempted), an action
/// failed (everything is rolled back), or the database failed.
pub(crate) enum Stop {
    NotAccepted(String),
    Failed(String),
    Db(StoreError),
}

impl From<sqlx::Error> for Stop {
    fn from(e: sqlx::Error) -> Self {
        Stop::Db(e.into())
    }
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Db(e)
    }
}
