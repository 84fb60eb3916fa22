//! Write a workdo step function as a `main` of a few lines.
//!
//! ```no_run
//! use workdo_function::{Event, Outcome};
//!
//! fn main() {
//!     workdo_function::run(|event: &Event| {
//!         let title = event.properties.get("title").and_then(|t| t.as_str()).unwrap_or("?");
//!         Ok(Outcome::completed().note(format!("described {title}")))
//!     });
//! }
//! ```
//!
//! The same binary works as an `exec` function (one event on stdin, one result on stdout) and as
//! a `warm` function (the runtime sets `WORKDO_MODE=warm` and sends one event per line, expecting
//! one result per line). The protocol itself is in [`protocol`] and in `functions/README.md`;
//! any language can speak it.

pub mod protocol;

pub use protocol::{Event, FunctionSpan, ObjectUpdate, Outcome, StartWorkflow};

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static SPANS: RefCell<Vec<FunctionSpan>> = const { RefCell::new(Vec::new()) };
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Record `f` as a span of this call. The runtime turns it into a trace span under the step's
/// invocation, so a function's own work shows in the workflow's trace.
pub fn span<T>(name: &str, f: impl FnOnce() -> T) -> T {
    let start = unix_nanos();
    let out = f();
    let end = unix_nanos();
    SPANS.with(|s| {
        s.borrow_mut().push(FunctionSpan {
            name: name.to_string(),
            start_unix_nano: start,
            end_unix_nano: end,
            attributes: Default::default(),
        })
    });
    out
}

use std::io::{BufRead, Read, Write};

/// An error a function returns; it becomes an `error` result.
#[derive(Debug, Clone)]
pub struct Failure {
    pub message: String,
    pub text: Option<String>,
    pub retryable: bool,
}

impl Failure {
    /// A failure worth retrying (the default: a service was down, a file not there yet).
    pub fn retryable(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            text: None,
            retryable: true,
        }
    }

    /// A failure that retrying will not fix: the step goes straight to `error`.
    pub fn fatal(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            text: None,
            retryable: false,
        }
    }

    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }
}

impl<E: std::error::Error> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::retryable(e.to_string())
    }
}

impl From<Failure> for Outcome {
    fn from(f: Failure) -> Outcome {
        let mut o = Outcome::error(f.message);
        o.text = f.text;
        o.retryable = Some(f.retryable);
        o
    }
}

/// Run `handler` as a step function, in exec or warm mode as the runtime asks, and exit.
pub fn run<F>(mut handler: F)
where
    F: FnMut(&Event) -> Result<Outcome, Failure>,
{
    let warm = std::env::var("WORKDO_MODE").is_ok_and(|m| m == "warm");
    let stdout = std::io::stdout();
    if warm {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            let outcome = answer(&line, &mut handler);
            let mut out = stdout.lock();
            // A closed stdout means the runtime is gone: stop.
            if writeln!(out, "{}", to_json(&outcome))
                .and_then(|_| out.flush())
                .is_err()
            {
                break;
            }
        }
    } else {
        let mut input = String::new();
        let outcome = match std::io::stdin().read_to_string(&mut input) {
            Ok(_) => answer(&input, &mut handler),
            Err(e) => Outcome::error(format!("cannot read the event from stdin: {e}")),
        };
        let mut out = stdout.lock();
        let _ = writeln!(out, "{}", to_json(&outcome));
        let _ = out.flush();
    }
}

/// The handler's result for one event, carrying the event's `call` back (warm mode matches
/// answers to calls by it).
fn answer<F>(input: &str, handler: &mut F) -> Outcome
where
    F: FnMut(&Event) -> Result<Outcome, Failure>,
{
    let event: Event = match serde_json::from_str(input) {
        Ok(e) => e,
        Err(e) => {
            let mut o = Outcome::error(format!("the event is not valid JSON for workdo/1: {e}"));
            o.retryable = Some(false);
            // Still answer the call it was, if that much can be read.
            #[derive(serde::Deserialize)]
            struct CallOnly {
                call: Option<String>,
            }
            o.call = serde_json::from_str::<CallOnly>(input)
                .ok()
                .and_then(|c| c.call);
            return o;
        }
    };
    SPANS.with(|s| s.borrow_mut().clear());
    // A panic in the handler is an error result, not a dead process.
    let mut outcome =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&event))) {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(failure)) => failure.into(),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                Outcome::error(format!("the function panicked: {what}"))
            }
        };
    SPANS.with(|s| outcome.spans.append(&mut s.borrow_mut()));
    outcome.call = event.call.clone();
    outcome
}

fn to_json(outcome: &Outcome) -> String {
    serde_json::to_string(outcome).unwrap_or_else(|e| {
        format!(r#"{{"status":"error","message":"cannot encode the result: {e}"}}"#)
    })
}
