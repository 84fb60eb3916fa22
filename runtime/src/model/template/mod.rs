//! Workflow templates: the parsed, validated shape of a workflow, from YAML or WorkDo XML.
//!
//! Both formats produce the same [`Template`]; validation is shared and every problem names the
//! file, the line (when the format gives one) and the field.

mod validate;
mod xml;
pub(crate) mod yaml;
mod yaml_lines;

pub(crate) use validate::validate;

use crate::model::spec::Bricklet;
pub(crate) use crate::model::spec::valid_name;
pub use crate::model::spec::{
    DEFAULT_ERROR_LIMIT, DEFAULT_TIMEOUT_SECS, FunctionSpec, MAX_DURATION_SECS, Problem, Runner,
    StepSpec, TemplateError, WarmShape, parse_duration_secs,
};

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::status::Status;

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

impl Template {
    pub fn step(&self, name: &str) -> Option<&StepSpec> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Every function definition in it: its steps', its own bricklets' steps' and its
    /// machine's function actions'.
    pub fn functions(&self) -> impl Iterator<Item = &FunctionSpec> {
        self.steps
            .iter()
            .chain(self.bricklets.iter().flat_map(|b| b.steps.iter()))
            .filter_map(|s| s.function.as_ref())
            .chain(self.machine.iter().flat_map(|m| m.functions.values()))
    }

    /// The function a step of a workflow of this template runs, by the step's name in the
    /// workflow: a step's own, a machine call's (`call/NAME#N`), or a generated step's
    /// (`GENERATOR/BRICKLET#N/STEP`) when the bricklet is defined in this template.
    pub fn function_of_step(&self, step: &str) -> Option<&FunctionSpec> {
        let base = |p: &str| p.split('#').next().unwrap_or(p).to_string();
        match step.split('/').collect::<Vec<_>>().as_slice() {
            [one] => self.step(one)?.function.as_ref(),
            ["call", f] => self.machine.as_ref()?.functions.get(&base(f)),
            [_, b, s] | [b, s] => {
                let (b, s) = (base(b), base(s));
                self.bricklets
                    .iter()
                    .find(|x| x.name == b)?
                    .steps
                    .iter()
                    .find(|x| x.name == s)?
                    .function
                    .as_ref()
            }
            _ => None,
        }
    }

    /// The deployed functions it names (`deployed: NAME` or `NAME@N`), each once, in order.
    pub fn deployed_functions(&self) -> Vec<(String, Option<u32>)> {
        let mut out: Vec<(String, Option<u32>)> = Vec::new();
        for f in self.functions() {
            if let Runner::Deployed { name, version, .. } = &f.runner {
                let named = (name.clone(), *version);
                if !out.contains(&named) {
                    out.push(named);
                }
            }
        }
        out
    }

    /// The steps that name `step` among their prerequisites.
    pub fn dependants<'a>(&'a self, step: &'a str) -> impl Iterator<Item = &'a StepSpec> + 'a {
        self.steps
            .iter()
            .filter(move |s| s.prereqs.iter().any(|p| p == step))
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
