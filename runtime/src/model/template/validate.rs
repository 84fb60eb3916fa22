//! Checks shared by both formats: names, duplicates, prerequisites, cycles, statuses,
//! functions, and dynamic dispatch (observers' rules, generators' refsets and construction
//! rules, bricklets).

use std::collections::{HashMap, HashSet};

use super::{FunctionSpec, Locate, Problem, Runner, Template, TemplateError, valid_name};
use crate::model::dispatch;
use crate::model::status::Status;

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
    // An address mail can never be sent to would be retried until it failed: refuse it here.
    for to in &template.alert_to {
        if let Err(e) = to.parse::<lettre::message::Mailbox>() {
            problem(
                None,
                "alerts",
                format!("alert recipient {to:?} is not a mail address: {e}"),
            );
        }
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
    check_dispatch(origin, template, &mut problem);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(TemplateError { problems })
    }
}

/// Observers, generators and bricklets: every rule's XPath parses and names a generator of this
/// template and bricklets of its refset; refsets and construction rules are consistent and
/// acyclic; inline bricklets are valid fragments. Refset names that are not inline bricklets
/// must be loaded bricklet files: the store checks those when the template is saved.
fn check_dispatch(
    origin: &str,
    template: &Template,
    problem: &mut dyn FnMut(Option<usize>, &str, String),
) {
    let generators: HashMap<&str, &dispatch::Generate> = template
        .steps
        .iter()
        .filter_map(|s| s.generate.as_ref().map(|g| (s.name.as_str(), g)))
        .collect();
    let inline: HashMap<&str, &dispatch::Bricklet> = template
        .bricklets
        .iter()
        .map(|b| (b.name.as_str(), b))
        .collect();
    for (i, step) in template.steps.iter().enumerate() {
        if step.observe.is_some() && step.generate.is_some() {
            problem(
                Some(i),
                "observe",
                "a step observes or generates, not both".into(),
            );
        }
        if let Some(o) = &step.observe {
            if !valid_name(&o.document) {
                problem(
                    Some(i),
                    "document",
                    format!("invalid document name {:?}", o.document),
                );
            }
            if o.rules.is_empty() {
                problem(
                    Some(i),
                    "rules",
                    "an observer needs at least one rule".into(),
                );
            }
            for (r, rule) in o.rules.iter().enumerate() {
                let n = r + 1;
                if let Err(e) = dispatch::check_xpath(&rule.xpath) {
                    problem(Some(i), "match", format!("rule {n}: {:?}: {e}", rule.xpath));
                }
                let Some(g) = generators.get(rule.generator.as_str()) else {
                    problem(
                        Some(i),
                        "generator",
                        format!(
                            "rule {n}: {:?} is not a generator step of {} (a step with generate:)",
                            rule.generator, template.name
                        ),
                    );
                    continue;
                };
                if rule.bricklets.is_empty() {
                    problem(Some(i), "bricklets", format!("rule {n}: names no bricklet"));
                }
                for b in &rule.bricklets {
                    if !g.refset.contains(b) {
                        problem(
                            Some(i),
                            "bricklets",
                            format!(
                                "rule {n}: bricklet {b:?} is not in the refset of {}",
                                rule.generator
                            ),
                        );
                    } else if rule.op == dispatch::Op::Undo
                        && let Some(inl) = inline.get(b.as_str())
                    {
                        match &inl.compensate {
                            None => problem(
                                Some(i),
                                "bricklets",
                                format!("rule {n}: undo of {b:?}, which names no compensate"),
                            ),
                            Some(c) if !g.refset.contains(c) => problem(
                                Some(i),
                                "bricklets",
                                format!(
                                    "rule {n}: {b:?} is compensated by {c:?}, which is not in the refset of {}",
                                    rule.generator
                                ),
                            ),
                            Some(_) => {}
                        }
                    }
                }
            }
        }
        if let Some(g) = &step.generate {
            if g.refset.is_empty() {
                problem(Some(i), "refset", "a generator needs a refset".into());
            }
            let mut seen = HashSet::new();
            for b in &g.refset {
                if !valid_name(b) {
                    problem(Some(i), "refset", format!("invalid bricklet name {b:?}"));
                } else if !seen.insert(b) {
                    problem(Some(i), "refset", format!("{b:?} listed twice"));
                }
            }
            let mut shaped: HashMap<&str, &str> = HashMap::new();
            for r in &g.rules {
                let (names, kind): (Vec<&String>, &str) = match r {
                    dispatch::Construction::Before([a, b]) => (vec![a, b], "before"),
                    dispatch::Construction::Sequence(a) => (vec![a], "sequence"),
                    dispatch::Construction::Parallel(a) => (vec![a], "parallel"),
                };
                for b in &names {
                    if !g.refset.contains(b) {
                        problem(
                            Some(i),
                            "rules",
                            format!("{kind}: {b:?} is not in the refset"),
                        );
                    }
                }
                if kind != "before"
                    && let Some(other) = shaped.insert(names[0].as_str(), kind)
                {
                    problem(
                        Some(i),
                        "rules",
                        format!(
                            "{:?} is expanded both by {other} and by {kind}: choose one",
                            names[0]
                        ),
                    );
                }
            }
            if let Some(cycle) = dispatch::before_cycle(&g.refset, &g.rules) {
                problem(
                    Some(i),
                    "rules",
                    format!("before rules form a cycle: {cycle}"),
                );
            }
        }
    }
    let mut names = HashSet::new();
    for b in &template.bricklets {
        if !valid_name(&b.name) {
            problem(
                None,
                "bricklets",
                format!("invalid bricklet name {:?}", b.name),
            );
        } else if !names.insert(b.name.as_str()) {
            problem(
                None,
                "bricklets",
                format!("bricklet {:?} defined twice", b.name),
            );
        }
        check_bricklet(origin, b, &mut |field, message| {
            problem(None, "bricklets", format!("{}: {field}: {message}", b.name))
        });
    }
}

/// A bricklet's steps are checked as a template's are (names, prerequisites, cycles,
/// functions); they neither observe nor generate.
pub(crate) fn check_bricklet(
    origin: &str,
    b: &dispatch::Bricklet,
    problem: &mut dyn FnMut(&str, String),
) {
    struct Nowhere;
    impl Locate for Nowhere {
        fn line(&self, _: Option<usize>, _: &str) -> Option<usize> {
            None
        }
    }
    if b.steps.is_empty() {
        problem("steps", "a bricklet has at least one step".into());
    }
    let pseudo = Template {
        name: b.name.clone(),
        description: None,
        steps: b.steps.clone(),
        alert_to: Vec::new(),
        schedules: Vec::new(),
        bricklets: Vec::new(),
        compensate: None,
        machine: None,
    };
    if let Err(e) = validate(origin, &pseudo, &Nowhere) {
        for p in e.problems {
            problem(&p.field, p.message);
        }
    }
    for s in &b.steps {
        if s.observe.is_some() || s.generate.is_some() {
            problem(
                "steps",
                format!(
                    "step {:?}: a bricklet's steps neither observe nor generate",
                    s.name
                ),
            );
        }
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
        Runner::Deployed { warm: Some(w), .. } if w.pool == 0 || w.pipeline == 0 => problem(
            if w.pool == 0 { "pool" } else { "pipeline" },
            "must be at least 1".into(),
        ),
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
