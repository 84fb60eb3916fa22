//! Workflow templates: the parsed, validated shape of a workflow, from YAML or WorkDo XML.
//!
//! Both formats produce the same [`Template`]; validation is shared and every problem names the
//! file, the line (when the format gives one) and the field.

mod validate;
mod xml;
pub(crate) mod yaml;

pub(crate) use validate::validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::dispatch::{Bricklet, Generate, Observe};
use crate::model::status::Status;

/// Attempts a step gets when its template names no `error-limit`.
pub const DEFAULT_ERROR_LIMIT: u32 = 3;
/// Seconds a function may run when its step names no timeout.
pub const DEFAULT_TIMEOUT_SECS: f64 = 300.0;

/// A validated workflow template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub steps: Vec<StepSpec>,
    /// Alert mail recipients for this template's steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alert_to: Vec<String>,
    /// Cron schedules that start this template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<crate::model::schedule::ScheduleSpec>,
    /// Bricklets defined in this template (file bricklets are loaded on their own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bricklets: Vec<Bricklet>,
    /// A bricklet file's compensating bricklet (`kind: bricklet` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensate: Option<String>,
    /// A state machine (`kind: machine`): then `steps` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<crate::model::machine::Machine>,
}

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

/// The three ways to run a function.
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
}

fn one() -> u32 {
    1
}

impl Runner {
    /// Calls in flight per runtime process when the step does not say: one, except for a warm
    /// pool, which gets four per process so that each process has its next call waiting while
    /// it answers (a call waits for a free process within its timeout), or its pipeline's depth
    /// per process when that is deeper.
    pub fn default_concurrency(&self) -> u32 {
        match self {
            Runner::Warm { pool, pipeline, .. } => pool.saturating_mul((*pipeline).max(4)).max(1),
            _ => 1,
        }
    }
}

/// Where a template came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Yaml,
    Xml,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Xml => "xml",
        }
    }

    /// The format a file's extension names, if any.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "yaml" | "yml" => Some(Format::Yaml),
            "xml" => Some(Format::Xml),
            _ => None,
        }
    }
}

/// What a file defines: a workflow template, or a bricklet (`kind: bricklet`) that generators
/// of several templates compose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Template,
    Bricklet,
    Machine,
}

impl Kind {
    /// As stored in `workdo.templates.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Template => "steps",
            Kind::Bricklet => "bricklet",
            Kind::Machine => "machine",
        }
    }
}

/// A template parsed from its source, with the source and its digest.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub kind: Kind,
    pub template: Template,
    pub format: Format,
    pub source: String,
    pub sha256: String,
    pub origin: String,
}

/// The in-process functions a template may name with `builtin:` (the runtime's
/// `invoke::builtin` has one for each).
pub const BUILTINS: &[&str] = &["noop", "fail", "skip"];

/// Why `name` cannot be a builtin function, if it cannot.
pub(crate) fn unknown_builtin(name: &str) -> Option<String> {
    (!BUILTINS.contains(&name)).then(|| {
        format!(
            "no builtin function {name:?}; the builtins are {}",
            BUILTINS.join(", ")
        )
    })
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

/// Parse and validate a template source.
///
/// # Errors
/// A [`TemplateError`] listing every problem found, each with file, line and field.
pub fn parse(origin: &str, format: Format, source: &str) -> Result<Loaded, TemplateError> {
    // A byte-order mark (editors on Windows write one) is not part of the text.
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    // Checked before parsing: a YAML parser's time grows with the square of the nesting, and a
    // 100,000-deep file took over a minute to be refused.
    if format == Format::Yaml
        && let Some(line) = too_deep(source)
    {
        return Err(TemplateError::one(
            origin,
            Some(line),
            "yaml",
            format!("nests more than {MAX_NESTING} levels deep, more than any template needs"),
        ));
    }
    let (template, kind) = match format {
        Format::Yaml => yaml::parse(origin, source)?,
        Format::Xml => (xml::parse(origin, source)?, Kind::Template),
    };
    Ok(Loaded {
        kind,
        template,
        format,
        source: source.to_string(),
        sha256: sha256_hex(source),
        origin: origin.to_string(),
    })
}

pub fn sha256_hex(source: &str) -> String {
    hex::encode(Sha256::digest(source.as_bytes()))
}

/// Where a field of a step sits in the source, for messages.
pub(crate) trait Locate {
    /// Line of `field` of the step at `index` (or of the template when `None`).
    fn line(&self, step: Option<usize>, field: &str) -> Option<usize>;
}

/// Names may hold letters, digits and `-_.`, and start with a letter or digit.
pub(crate) fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.len() <= 100
}

impl Template {
    pub fn step(&self, name: &str) -> Option<&StepSpec> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Whether `status` may be set on `step`: a built-in status or one the step declares.
    pub fn allows_status(&self, step: &str, status: &str) -> bool {
        Status::parse(status).is_some_and(|s| s.is_builtin())
            || self
                .step(step)
                .is_some_and(|s| s.statuses.iter().any(|d| d == status))
    }
}

/// The deepest a YAML template may nest (indentation, `- ` items and `[`/`{` together).
pub const MAX_NESTING: usize = 128;

/// The first line at which `source` nests deeper than [`MAX_NESTING`], estimated without
/// parsing: indentation (two spaces a level), compact `- - ` items, and open flow brackets
/// outside quotes. It over-counts nothing a real template has; it exists to refuse a file
/// built to be deep before the parser spends minutes on it.
fn too_deep(source: &str) -> Option<usize> {
    let mut flow = 0usize;
    for (n, line) in source.lines().enumerate() {
        let rest = line.trim_start_matches([' ', '\t']);
        let indent = line.len() - rest.len();
        let mut dashes = 0;
        let mut r = rest;
        while let Some(t) = r.strip_prefix("- ").or_else(|| r.strip_prefix("-\t")) {
            dashes += 1;
            r = t.trim_start();
        }
        // An opening bracket counts wherever it is, even in what looks like a quoted string: a
        // quote cannot hide nesting. A closing one counts only outside quotes (either kind), so
        // a `]` inside a string cannot cancel an opening.
        let mut quote: Option<char> = None;
        for c in rest.chars() {
            match (quote, c) {
                (_, '[' | '{') => {
                    flow += 1;
                    if flow > MAX_NESTING {
                        return Some(n + 1);
                    }
                }
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
        if indent / 2 + dashes + flow > MAX_NESTING {
            return Some(n + 1);
        }
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_secs("30"), Some(30.0));
        assert_eq!(parse_duration_secs("500ms"), Some(0.5));
        assert_eq!(parse_duration_secs("5m"), Some(300.0));
        assert_eq!(parse_duration_secs("2h"), Some(7200.0));
        assert_eq!(parse_duration_secs("soon"), None);
        assert_eq!(parse_duration_secs("-1s"), None);
        assert_eq!(parse_duration_secs("36500d"), Some(MAX_DURATION_SECS));
        assert_eq!(parse_duration_secs("99999999d"), None);
        assert_eq!(parse_duration_secs("1e300d"), None);
    }

    #[test]
    fn nesting_is_bounded_before_parsing() {
        let deep = format!(
            "name: x\nsteps: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let e = parse("deep.yaml", Format::Yaml, &deep).expect_err("too deep");
        assert!(e.to_string().contains("deep.yaml:2"), "{e}");
        assert!(e.to_string().contains("nests more than 128"), "{e}");
        let dashes = format!("name: x\nsteps:\n{}a\n", "- ".repeat(200));
        assert!(parse("d.yaml", Format::Yaml, &dashes).is_err());
        // What real templates look like passes.
        assert_eq!(
            too_deep("name: a\nsteps:\n  - { name: b, prereqs: [a, \"[c\"] }\n"),
            None
        );
        // A closing bracket inside a single-quoted string does not cancel an opening one.
        let hidden = format!("name: x\nsteps: {}\n", "[']'".repeat(200));
        assert!(too_deep(&hidden).is_some());
    }

    #[test]
    fn names() {
        assert!(valid_name("google-convert"));
        assert!(valid_name("accessionWF"));
        assert!(!valid_name("-lead"));
        assert!(!valid_name("has space"));
        assert!(!valid_name(""));
    }
}
