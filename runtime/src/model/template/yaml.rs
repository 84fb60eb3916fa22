//! The YAML template format (documented with a full example in docs/templates.md).
//!
//! Keys use the same names as the WorkDo XML attributes (`error-limit`, `batch-limit`,
//! `skip-queue`, `lifecycle`, `status`), so a template reads the same in either format. Unknown
//! keys are errors: a typo must not silently drop a setting.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::yaml_lines::Lines;
use super::{
    DEFAULT_ERROR_LIMIT, DEFAULT_TIMEOUT_SECS, FunctionSpec, Kind, Locate, Runner, StepSpec,
    Template, TemplateError, parse_duration_secs, validate,
};
use crate::model::status::Status;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTemplate {
    /// `template` (the default) or `bricklet` (a file holding one reusable fragment).
    #[serde(default)]
    kind: Option<String>,
    name: String,
    /// A bricklet file's compensating bricklet.
    #[serde(default)]
    compensate: Option<String>,
    #[serde(default)]
    description: Option<String>,
    /// Default `error-limit` for the steps.
    #[serde(default)]
    error_limit: Option<u32>,
    #[serde(default)]
    alerts: Option<RawAlerts>,
    steps: Vec<RawStep>,
    #[serde(default)]
    schedules: Vec<crate::model::schedule::ScheduleSpec>,
    /// Bricklets defined inline, for this template's generators.
    #[serde(default)]
    bricklets: Vec<RawBricklet>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBricklet {
    name: String,
    #[serde(default)]
    compensate: Option<String>,
    steps: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlerts {
    #[serde(default)]
    to: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawStep {
    name: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default, alias = "prereq")]
    prereqs: Vec<String>,
    #[serde(default)]
    lifecycle: Option<String>,
    #[serde(default)]
    error_limit: Option<u32>,
    #[serde(default)]
    batch_limit: Option<u32>,
    #[serde(default)]
    skip_queue: bool,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    statuses: Vec<String>,
    #[serde(default)]
    function: Option<RawFunction>,
    #[serde(default)]
    observe: Option<crate::model::dispatch::Observe>,
    #[serde(default)]
    generate: Option<crate::model::dispatch::Generate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFunction {
    #[serde(default)]
    exec: Option<Command>,
    #[serde(default)]
    warm: Option<Command>,
    #[serde(default)]
    http: Option<String>,
    #[serde(default)]
    builtin: Option<String>,
    /// `deployed: shelve` or `deployed: shelve@3`.
    #[serde(default)]
    deployed: Option<String>,
    /// `exec` (the default) or `warm`, for a deployed function.
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    pool: Option<u32>,
    #[serde(default)]
    pipeline: Option<u32>,
    #[serde(default)]
    timeout: Option<Duration>,
    #[serde(default)]
    concurrency: Option<u32>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    documents: Vec<String>,
}

/// `exec: prog arg` or `exec: [prog, arg]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Command {
    Line(String),
    Argv(Vec<String>),
}

impl Command {
    fn argv(self) -> Vec<String> {
        match self {
            Command::Line(s) => s.split_whitespace().map(String::from).collect(),
            Command::Argv(v) => v,
        }
    }
}

/// `timeout: 30` (seconds) or `timeout: 30s`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Duration {
    Secs(f64),
    Text(String),
}

/// A machine template as written (`kind: machine`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMachine {
    #[allow(dead_code)]
    kind: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    config: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    variables: BTreeMap<String, serde_json::Value>,
    initial: String,
    #[serde(default)]
    global: BTreeMap<String, crate::model::machine::Transition>,
    states: BTreeMap<String, crate::model::machine::State>,
    #[serde(default)]
    functions: BTreeMap<String, RawFunction>,
    #[serde(default)]
    access: Option<crate::model::machine::Access>,
    #[serde(default)]
    alerts: Option<RawAlerts>,
    #[serde(default, rename = "keep-children")]
    keep_children: bool,
}

/// Just the `kind` key, to choose the parser.
#[derive(Deserialize)]
struct KindOnly {
    #[serde(default)]
    kind: Option<String>,
}

fn yaml_error(origin: &str, e: &serde_norway::Error) -> TemplateError {
    let line = e.location().map(|l| l.line());
    let message = e.to_string();
    let field = message
        .split_once(": ")
        .map(|(path, _)| path)
        .filter(|p| !p.contains(' '))
        .unwrap_or("yaml")
        .to_string();
    TemplateError::one(origin, line, &field, format!("malformed YAML: {message}"))
}

/// A `kind: machine` source into a template whose `machine` holds the description.
fn parse_machine(origin: &str, source: &str) -> Result<(Template, Kind), TemplateError> {
    let raw: RawMachine = serde_norway::from_str(source).map_err(|e| yaml_error(origin, &e))?;
    let mut problems = Vec::new();
    let mut functions = BTreeMap::new();
    for (name, f) in raw.functions {
        match convert_function(f) {
            Ok(f) => {
                functions.insert(name, f);
            }
            Err((field, message)) => problems.push(super::Problem {
                file: origin.to_string(),
                line: line_of_key(source, &name),
                field: format!("functions.{name}.{field}"),
                message,
            }),
        }
    }
    let machine = crate::model::machine::Machine {
        config: raw.config,
        variables: raw.variables,
        initial: raw.initial,
        global: raw.global,
        states: raw.states,
        functions,
        access: raw.access,
        keep_children: raw.keep_children,
    };
    if let Err(e) =
        crate::model::machine::validate(origin, &raw.name, &machine, &|k| line_of_key(source, k))
    {
        problems.extend(e.problems);
    }
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        return Err(TemplateError { problems });
    }
    Ok((
        Template {
            name: raw.name,
            description: raw.description,
            steps: Vec::new(),
            alert_to: raw.alerts.map(|a| a.to).unwrap_or_default(),
            schedules: Vec::new(),
            bricklets: Vec::new(),
            compensate: None,
            machine: Some(machine),
        },
        Kind::Machine,
    ))
}

/// The first line (from 1) where `key:` is written, for a machine's messages.
fn line_of_key(source: &str, key: &str) -> Option<usize> {
    source
        .lines()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ");
            t.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i + 1)
}

pub(super) fn parse(origin: &str, source: &str) -> Result<(Template, Kind), TemplateError> {
    if let Ok(KindOnly { kind: Some(kind) }) = serde_norway::from_str::<KindOnly>(source)
        && kind == "machine"
    {
        return parse_machine(origin, source);
    }
    let raw: RawTemplate = serde_norway::from_str(source).map_err(|e| {
        let line = e.location().map(|l| l.line());
        // serde_norway's message starts with the path of the offending field when it knows it.
        let message = e.to_string();
        let field = message
            .split_once(": ")
            .map(|(path, _)| path)
            .filter(|p| !p.contains(' '))
            .unwrap_or("yaml")
            .to_string();
        TemplateError::one(origin, line, &field, format!("malformed YAML: {message}"))
    })?;
    let lines = Lines::new(source);
    let mut problems = Vec::new();
    let default_limit = raw.error_limit.unwrap_or(DEFAULT_ERROR_LIMIT);
    let is_bricklet = match raw.kind.as_deref() {
        None | Some("template") => false,
        Some("bricklet") => true,
        Some(other) => {
            problems.push(super::Problem {
                file: origin.to_string(),
                line: lines.line(None, "kind"),
                field: "kind".into(),
                message: format!("{other:?}: a file is a template or a bricklet"),
            });
            false
        }
    };
    let steps: Vec<StepSpec> = raw
        .steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| convert_step(origin, &lines, Some(i), s, default_limit, &mut problems))
        .collect();
    let bricklets: Vec<crate::model::dispatch::Bricklet> = raw
        .bricklets
        .into_iter()
        .map(|b| crate::model::dispatch::Bricklet {
            name: b.name,
            compensate: b.compensate,
            steps: b
                .steps
                .into_iter()
                .map(|s| convert_step(origin, &lines, None, s, default_limit, &mut problems))
                .collect(),
        })
        .collect();
    if is_bricklet && !bricklets.is_empty() {
        problems.push(super::Problem {
            file: origin.to_string(),
            line: lines.line(None, "bricklets"),
            field: "bricklets".into(),
            message: "a bricklet file is one bricklet: its steps are under steps:".into(),
        });
    }
    if !is_bricklet && raw.compensate.is_some() {
        problems.push(super::Problem {
            file: origin.to_string(),
            line: lines.line(None, "compensate"),
            field: "compensate".into(),
            message: "only a bricklet (kind: bricklet) names a compensate".into(),
        });
    }
    let mut schedules = raw.schedules;
    for s in &mut schedules {
        if let Err(message) = s.validate(Some(&raw.name)) {
            problems.push(super::Problem {
                file: origin.to_string(),
                line: lines
                    .key_line(0, lines.lines.len(), &["schedules"])
                    .map(|l| l + 1),
                field: "schedules".into(),
                message,
            });
        }
    }
    if let Some(name) = crate::model::schedule::duplicate_name(&schedules) {
        problems.push(super::Problem {
            file: origin.to_string(),
            line: lines
                .key_line(0, lines.lines.len(), &["schedules"])
                .map(|l| l + 1),
            field: "schedules".into(),
            message: format!(
                "schedule {name:?} is named twice: one would silently replace the other"
            ),
        });
    }
    let template = Template {
        name: raw.name,
        description: raw.description,
        steps,
        alert_to: raw.alerts.map(|a| a.to).unwrap_or_default(),
        schedules,
        bricklets,
        compensate: raw.compensate,
        machine: None,
    };
    // Every problem at once: those found reading the steps, and the whole template's.
    if let Err(e) = validate(origin, &template, &lines) {
        problems.extend(e.problems);
    }
    if is_bricklet {
        let as_bricklet = crate::model::dispatch::Bricklet {
            name: template.name.clone(),
            compensate: template.compensate.clone(),
            steps: template.steps.clone(),
        };
        super::validate::check_bricklet(origin, &as_bricklet, &mut |field, message| {
            if !message.contains("invalid step name") && !message.contains("prerequisite") {
                problems.push(super::Problem {
                    file: origin.to_string(),
                    line: lines.line(None, "steps"),
                    field: field.to_string(),
                    message,
                });
            }
        });
    }
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        problems.dedup();
        return Err(TemplateError { problems });
    }
    Ok((
        template,
        if is_bricklet {
            Kind::Bricklet
        } else {
            Kind::Template
        },
    ))
}

/// A step as the model has it. `index` places its problems (`None`: a bricklet's step, placed
/// at the `bricklets:` key).
fn convert_step(
    origin: &str,
    lines: &Lines<'_>,
    index: Option<usize>,
    s: RawStep,
    default_limit: u32,
    problems: &mut Vec<super::Problem>,
) -> StepSpec {
    let line = |field: &str| match index {
        Some(i) => lines.line(Some(i), field),
        None => lines.line(None, "bricklets"),
    };
    let initial_status = match s.status.as_deref() {
        None | Some("waiting") => None,
        Some("completed") => Some(Status::Completed),
        Some("skipped") => Some(Status::Skipped),
        Some(other) => {
            problems.push(super::Problem {
                file: origin.to_string(),
                line: line("status"),
                field: "status".into(),
                message: format!(
                    "{other:?}: a template step may start waiting, completed or skipped"
                ),
            });
            None
        }
    };
    let function = match s.function {
        None => None,
        Some(f) => match convert_function(f) {
            Ok(f) => Some(f),
            Err((field, message)) => {
                problems.push(super::Problem {
                    file: origin.to_string(),
                    line: line(field),
                    field: field.into(),
                    message,
                });
                None
            }
        },
    };
    StepSpec {
        name: s.name,
        label: s.label,
        prereqs: s.prereqs,
        lifecycle: s.lifecycle,
        error_limit: s.error_limit.unwrap_or(default_limit),
        batch_limit: s.batch_limit,
        skip_queue: s.skip_queue,
        initial_status,
        statuses: s.statuses,
        function,
        observe: s.observe,
        generate: s.generate,
    }
}

pub(crate) fn convert_function(f: RawFunction) -> Result<FunctionSpec, (&'static str, String)> {
    if f.mode.is_some() && f.deployed.is_none() {
        return Err((
            "mode",
            "is for a deployed function (`deployed: NAME`); use warm: for a warm command".into(),
        ));
    }
    let runner = match (f.exec, f.warm, f.http, f.builtin, f.deployed) {
        (Some(c), None, None, None, None) => Runner::Exec { argv: c.argv() },
        (None, Some(c), None, None, None) => Runner::Warm {
            argv: c.argv(),
            pool: f.pool.unwrap_or(1),
            pipeline: f.pipeline.unwrap_or(1),
        },
        (None, None, Some(url), None, None) => Runner::Http { url },
        (None, None, None, Some(name), None) => {
            if let Some(why) = super::unknown_builtin(&name) {
                return Err(("builtin", why));
            }
            Runner::Builtin { name }
        }
        (None, None, None, None, Some(d)) => {
            let (name, version) =
                crate::model::spec::parse_deployed(&d).map_err(|e| ("deployed", e))?;
            let warm = match f.mode.as_deref().map(str::trim) {
                None | Some("exec") => {
                    if f.pool.is_some() || f.pipeline.is_some() {
                        return Err(("pool", "pool and pipeline need mode: warm".into()));
                    }
                    None
                }
                Some("warm") => Some(crate::model::spec::WarmShape {
                    pool: f.pool.unwrap_or(1),
                    pipeline: f.pipeline.unwrap_or(1),
                }),
                Some(other) => {
                    return Err(("mode", format!("{other:?} is not exec or warm")));
                }
            };
            Runner::Deployed {
                name,
                version,
                warm,
            }
        }
        _ => {
            return Err((
                "function",
                "needs exactly one of exec, warm, http, builtin or deployed".into(),
            ));
        }
    };
    let timeout_secs = match f.timeout {
        None => DEFAULT_TIMEOUT_SECS,
        Some(Duration::Secs(s)) => s,
        Some(Duration::Text(t)) => parse_duration_secs(&t).ok_or_else(|| {
            (
                "timeout",
                format!("{t:?} is not a duration such as 30s or 5m"),
            )
        })?,
    };
    let concurrency = f.concurrency.unwrap_or(runner.default_concurrency());
    Ok(FunctionSpec {
        runner,
        timeout_secs,
        concurrency,
        env: f.env,
        documents: f.documents,
    })
}
