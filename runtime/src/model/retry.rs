//! Retry policy and the decision a function's outcome leads to. Pure functions, tested alone.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::outcome::{InvokeError, Outcome};
use super::status::Status;

/// Exponential back-off with jitter.
///
/// Attempt `n` (from 1) waits `base × 2^(n-1)`, capped at `max`, then scaled by a random factor
/// in `[1 - jitter, 1 + jitter]` so that steps failing together do not retry together. With the
/// default base of 1 s and cap of 1 h: about 1 s, 2 s, 4 s, 8 s, … 34 min, then 1 h.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
    /// Between 0 and 1.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(3600),
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay before the attempt after `attempt`, with `unit` (in `[0, 1)`) choosing the jitter.
    pub fn delay(&self, attempt: i32, unit: f64) -> Duration {
        let exp = attempt.saturating_sub(1).clamp(0, 40) as u32;
        let raw = self.base.as_secs_f64() * 2f64.powi(exp as i32);
        let capped = raw.min(self.max.as_secs_f64());
        let factor = 1.0 + self.jitter.clamp(0.0, 1.0) * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        Duration::from_secs_f64((capped * factor).max(0.0))
    }
}

/// What happens to a step after its function answered (or failed to), with what the outcome
/// said about the work in every case.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub kind: DecisionKind,
    pub note: Option<String>,
    pub elapsed: Option<f64>,
}

/// The step's next state. Only [`DecisionKind::Complete`] applies the outcome's side effects
/// (object, context, workflows to start).
#[derive(Debug, Clone, PartialEq)]
pub enum DecisionKind {
    /// Completed, recording this lifecycle milestone if any.
    Complete {
        lifecycle: Option<String>,
    },
    Skip,
    /// An intermediate status the template declares for the step.
    Report(String),
    /// Run again at `until`; the attempt is given back.
    Defer {
        until: DateTime<Utc>,
    },
    /// Failed with attempts left: run again at `at`.
    Retry {
        at: DateTime<Utc>,
        failure: InvokeError,
    },
    /// Failed for good (attempts used up, or not retryable).
    Fail(InvokeError),
}

impl Decision {
    fn new(kind: DecisionKind) -> Self {
        Decision {
            kind,
            note: None,
            elapsed: None,
        }
    }

    /// The step's new status.
    pub fn status(&self) -> Status {
        match &self.kind {
            DecisionKind::Complete { .. } => Status::Completed,
            DecisionKind::Skip => Status::Skipped,
            DecisionKind::Report(s) => Status::Custom(s.clone()),
            DecisionKind::Defer { .. } => Status::Scheduled,
            DecisionKind::Retry { .. } => Status::Retrying,
            DecisionKind::Fail(_) => Status::Error,
        }
    }

    /// The event that records it.
    pub fn event(&self) -> &'static str {
        match &self.kind {
            DecisionKind::Complete { .. } => "completed",
            DecisionKind::Skip => "skipped",
            DecisionKind::Report(_) => "status_reported",
            DecisionKind::Defer { .. } => "deferred",
            DecisionKind::Retry { .. } => "failed_retrying",
            DecisionKind::Fail(_) => "failed",
        }
    }

    /// When a deferred or retrying step is due.
    pub fn run_at(&self) -> Option<DateTime<Utc>> {
        match &self.kind {
            DecisionKind::Defer { until } => Some(*until),
            DecisionKind::Retry { at, .. } => Some(*at),
            _ => None,
        }
    }

    /// Change to the attempts count: a defer gives its attempt back.
    pub fn attempts_delta(&self) -> i32 {
        match self.kind {
            DecisionKind::Defer { .. } => -1,
            _ => 0,
        }
    }

    /// The failure, for a retrying or failed step.
    pub fn failure(&self) -> Option<&InvokeError> {
        match &self.kind {
            DecisionKind::Retry { failure, .. } | DecisionKind::Fail(failure) => Some(failure),
            _ => None,
        }
    }

    pub fn lifecycle(&self) -> Option<&str> {
        match &self.kind {
            DecisionKind::Complete { lifecycle } => lifecycle.as_deref(),
            _ => None,
        }
    }

    /// Whether the outcome's side effects (object, context, workflows to start) apply.
    pub fn applies_effects(&self) -> bool {
        matches!(self.kind, DecisionKind::Complete { .. })
    }
}

/// The statuses a function may answer, as the protocol spells them: the wire keeps a string
/// (a step may declare statuses of its own), and this is what the runtime reads it as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer<'a> {
    Completed,
    Skipped,
    Error,
    Defer,
    /// Anything else: valid only when the template declares it for the step.
    Other(&'a str),
}

impl<'a> Answer<'a> {
    pub fn parse(status: &'a str) -> Self {
        match status {
            "completed" => Answer::Completed,
            "skipped" => Answer::Skipped,
            "error" => Answer::Error,
            "defer" => Answer::Defer,
            other => Answer::Other(other),
        }
    }
}

/// The furthest a function may defer its step: 10 years.
const MAX_DEFER_SECS: f64 = 10.0 * 365.0 * 86400.0;

/// Decide a step's next status from its function's result.
///
/// `attempt` is the attempt that just ran (from 1); `declared` are the intermediate statuses the
/// template allows for this step; `unit` picks the back-off jitter.
pub fn decide(
    result: Result<&Outcome, &InvokeError>,
    attempt: i32,
    max_attempts: i32,
    declared: &[String],
    backoff: &Backoff,
    now: DateTime<Utc>,
    unit: f64,
) -> Decision {
    let failed = |message: String, text: Option<String>, retryable: bool| {
        let failure = InvokeError { message, text };
        Decision::new(if retryable && attempt < max_attempts {
            let delay = backoff.delay(attempt, unit);
            let at = now + chrono::Duration::from_std(delay).unwrap_or_default();
            DecisionKind::Retry { at, failure }
        } else {
            DecisionKind::Fail(failure)
        })
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => return failed(e.message.clone(), e.text.clone(), true),
    };
    let mut d = match Answer::parse(&outcome.status) {
        Answer::Completed => Decision::new(DecisionKind::Complete {
            lifecycle: outcome.lifecycle.clone(),
        }),
        Answer::Skipped => Decision::new(DecisionKind::Skip),
        Answer::Error => failed(
            outcome
                .message
                .clone()
                .unwrap_or_else(|| "the function reported an error without a message".into()),
            outcome.text.clone(),
            outcome.retryable.unwrap_or(true),
        ),
        Answer::Defer => {
            let until = match (&outcome.until, outcome.seconds) {
                (Some(t), _) => DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|t| t.with_timezone(&Utc)),
                (None, Some(s)) if s.is_finite() && (0.0..=MAX_DEFER_SECS).contains(&s) => {
                    chrono::Duration::from_std(Duration::from_secs_f64(s))
                        .ok()
                        .map(|d| now + d)
                }
                _ => None,
            };
            match until {
                Some(until) if until - now > chrono::Duration::seconds(MAX_DEFER_SECS as i64) => {
                    failed(
                        format!(
                            "the function deferred to {until}, more than 10 years ahead: start a future-dated workflow for work that far away"
                        ),
                        None,
                        false,
                    )
                }
                Some(until) => Decision::new(DecisionKind::Defer { until }),
                None => failed(
                    format!(
                        "the function deferred without a valid `until` (RFC 3339) or `seconds` (0 to 10 years): until={:?} seconds={:?}",
                        outcome.until, outcome.seconds
                    ),
                    None,
                    false,
                ),
            }
        }
        Answer::Other(other) if declared.iter().any(|s| s == other) => {
            Decision::new(DecisionKind::Report(other.into()))
        }
        Answer::Other(other) => failed(
            format!(
                "the function answered status {other:?}, which is neither completed, skipped, error, defer nor a status the template declares for this step"
            ),
            None,
            false,
        ),
    };
    d.note = outcome.note.clone();
    d.elapsed = outcome.elapsed.filter(|e| e.is_finite() && *e >= 0.0);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(10),
            jitter: 0.0,
        };
        let secs: Vec<f64> = (1..=6).map(|a| b.delay(a, 0.5).as_secs_f64()).collect();
        assert_eq!(secs, vec![1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
        let j = Backoff { jitter: 0.2, ..b };
        assert_eq!(j.delay(1, 0.0).as_secs_f64(), 0.8);
        assert_eq!(j.delay(1, 1.0).as_secs_f64(), 1.2);
    }

    #[test]
    fn errors_retry_until_the_limit() {
        let b = Backoff::default();
        let e = InvokeError {
            message: "crashed".into(),
            text: Some("stack".into()),
        };
        let d = decide(Err(&e), 1, 3, &[], &b, now(), 0.5);
        assert_eq!(d.status(), Status::Retrying);
        assert_eq!(d.run_at(), Some(now() + chrono::Duration::seconds(1)));
        assert_eq!(d.failure().and_then(|f| f.text.as_deref()), Some("stack"));
        let d = decide(Err(&e), 3, 3, &[], &b, now(), 0.5);
        assert_eq!(d.status(), Status::Error);
        let mut fatal = Outcome::error("bad record");
        fatal.retryable = Some(false);
        let d = decide(Ok(&fatal), 1, 3, &[], &b, now(), 0.5);
        assert_eq!(
            (d.status(), d.failure().map(|f| f.message.as_str())),
            (Status::Error, Some("bad record"))
        );
    }

    #[test]
    fn defer_gives_the_attempt_back() {
        let d = decide(
            Ok(&Outcome::defer(30.0)),
            1,
            3,
            &[],
            &Backoff::default(),
            now(),
            0.5,
        );
        assert_eq!(d.status(), Status::Scheduled);
        assert_eq!(d.attempts_delta(), -1);
        assert_eq!(d.run_at(), Some(now() + chrono::Duration::seconds(30)));
        // Out of range: refused, not silently moved (1e308 seconds used to become 2036).
        for seconds in [1e308, -1.0, f64::NAN] {
            let d = decide(
                Ok(&Outcome::defer(seconds)),
                1,
                3,
                &[],
                &Backoff::default(),
                now(),
                0.5,
            );
            assert_eq!(d.status(), Status::Error, "{seconds}");
        }
        let mut far = Outcome::with_status("defer");
        far.until = Some("2999-01-01T00:00:00Z".into());
        let d = decide(Ok(&far), 1, 3, &[], &Backoff::default(), now(), 0.5);
        assert!(
            d.failure()
                .is_some_and(|f| f.message.contains("more than 10 years ahead")),
            "{d:?}"
        );
        let mut bad = Outcome::with_status("defer");
        bad.until = Some("tomorrow".into());
        assert_eq!(
            decide(Ok(&bad), 1, 3, &[], &Backoff::default(), now(), 0.5).status(),
            Status::Error
        );
    }

    #[test]
    fn statuses_must_be_known_or_declared() {
        let declared = vec!["IN PROCESS".to_string()];
        let ok = decide(
            Ok(&Outcome::with_status("IN PROCESS")),
            1,
            3,
            &declared,
            &Backoff::default(),
            now(),
            0.5,
        );
        assert_eq!(ok.status(), Status::Custom("IN PROCESS".into()));
        let bad = decide(
            Ok(&Outcome::with_status("done")),
            1,
            3,
            &declared,
            &Backoff::default(),
            now(),
            0.5,
        );
        assert_eq!(bad.status(), Status::Error);
        assert!(
            bad.failure()
                .is_some_and(|f| f.message.contains("\"done\""))
        );
        let done = decide(
            Ok(&Outcome::completed().lifecycle("released")),
            1,
            3,
            &[],
            &Backoff::default(),
            now(),
            0.5,
        );
        assert!(done.applies_effects());
        assert_eq!(done.lifecycle(), Some("released"));
    }
}
