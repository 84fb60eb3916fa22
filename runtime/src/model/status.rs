//! Step statuses: the one enum mirrored by the `steps.status` column.
//!
//! ```text
//!            start (prereqs pending)            start (no prereqs / all done)
//!   waiting ──────────── last prereq done ───────────▶ ready ◀── promote when due ── scheduled
//!      ▲                                                │  ▲                           (future start)
//!      │ a prereq is reopened                     claim │  │ lease expired / retry        ▲
//!      │                                                ▼  │                              │ defer
//!      └──────────────────────────────────────────── started ──── error (retryable) ──▶ retrying
//!                                                       │   └──── error at limit ────▶ error
//!                                                       ▼
//!                                         completed / skipped / intermediate
//! ```
//! `completed` and `skipped` are the finished statuses: they release dependants. Any other string a
//! template declares for a step (for example `IN PROCESS`) is an intermediate status: unfinished,
//! never claimed, set by the function or through the API.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Status {
    /// Prerequisites not yet completed or skipped.
    Waiting,
    /// Prerequisites done and start time come: in the queue.
    Ready,
    /// Prerequisites done but not due yet (future start date or `defer`).
    Scheduled,
    /// Claimed by a worker (or marked started by a robot).
    Started,
    Completed,
    Skipped,
    /// Failed for good (attempt limit reached, or not retryable); waits for a person.
    Error,
    /// A failure a robot reported as an exception (seed 000's own word, `status="exception"`):
    /// an error in every way (its attempts counted, retried with the errors, alerted on,
    /// listed by `--errors`) that keeps its name when read back.
    Exception,
    /// Failed, and will be ready again after its back-off.
    Retrying,
    /// A status the template declares for this step.
    Custom(String),
}

impl Status {
    pub const BUILTIN: [&'static str; 9] = [
        "waiting",
        "ready",
        "scheduled",
        "started",
        "completed",
        "skipped",
        "error",
        "retrying",
        "exception",
    ];

    /// A built-in status by name, or a well-formed custom one; `None` for malformed text.
    pub fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "waiting" => Status::Waiting,
            "ready" => Status::Ready,
            "scheduled" => Status::Scheduled,
            "started" => Status::Started,
            "completed" => Status::Completed,
            "skipped" => Status::Skipped,
            "error" => Status::Error,
            "exception" => Status::Exception,
            "retrying" => Status::Retrying,
            other if Status::valid_custom(other) => Status::Custom(other.to_string()),
            _ => return None,
        })
    }

    /// Mirrors the domain of `steps.status` (`workdo.status_name`, migrations/0009).
    pub fn valid_custom(text: &str) -> bool {
        let mut chars = text.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
            && text.len() <= 64
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '.' | '-'))
    }

    pub fn is_builtin(&self) -> bool {
        !matches!(self, Status::Custom(_))
    }

    /// In error: failed for good, waiting for a person (`error`, or a robot's `exception`).
    pub fn is_error(&self) -> bool {
        matches!(self, Status::Error | Status::Exception)
    }

    /// Completed or skipped: dependants may go on.
    pub fn is_finished(&self) -> bool {
        matches!(self, Status::Completed | Status::Skipped)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Status::Waiting => "waiting",
            Status::Ready => "ready",
            Status::Scheduled => "scheduled",
            Status::Started => "started",
            Status::Completed => "completed",
            Status::Skipped => "skipped",
            Status::Error => "error",
            Status::Exception => "exception",
            Status::Retrying => "retrying",
            Status::Custom(s) => s,
        }
    }

    /// The status in WorkDo's coarse view, for messages of the JSON API and the CLI: queue
    /// states are all `waiting`. (The workflow-service routes speak the service's own words,
    /// `queued` included: `api/workdo/render.rs`.)
    pub fn workdo_name(&self) -> &str {
        match self {
            Status::Ready | Status::Scheduled => "waiting",
            other => other.as_str(),
        }
    }

    /// The status in the workflow service's words, for a step the template does or does not
    /// keep out of queues, with the hand-off (`workdo handoff`) in use or not. With it, a ready
    /// step is `queued`: handed to a robot queue, as the service says once it pushed it to
    /// Sidekiq. Without it, a ready step is `waiting`, which robots that poll `?waiting=` look
    /// for (and a robot's own `queued` is a status of its own). A step kept out of queues, or
    /// scheduled for later, is `waiting` either way.
    pub fn service_name(&self, skip_queue: bool, handoff: bool) -> &str {
        match self {
            Status::Ready if handoff && !skip_queue => "queued",
            Status::Ready | Status::Scheduled => "waiting",
            other => other.as_str(),
        }
    }

    /// Whether a `current-status` precondition naming `expected` holds for this status.
    /// `waiting` matches every queue state (waiting, ready, scheduled), as robots written before
    /// `queued` existed expect; `queued` (the workflow service's word) is `ready`.
    pub fn matches(&self, expected: &str) -> bool {
        self.as_str() == expected
            || self.workdo_name() == expected
            || (expected == "queued" && *self == Status::Ready)
            // `error` names the class: an exception is an error too.
            || (expected == "error" && self.is_error())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<Status> for String {
    fn from(s: Status) -> String {
        s.as_str().to_string()
    }
}

impl TryFrom<String> for Status {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Status::parse(&s).ok_or_else(|| format!("invalid status {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips() {
        for name in Status::BUILTIN {
            let s = Status::parse(name).expect("builtin parses");
            assert!(s.is_builtin());
            assert_eq!(s.as_str(), name);
        }
        assert_eq!(
            Status::parse("IN PROCESS"),
            Some(Status::Custom("IN PROCESS".into()))
        );
        assert_eq!(Status::parse("1bad"), None);
        assert_eq!(Status::parse(""), None);
        assert_eq!(Status::parse("drop table; --"), None);
    }

    #[test]
    fn workdo_view_of_queue_states() {
        assert!(Status::Ready.matches("waiting"));
        assert!(Status::Scheduled.matches("waiting"));
        assert!(Status::Ready.matches("ready"));
        assert!(Status::Ready.matches("queued"));
        assert!(!Status::Waiting.matches("queued") && !Status::Scheduled.matches("queued"));
        assert!(!Status::Started.matches("waiting"));
        assert!(Status::Completed.is_finished() && Status::Skipped.is_finished());
        assert!(!Status::Error.is_finished());
    }

    #[test]
    fn an_exception_is_an_error_that_keeps_its_name() {
        let e = Status::parse("exception").expect("parses");
        assert_eq!(e.as_str(), "exception");
        assert!(e.is_error() && Status::Error.is_error() && !Status::Retrying.is_error());
        assert!(e.matches("exception") && e.matches("error"));
        assert!(!Status::Error.matches("exception"));
    }
}
