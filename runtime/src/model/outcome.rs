//! What a function call produced: the protocol's types (shared with the function SDK, so the
//! two cannot drift) and the failure of a call that produced no result.

pub use workdo_function::protocol::{Event, ObjectUpdate, Outcome, PROTOCOL, StartWorkflow};

/// A call that did not produce a result: the function could not start, crashed, exited
/// non-zero, printed something that is not a result, or ran past its timeout.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InvokeError {
    pub message: String,
    /// Captured stderr (its last part), if any.
    pub text: Option<String>,
}

impl InvokeError {
    /// NUL characters (from a function's output or stderr quoted in the message) become
    /// `\0`: Postgres cannot store them, and an error must always be storable.
    pub fn new(message: impl Into<String>, stderr: String) -> Self {
        fn storable(s: String) -> String {
            if s.contains('\0') {
                s.replace('\0', "\\0")
            } else {
                s
            }
        }
        InvokeError {
            message: storable(message.into()),
            text: (!stderr.trim().is_empty()).then(|| storable(stderr)),
        }
    }
}
