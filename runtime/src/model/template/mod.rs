//! Workflow templates: the parsed, validated shape of a workflow, from YAML or WorkDo XML.
//!
//! Both formats produce the same [`Template`]; validation is shared and every problem names the
//! file, the line (when the format gives one) and the field.

mod xml;
mod yaml;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
    /// The function that performs the step; none means a human (or external robot) task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionSpec>,
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

/// A template parsed from its source, with the source and its digest.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub template: Template,
    pub format: Format,
    pub source: String,
    pub sha256: String,
    pub origin: String,
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
    fn one(file: &str, line: Option<usize>, field: &str, message: impl Into<String>) -> Self {
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
    let template = match format {
        Format::Yaml => yaml::parse(origin, source)?,
        Format::Xml => xml::parse(origin, source)?,
    };
    Ok(Loaded {
        template,
        format,
        source: source.to_string(),
        sha256: sha256_hex(source),
        origin: origin.to_string(),
    })
}

/// Read and parse one template file; the format comes from its extension.
///
/// # Errors
/// Unreadable file, unknown extension, or the template's own problems.
pub fn parse_file(path: &Path) -> Result<Loaded, TemplateError> {
    let origin = path.display().to_string();
    let format = Format::from_path(path).ok_or_else(|| {
        TemplateError::one(
            &origin,
            None,
            "file",
            "unknown extension: expected .yaml, .yml or .xml",
        )
    })?;
    let bytes = std::fs::read(path)
        .map_err(|e| TemplateError::one(&origin, None, "file", format!("cannot read: {e}")))?;
    let source = String::from_utf8(bytes).map_err(|e| {
        TemplateError::one(
            &origin,
            None,
            "file",
            format!("not UTF-8 (byte {})", e.utf8_error().valid_up_to()),
        )
    })?;
    parse(&origin, format, &source)
}

/// Template files under `path`: the file itself, or every .yaml/.yml/.xml file in the folder
/// (recursively), sorted so loads are repeatable.
///
/// # Errors
/// When `path` cannot be read.
pub fn find_files(path: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if Format::from_path(&p).is_some() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
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

/// The first field of a template (as JSON) holding a NUL character: the step's index, if in
/// a step, and the field's name there.
fn nul_field(template: &serde_json::Value) -> Option<(Option<usize>, String)> {
    fn find(v: &serde_json::Value, at: &str) -> Option<String> {
        match v {
            serde_json::Value::String(s) if s.contains('\0') => Some(at.to_string()),
            serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, at)),
            serde_json::Value::Object(m) => m.iter().find_map(|(k, x)| {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                if k.contains('\0') {
                    Some(here)
                } else {
                    find(x, &here)
                }
            }),
            _ => None,
        }
    }
    let object = template.as_object()?;
    if let Some(steps) = object.get("steps").and_then(|s| s.as_array()) {
        for (i, step) in steps.iter().enumerate() {
            if let Some(field) = find(step, "") {
                return Some((Some(i), field));
            }
        }
    }
    object
        .iter()
        .filter(|(k, _)| k.as_str() != "steps")
        .find_map(|(k, v)| find(v, k))
        .map(|f| (None, f))
}

/// Checks shared by both formats: names, duplicates, prerequisites, cycles, statuses.
///
/// Long on purpose: every rule a template must satisfy, in one place, so that all problems are
/// collected and reported at once.
pub(crate) fn validate(
    origin: &str,
    template: &Template,
    at: &dyn Locate,
) -> Result<(), TemplateError> {
    let mut problems = Vec::new();
    let mut problem = |step: Option<usize>, field: &str, message: String| {
        problems.push(Problem {
            file: origin.to_string(),
            line: at.line(step, field),
            field: field.to_string(),
            message,
        });
    };
    // Postgres cannot store a NUL character (U+0000) in text or jsonb: refuse it here, naming
    // the field, instead of failing when the template or its steps are written.
    if let Ok(value) = serde_json::to_value(template)
        && let Some((step, field)) = nul_field(&value)
    {
        problem(
            step,
            &field,
            "contains a NUL character (U+0000), which workdo cannot store".into(),
        );
    }
    if !valid_name(&template.name) {
        problem(
            None,
            "name",
            format!(
                "invalid template name {:?}: use letters, digits and -_. (at most 100)",
                template.name
            ),
        );
    }
    // A template with no steps is valid: the workflow service keeps such `workflow-def`s "for
    // indexing", and a folder of them must load whole. Starting one makes a workflow that is
    // completed at once (it has no step to wait for).
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, step) in template.steps.iter().enumerate() {
        if !valid_name(&step.name) {
            problem(
                Some(i),
                "name",
                format!(
                    "invalid step name {:?}: use letters, digits and -_. (at most 100)",
                    step.name
                ),
            );
        }
        if let Some(first) = index.insert(step.name.as_str(), i) {
            let first_line = at
                .line(Some(first), "name")
                .map(|l| format!(" (first at line {l})"))
                .unwrap_or_default();
            problem(
                Some(i),
                "name",
                format!("duplicate step {:?}{first_line}", step.name),
            );
        }
        if step.error_limit == 0 {
            problem(
                Some(i),
                "error-limit",
                "must be at least 1 (the number of attempts)".into(),
            );
        }
        if step.batch_limit == Some(0) {
            problem(Some(i), "batch-limit", "must be at least 1".into());
        }
        if let Some(lc) = &step.lifecycle
            && !valid_name(lc)
        {
            problem(
                Some(i),
                "lifecycle",
                format!("invalid milestone name {lc:?}"),
            );
        }
        for s in &step.statuses {
            if Status::parse(s).is_some_and(|b| b.is_builtin()) || !Status::valid_custom(s) {
                problem(
                    Some(i),
                    "statuses",
                    format!("{s:?} is not a usable intermediate status (built-in or malformed)"),
                );
            }
        }
        if let Some(f) = &step.function {
            check_function(f, &mut |field, msg| problem(Some(i), field, msg));
        }
    }
    for (i, step) in template.steps.iter().enumerate() {
        let mut seen = HashSet::new();
        for p in &step.prereqs {
            if p == &step.name {
                problem(
                    Some(i),
                    "prereq",
                    format!("step {:?} cannot be its own prerequisite", step.name),
                );
            } else if !index.contains_key(p.as_str()) {
                problem(
                    Some(i),
                    "prereq",
                    format!(
                        "unknown prerequisite {p:?} of step {:?}: no step of that name in {}",
                        step.name, template.name
                    ),
                );
            } else if !seen.insert(p) {
                problem(
                    Some(i),
                    "prereq",
                    format!("prerequisite {p:?} listed twice"),
                );
            }
        }
    }
    if let Some(cycle) = find_cycle(template, &index) {
        let first = index.get(cycle[0].as_str()).copied();
        problem(
            first,
            "prereq",
            format!("prerequisites form a cycle: {}", cycle.join(" -> ")),
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(TemplateError { problems })
    }
}

fn check_function(f: &FunctionSpec, problem: &mut dyn FnMut(&str, String)) {
    if !(f.timeout_secs > 0.0 && f.timeout_secs.is_finite()) {
        problem(
            "timeout",
            format!("must be a positive duration, got {}", f.timeout_secs),
        );
    }
    if f.concurrency == 0 {
        problem("concurrency", "must be at least 1".into());
    }
    match &f.runner {
        Runner::Exec { argv } | Runner::Warm { argv, .. }
            if argv.is_empty() || argv[0].is_empty() =>
        {
            problem("function", "the command is empty".into())
        }
        Runner::Warm { pool: 0, .. } => problem("pool", "must be at least 1".into()),
        Runner::Warm { pipeline: 0, .. } => problem("pipeline", "must be at least 1".into()),
        Runner::Http { url } if !(url.starts_with("http://") || url.starts_with("https://")) => {
            problem("http", format!("{url:?} is not an http(s) URL"))
        }
        _ => {}
    }
}

/// A cycle among prerequisites, as step names with the first repeated at the end.
fn find_cycle(template: &Template, index: &HashMap<&str, usize>) -> Option<Vec<String>> {
    // Iterative DFS with colours: 0 unvisited, 1 on stack, 2 done.
    let n = template.steps.len();
    let mut colour = vec![0u8; n];
    for root in 0..n {
        if colour[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        colour[root] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let prereqs = &template.steps[node].prereqs;
            if *next < prereqs.len() {
                let p = &prereqs[*next];
                *next += 1;
                let Some(&child) = index.get(p.as_str()) else {
                    continue;
                };
                if child == node {
                    continue; // reported as self-prerequisite
                }
                match colour[child] {
                    0 => {
                        colour[child] = 1;
                        stack.push((child, 0));
                    }
                    1 => {
                        let start = stack.iter().position(|&(s, _)| s == child).unwrap_or(0);
                        let mut cycle: Vec<String> = stack[start..]
                            .iter()
                            .map(|&(s, _)| template.steps[s].name.clone())
                            .collect();
                        cycle.push(template.steps[child].name.clone());
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
                stack.pop();
            }
        }
    }
    None
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

/// Parse a duration such as `30`, `30s`, `1.5s`, `500ms`, `5m`, `2h` into seconds.
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
    (secs.is_finite() && secs >= 0.0).then_some(secs)
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
