//! WorkDo XML templates, as the workflow service reads them:
//!
//! ```xml
//! <workflow-def id="accessionWF" repository="dor">
//!   <process name="start-accession" status="completed" lifecycle="submitted" sequence="1">
//!     <label>Start Accessioning</label>
//!   </process>
//!   <process name="descriptive-metadata" batch-limit="1000" error-limit="10" sequence="2">
//!     <prereq>start-accession</prereq>
//!     <function exec="functions/bin/descriptive-metadata" timeout="30s"/>
//!   </process>
//! </workflow-def>
//! ```
//! `<function>` is ours (the service bound robots elsewhere); every other element and attribute is
//! the service's. Attributes we do not use (`sequence`, `queue-limit`, `repository`) are accepted
//! and ignored, as the service did.

use std::collections::HashMap;

use roxmltree::{Document, Node};

use super::{
    DEFAULT_ERROR_LIMIT, DEFAULT_TIMEOUT_SECS, FunctionSpec, Locate, Problem, Runner, StepSpec,
    Template, TemplateError, parse_duration_secs, validate,
};
use crate::model::status::Status;

struct Lines {
    root: usize,
    steps: Vec<HashMap<String, usize>>,
}

impl Locate for Lines {
    fn line(&self, step: Option<usize>, field: &str) -> Option<usize> {
        match step {
            None => Some(self.root),
            Some(i) => {
                let fields = self.steps.get(i)?;
                fields.get(field).or_else(|| fields.get("")).copied()
            }
        }
    }
}

/// Read a `workflow-def` document into a template.
///
/// Long on purpose: one pass over the document in source order, each element read next to its
/// checks so every problem carries its position.
pub(super) fn parse(origin: &str, source: &str) -> Result<Template, TemplateError> {
    let doc = Document::parse(source).map_err(|e| {
        let pos = e.pos();
        TemplateError::one(
            origin,
            Some(pos.row as usize),
            "xml",
            format!("malformed XML: {e}"),
        )
    })?;
    // Lines from byte offsets by binary search over the lines' starts, computed once:
    // `Document::text_pos_at` scans from the start of the text on every call, which made
    // loading quadratic (20,000 processes took 25–30 s).
    let starts: Vec<usize> = std::iter::once(0)
        .chain(source.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let line_of = |pos: usize| starts.partition_point(|&s| s <= pos);
    let root = doc.root_element();
    let mut problems: Vec<Problem> = Vec::new();
    let mut problem = |line: usize, field: &str, message: String| {
        problems.push(Problem {
            file: origin.to_string(),
            line: Some(line),
            field: field.to_string(),
            message,
        });
    };
    let root_line = line_of(root.range().start);
    if root.tag_name().name() != "workflow-def" {
        return Err(TemplateError::one(
            origin,
            Some(root_line),
            "workflow-def",
            format!(
                "root element is <{}>, expected <workflow-def>",
                root.tag_name().name()
            ),
        ));
    }
    {
        unknown_parts(
            root,
            WORKFLOW_DEF_ATTRS,
            &["process"],
            &line_of,
            &mut problem,
        );
    }
    let name = match root.attribute("id") {
        Some(id) => id.trim().to_string(),
        None => {
            problem(root_line, "id", "<workflow-def> has no id attribute".into());
            String::new()
        }
    };
    let mut steps = Vec::new();
    let mut lines = Lines {
        root: root_line,
        steps: Vec::new(),
    };
    for node in root.children().filter(|n| n.is_element()) {
        if node.tag_name().name() != "process" {
            continue;
        }
        unknown_parts(
            node,
            PROCESS_ATTRS,
            &["label", "prereq", "function", "status"],
            &line_of,
            &mut problem,
        );
        let node_line = line_of(node.range().start);
        let mut at: HashMap<String, usize> = HashMap::new();
        at.insert(String::new(), node_line);
        for attr in node.attributes() {
            at.insert(attr.name().to_string(), line_of(attr.range().start));
        }
        let attr_line =
            |at: &HashMap<String, usize>, name: &str| at.get(name).copied().unwrap_or(node_line);
        let step_name = match node.attribute("name") {
            Some(n) => n.trim().to_string(),
            None => {
                problem(node_line, "name", "<process> has no name attribute".into());
                String::new()
            }
        };
        let number = |attr: &str, problem: &mut dyn FnMut(usize, &str, String)| -> Option<u32> {
            let text = node.attribute(attr)?;
            match text.trim().parse::<u32>() {
                Ok(v) => Some(v),
                Err(_) => {
                    problem(
                        attr_line(&at, attr),
                        attr,
                        format!("{text:?} is not a whole number"),
                    );
                    None
                }
            }
        };
        let error_limit = number("error-limit", &mut problem).unwrap_or(DEFAULT_ERROR_LIMIT);
        let batch_limit = number("batch-limit", &mut problem);
        let _ = number("sequence", &mut problem);
        let skip_queue = match node.attribute("skip-queue").map(str::trim) {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                problem(
                    attr_line(&at, "skip-queue"),
                    "skip-queue",
                    format!("{v:?} is not true or false"),
                );
                false
            }
        };
        let initial_status = match node.attribute("status").map(str::trim) {
            None | Some("waiting") | Some("") => None,
            Some("completed") => Some(Status::Completed),
            Some("skipped") => Some(Status::Skipped),
            Some(v) => {
                problem(
                    attr_line(&at, "status"),
                    "status",
                    format!("{v:?}: a template step may start waiting, completed or skipped"),
                );
                None
            }
        };
        let lifecycle = node
            .attribute("lifecycle")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from);
        let mut label = node.attribute("label").map(String::from);
        let mut prereqs = Vec::new();
        let mut statuses = Vec::new();
        let mut function = None;
        for child in node.children().filter(|n| n.is_element()) {
            let child_line = line_of(child.range().start);
            match child.tag_name().name() {
                "label" => label = Some(text_of(child)),
                // An intermediate status the step may report (`<status>IN PROCESS</status>`),
                // as YAML's `statuses:`.
                "status" => {
                    let s = text_of(child).trim().to_string();
                    if s.is_empty() {
                        problem(child_line, "status", "an empty <status>".into());
                    } else {
                        at.entry("statuses".into()).or_insert(child_line);
                        statuses.push(s);
                    }
                }
                "prereq" => {
                    let raw = text_of(child);
                    at.entry("prereq".into()).or_insert(child_line);
                    // Qualified names (`dor:accessionWF:step`, `accessionWF:step`) of this very
                    // workflow are plain prerequisites; others stay qualified and fail validation.
                    let parts: Vec<&str> = raw.split(':').collect();
                    let local = match parts.as_slice() {
                        [_, wf, step] | [wf, step] if *wf == name => step.to_string(),
                        _ => raw,
                    };
                    prereqs.push(local);
                }
                "function" => {
                    unknown_parts(child, FUNCTION_ATTRS, &[], &line_of, &mut problem);
                    at.insert("function".into(), child_line);
                    function =
                        parse_function(child, &mut |field, msg| problem(child_line, field, msg));
                }
                _ => {}
            }
        }
        lines.steps.push(at);
        steps.push(StepSpec {
            name: step_name,
            label,
            prereqs,
            lifecycle,
            error_limit,
            batch_limit,
            skip_queue,
            initial_status,
            statuses,
            function,
            observe: None,
            generate: None,
        });
    }
    let template = Template {
        name,
        description: None,
        steps,
        alert_to: Vec::new(),
        schedules: Vec::new(),
        bricklets: Vec::new(),
        compensate: None,
        machine: None,
    };
    // Every problem at once: those found reading the elements, and the whole template's.
    if let Err(e) = validate(origin, &template, &lines) {
        // A missing id was said already; "invalid template name \"\"" would say it again.
        let no_id = template.name.is_empty();
        problems.extend(
            e.problems
                .into_iter()
                .filter(|p| !(no_id && p.field == "name" && p.line == Some(root_line))),
        );
    }
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        return Err(TemplateError { problems });
    }
    Ok(template)
}

/// Attributes of `<workflow-def>`: ours, and the workflow service's we accept and ignore.
const WORKFLOW_DEF_ATTRS: &[&str] = &["id", "repository"];
/// Attributes of `<process>`, the service's `sequence` and `queue-limit` accepted and ignored.
const PROCESS_ATTRS: &[&str] = &[
    "name",
    "status",
    "lifecycle",
    "label",
    "error-limit",
    "batch-limit",
    "skip-queue",
    "sequence",
    "queue-limit",
];
/// Attributes of `<function>`.
const FUNCTION_ATTRS: &[&str] = &[
    "exec",
    "warm",
    "http",
    "builtin",
    "deployed",
    "mode",
    "pool",
    "pipeline",
    "timeout",
    "concurrency",
    "documents",
];

/// A problem for each attribute of `node` not in `attrs` and each child element not in
/// `children`: a typo (`eror-limit`, `<functoin>`) must not silently drop a setting. Attributes
/// in a namespace (`xsi:…`) are left alone.
fn unknown_parts(
    node: Node<'_, '_>,
    attrs: &[&str],
    children: &[&str],
    line_of: &dyn Fn(usize) -> usize,
    problem: &mut dyn FnMut(usize, &str, String),
) {
    let element = node.tag_name().name();
    for attr in node.attributes() {
        if attr.namespace().is_none() && !attrs.contains(&attr.name()) {
            problem(
                line_of(attr.range().start),
                attr.name(),
                format!(
                    "unknown attribute {:?} on <{element}>; known: {}",
                    attr.name(),
                    attrs.join(", ")
                ),
            );
        }
    }
    for child in node.children().filter(|n| n.is_element()) {
        let name = child.tag_name().name();
        if !children.contains(&name) {
            let known = if children.is_empty() {
                "it takes none".to_string()
            } else {
                format!("known: {}", children.join(", "))
            };
            problem(
                line_of(child.range().start),
                name,
                format!("unknown element <{name}> in <{element}>; {known}"),
            );
        }
    }
}

fn text_of(node: Node<'_, '_>) -> String {
    node.text().unwrap_or_default().trim().to_string()
}

fn parse_function(
    node: Node<'_, '_>,
    problem: &mut dyn FnMut(&str, String),
) -> Option<FunctionSpec> {
    let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    let number = |attr: &str, default: u32, problem: &mut dyn FnMut(&str, String)| match node
        .attribute(attr)
    {
        None => default,
        Some(t) => t.trim().parse().unwrap_or_else(|_| {
            problem(attr, format!("{t:?} is not a whole number"));
            default
        }),
    };
    if node.attribute("mode").is_some() && node.attribute("deployed").is_none() {
        problem(
            "mode",
            "mode is for a deployed function (deployed=\"NAME\"); use warm=\"…\" for a warm command"
                .into(),
        );
        return None;
    }
    let runner = match (
        node.attribute("exec"),
        node.attribute("warm"),
        node.attribute("http"),
        node.attribute("builtin"),
        node.attribute("deployed"),
    ) {
        (Some(e), None, None, None, None) => Runner::Exec { argv: argv(e) },
        (None, Some(w), None, None, None) => Runner::Warm {
            argv: argv(w),
            pool: number("pool", 1, problem),
            pipeline: number("pipeline", 1, problem),
        },
        (None, None, Some(u), None, None) => Runner::Http {
            url: u.trim().to_string(),
        },
        (None, None, None, None, Some(d)) => {
            let (name, version) = match crate::model::spec::parse_deployed(d) {
                Ok(nv) => nv,
                Err(e) => {
                    problem("deployed", e);
                    return None;
                }
            };
            let warm = match node.attribute("mode").map(str::trim) {
                None | Some("exec") => None,
                Some("warm") => Some(crate::model::spec::WarmShape {
                    pool: number("pool", 1, problem),
                    pipeline: number("pipeline", 1, problem),
                }),
                Some(other) => {
                    problem("mode", format!("{other:?} is not exec or warm"));
                    return None;
                }
            };
            Runner::Deployed {
                name,
                version,
                warm,
            }
        }
        (None, None, None, Some(b), None) => {
            if let Some(why) = super::unknown_builtin(b.trim()) {
                problem("builtin", why);
                return None;
            }
            Runner::Builtin {
                name: b.trim().to_string(),
            }
        }
        _ => {
            problem(
                "function",
                "<function> needs exactly one of exec, warm, http, builtin or deployed".into(),
            );
            return None;
        }
    };
    let timeout_secs = match node.attribute("timeout") {
        None => DEFAULT_TIMEOUT_SECS,
        Some(t) => parse_duration_secs(t).unwrap_or_else(|| {
            problem(
                "timeout",
                format!("{t:?} is not a duration such as 30s or 5m"),
            );
            DEFAULT_TIMEOUT_SECS
        }),
    };
    let documents = node
        .attribute("documents")
        .map(|d| {
            d.split([',', ' '])
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let concurrency = number("concurrency", runner.default_concurrency(), problem);
    Some(FunctionSpec {
        runner,
        timeout_secs,
        concurrency,
        env: Default::default(),
        documents,
    })
}
