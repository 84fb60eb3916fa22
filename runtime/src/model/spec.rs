//! The types templates, dynamic dispatch and machines share — a step, its function, a
//! bricklet, an observer's rules, a generator's construction rules, a problem with a source —
//! in a leaf module, so that `model/template`, `model/dispatch` and `model/machine` each
//! depend on it and none on another's internals: `model/` has no import cycle.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::status::Status;

/// Attempts a step gets when its template names no `error-limit`.
pub const DEFAULT_ERROR_LIMIT: u32 = 3;
/// Seconds a function may run when its step names no timeout.
pub const DEFAULT_TIMEOUT_SECS: f64 = 300.0;

/// One step (WorkDo "process") of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prereqs: Vec<String>,
    /// Milestone recorded when the step completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<String>,
    /// Attempts before the step stays in `error` (WorkDo `error-limit`).
    pub error_limit: u32,
    /// Most steps one claim takes (WorkDo `batch-limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_limit: Option<u32>,
    /// Logged, never queued: no worker runs it (WorkDo `skip-queue`).
    #[serde(default)]
    pub skip_queue: bool,
    /// `completed` for a bootstrap step that starts completed with one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_status: Option<Status>,
    /// Intermediate statuses the step may report besides the built-in ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<String>,
    /// The function that performs the step; none means a human (or external robot) task,
    /// unless the step observes or generates (then the runtime performs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionSpec>,
    /// An observer step's matching rules (dynamic dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe: Option<Observe>,
    /// A generator step's refset and construction rules (dynamic dispatch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate: Option<Generate>,
}

impl StepSpec {
    /// A step called `name` with every setting at its default: a human task, waiting first,
    /// [`DEFAULT_ERROR_LIMIT`] attempts.
    pub fn named(name: &str) -> StepSpec {
        StepSpec {
            name: name.to_string(),
            label: None,
            prereqs: Vec::new(),
            lifecycle: None,
            error_limit: DEFAULT_ERROR_LIMIT,
            batch_limit: None,
            skip_queue: false,
            initial_status: None,
            statuses: Vec::new(),
            function: None,
            observe: None,
            generate: None,
        }
    }

    /// Whether the runtime performs this step: it has a function, or it observes or generates.
    pub fn is_run(&self) -> bool {
        !self.skip_queue
            && (self.function.is_some() || self.observe.is_some() || self.generate.is_some())
    }
}

/// How a step's function is run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionSpec {
    pub runner: Runner,
    pub timeout_secs: f64,
    /// Calls in flight at once, per runtime process.
    pub concurrency: u32,
    /// Extra environment for exec and warm functions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Object documents sent with the event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub documents: Vec<String>,
}

/// The ways to run a function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Runner {
    /// A process per call: the event on stdin, the result on stdout.
    Exec { argv: Vec<String> },
    /// A pool of long-lived processes answering newline-delimited JSON, each with up to
    /// `pipeline` calls in flight (their lines written before the earlier ones are answered).
    Warm {
        argv: Vec<String>,
        pool: u32,
        #[serde(default = "one")]
        pipeline: u32,
    },
    /// POST the event to a URL.
    Http { url: String },
    /// A handler compiled into the runtime (benchmarks and tests).
    Builtin { name: String },
    /// A function deployed with `workdo functions deploy`: stored in Postgres, fetched by each
    /// worker into its cache, and run as an exec function or, with `warm`, as a warm pool.
    Deployed {
        name: String,
        /// A fixed version (`deployed: shelve@3`); without one, the version that was current
        /// when the step's workflow started (its pin).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<u32>,
        /// `mode: warm`: a pool of `pool` processes with up to `pipeline` calls each.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warm: Option<WarmShape>,
    },
}

/// A warm pool's size and each process's pipeline depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmShape {
    pub pool: u32,
    #[serde(default = "one")]
    pub pipeline: u32,
}

fn one() -> u32 {
    1
}

/// `shelve` or `shelve@3`: a deployed function's name and, when fixed, its version.
///
/// # Errors
/// A name that is not one (letters, digits, `.`, `_`, `-`; 100 at most, first a letter or
/// digit) or a version that is not a whole number from 1.
pub fn parse_deployed(text: &str) -> Result<(String, Option<u32>), String> {
    let text = text.trim();
    let (name, version) = match text.rsplit_once('@') {
        Some((n, v)) => match v.parse::<u32>() {
            Ok(v) if v >= 1 => (n, Some(v)),
            _ => {
                return Err(format!(
                    "{text:?}: the version after @ must be a whole number from 1"
                ));
            }
        },
        None => (text, None),
    };
    check_function_name(name)?;
    Ok((name.to_string(), version))
}

/// Whether `name` may name a deployed function: 1–100 of letters, digits, `.`, `_` and `-`,
/// starting with a letter or digit (what `workdo.functions` checks too).
///
/// # Errors
/// Saying what is wrong with it.
pub fn check_function_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a function name: 1 to 100 letters, digits, '.', '_' or '-', \
             starting with a letter or digit"
        ))
    }
}

impl Runner {
    /// Calls in flight per runtime process when the step does not say: one, except for a warm
    /// pool, which gets four per process so that each process has its next call waiting while
    /// it answers (a call waits for a free process within its timeout), or its pipeline's depth
    /// per process when that is deeper.
    pub fn default_concurrency(&self) -> u32 {
        match self {
            Runner::Warm { pool, pipeline, .. }
            | Runner::Deployed {
                warm: Some(WarmShape { pool, pipeline }),
                ..
            } => pool.saturating_mul((*pipeline).max(4)).max(1),
            _ => 1,
        }
    }
}

/// A reusable process fragment: one or more steps, prerequisites among them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bricklet {
    pub name: String,
    /// The bricklet that `undo` activates in this one's place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensate: Option<String>,
    pub steps: Vec<StepSpec>,
}

/// An observer step's matching rules on one document of the object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observe {
    /// The object document (XML) the rules are evaluated on.
    pub document: String,
    pub rules: Vec<MatchRule>,
    /// Observe again by itself when the document is replaced (`workdo objects add … --document`,
    /// `PATCH /api/objects/{id}`) while the workflow runs: its generator then recomposes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watch: bool,
}

/// `match(pexpr) ↦ (op, generator, bricklets)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchRule {
    /// XPath 1.0. A node-set matches with one fragment per node; a boolean, number or string
    /// matches when true, positive or non-empty (one fragment; a number `n`, `n` of them).
    #[serde(rename = "match")]
    pub xpath: String,
    pub op: Op,
    /// The generator step of this template whose activation set the rule changes.
    pub generator: String,
    pub bricklets: Vec<String>,
}

/// The change operations on an activation set (Definition 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Append the bricklets with `f(b)` fragments (adding to the count of one already active).
    Add,
    /// Append only the bricklets not yet active.
    Merge,
    /// Remove the bricklets.
    Delete,
    /// Append each bricklet's compensating bricklet.
    Undo,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Merge => "merge",
            Op::Delete => "delete",
            Op::Undo => "undo",
        }
    }
}

/// A generator step: the bricklets it allows and how it combines them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generate {
    pub refset: Vec<String>,
    #[serde(default)]
    pub rules: Vec<Construction>,
}

/// Construction rules (Definition 5), written `{before: [A, B]}`, `{sequence: A}` or
/// `{parallel: A}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ConstructionMap", into = "ConstructionMap")]
pub enum Construction {
    /// `A ≺ B`: when both are active, B runs after A.
    Before([String; 2]),
    /// `A →ⁿ`: A runs `f(A)` times, one after the other.
    Sequence(String),
    /// `A ∥ⁿ`: A runs `f(A)` times side by side.
    Parallel(String),
}

/// A construction rule as written: exactly one of its keys.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConstructionMap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    before: Option<[String; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sequence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parallel: Option<String>,
}

impl TryFrom<ConstructionMap> for Construction {
    type Error = String;
    fn try_from(m: ConstructionMap) -> Result<Self, String> {
        match (m.before, m.sequence, m.parallel) {
            (Some(b), None, None) => Ok(Construction::Before(b)),
            (None, Some(s), None) => Ok(Construction::Sequence(s)),
            (None, None, Some(p)) => Ok(Construction::Parallel(p)),
            _ => Err(
                "a construction rule is one of before: [A, B], sequence: A or parallel: A".into(),
            ),
        }
    }
}

impl From<Construction> for ConstructionMap {
    fn from(c: Construction) -> Self {
        match c {
            Construction::Before(b) => ConstructionMap {
                before: Some(b),
                ..Default::default()
            },
            Construction::Sequence(s) => ConstructionMap {
                sequence: Some(s),
                ..Default::default()
            },
            Construction::Parallel(p) => ConstructionMap {
                parallel: Some(p),
                ..Default::default()
            },
        }
    }
}

/// One thing wrong with a template source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "{}:{}: {}: {}",
                self.file, line, self.field, self.message
            ),
            None => write!(f, "{}: {}: {}", self.file, self.field, self.message),
        }
    }
}

/// Everything wrong with a template source; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TemplateError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl TemplateError {
    pub fn one(file: &str, line: Option<usize>, field: &str, message: impl Into<String>) -> Self {
        TemplateError {
            problems: vec![Problem {
                file: file.to_string(),
                line,
                field: field.to_string(),
                message: message.into(),
            }],
        }
    }
}

/// Names may hold letters, digits and `-_.`, and start with a letter or digit.
pub(crate) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.len() <= 100
}

/// The longest duration anything takes: 100 years (36,500 days).
pub const MAX_DURATION_SECS: f64 = 36_500.0 * 86_400.0;

/// Parse a duration such as `30`, `30s`, `1.5s`, `500ms`, `5m`, `2h`, `7d` into seconds; at
/// most [`MAX_DURATION_SECS`].
pub fn parse_duration_secs(text: &str) -> Option<f64> {
    let t = text.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&t[..i], &t[i..]),
        None => (t, "s"),
    };
    let value: f64 = num.trim().parse().ok()?;
    let secs = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86400.0,
        _ => return None,
    };
    (secs.is_finite() && (0.0..=MAX_DURATION_SECS).contains(&secs)).then_some(secs)
}
