//! Retry policy and the decision a function's outcome leads to. Pure functions, tested alone.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::function::{InvokeError, Outcome};
use crate::status::Status;

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

/// What happens to a step after its function answered (or failed to).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub status: Status,
    pub run_at: Option<DateTime<Utc>>,
    /// Change to the attempts count: a defer gives its attempt back.
    pub attempts_delta: i32,
    pub message: Option<String>,
    pub text: Option<String>,
    pub note: Option<String>,
    pub lifecycle: Option<String>,
    pub elapsed: Option<f64>,
    /// Whether the outcome's side effects (object, context, workflows to start) apply.
    pub apply_effects: bool,
}

impl Decision {
    fn new(status: Status) -> Self {
        Decision {
            status,
            run_at: None,
            attempts_delta: 0,
            message: None,
            text: None,
            note: None,
            lifecycle: None,
            elapsed: None,
            apply_effects: false,
        }
    }
}

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
        let retry = retryable && attempt < max_attempts;
        let mut d = Decision::new(if retry {
            Status::Retrying
        } else {
            Status::Error
        });
        if retry {
            let delay = backoff.delay(attempt, unit);
            d.run_at = Some(now + chrono::Duration::from_std(delay).unwrap_or_default());
        }
        d.message = Some(message);
        d.text = text;
        d
    };
    let outcome = match result {
        Ok(o) => o,
        Err(e) => return failed(e.message.clone(), e.text.clone(), true),
    };
    let mut d = match outcome.status.as_str() {
        "completed" => {
            let mut d = Decision::new(Status::Completed);
            d.lifecycle = outcome.lifecycle.clone();
            d.apply_effects = true;
            d
        }
        "skipped" => Decision::new(Status::Skipped),
        "error" => failed(
            outcome
                .message
                .clone()
                .unwrap_or_else(|| "the function reported an error without a message".into()),
            outcome.text.clone(),
            outcome.retryable.unwrap_or(true),
        ),
        "defer" => {
            let until = match (&outcome.until, outcome.seconds) {
                (Some(t), _) => DateTime::parse_from_rfc3339(t)
                    .ok()
                    .map(|t| t.with_timezone(&Utc)),
                (None, Some(s)) if s.is_finite() && s >= 0.0 => chrono::Duration::from_std(
                    Duration::from_secs_f64(s.min(10.0 * 365.0 * 86400.0)),
                )
                .ok()
                .map(|d| now + d),
                _ => None,
            };
            match until {
                Some(at) => {
                    let mut d = Decision::new(Status::Scheduled);
                    d.run_at = Some(at);
                    d.attempts_delta = -1;
                    d
                }
                None => failed(
                    format!(
                        "the function deferred without a valid `until` (RFC 3339) or `seconds`: until={:?} seconds={:?}",
                        outcome.until, outcome.seconds
                    ),
                    None,
                    false,
                ),
            }
        }
        other if declared.iter().any(|s| s == other) => Decision::new(Status::Custom(other.into())),
        other => failed(
            format!(
                "the function answered status {other:?}, which is neither completed, skipped, error, defer nor a status the template declares for this step"
            ),
            None,
            false,
        ),
    };
    if d.note.is_none() {
        d.note = outcome.note.clone();
    }
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
        assert_eq!(d.status, Status::Retrying);
        assert_eq!(d.run_at, Some(now() + chrono::Duration::seconds(1)));
        assert_eq!(d.text.as_deref(), Some("stack"));
        let d = decide(Err(&e), 3, 3, &[], &b, now(), 0.5);
        assert_eq!(d.status, Status::Error);
        let mut fatal = Outcome::error("bad record");
        fatal.retryable = Some(false);
        let d = decide(Ok(&fatal), 1, 3, &[], &b, now(), 0.5);
        assert_eq!(
            (d.status, d.message.as_deref()),
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
        assert_eq!(d.status, Status::Scheduled);
        assert_eq!(d.attempts_delta, -1);
        assert_eq!(d.run_at, Some(now() + chrono::Duration::seconds(30)));
        let mut bad = Outcome::with_status("defer");
        bad.until = Some("tomorrow".into());
        assert_eq!(
            decide(Ok(&bad), 1, 3, &[], &Backoff::default(), now(), 0.5).status,
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
        assert_eq!(ok.status, Status::Custom("IN PROCESS".into()));
        let bad = decide(
            Ok(&Outcome::with_status("done")),
            1,
            3,
            &declared,
            &Backoff::default(),
            now(),
            0.5,
        );
        assert_eq!(bad.status, Status::Error);
        assert!(bad.message.unwrap_or_default().contains("\"done\""));
        let done = decide(
            Ok(&Outcome::completed().lifecycle("released")),
            1,
            3,
            &[],
            &Backoff::default(),
            now(),
            0.5,
        );
        assert!(done.apply_effects);
        assert_eq!(done.lifecycle.as_deref(), Some("released"));
    }
}
