//! A machine description's problems, all at once, each with the line it is about.

use serde_json::Value;

use super::expr;
use super::{Action, Fail, Machine, duration_secs};
use crate::model::spec::{Problem, TemplateError, valid_name};

/// Every problem of a machine, all at once, with the line of the state or key it is about
/// (`line_of` finds it in the source).
pub fn validate(
    origin: &str,
    name: &str,
    m: &Machine,
    line_of: &dyn Fn(&str) -> Option<usize>,
) -> Result<(), TemplateError> {
    let mut problems = Vec::new();
    let mut problem = |key: &str, field: &str, message: String| {
        problems.push(Problem {
            file: origin.to_string(),
            line: line_of(key),
            field: field.to_string(),
            message,
        });
    };
    if !valid_name(name) {
        problem("name", "name", format!("invalid template name {name:?}"));
    }
    if !m.states.contains_key(&m.initial) {
        problem(
            "initial",
            "initial",
            format!("{:?} is not one of the states", m.initial),
        );
    }
    for k in m.config.keys().chain(m.variables.keys()) {
        if !valid_name(k) {
            problem(k, "variables", format!("invalid variable name {k:?}"));
        }
    }
    let check_actions = |at: &str,
                         field: &str,
                         actions: &[Action],
                         problem: &mut dyn FnMut(&str, &str, String)| {
        for a in actions {
            let exprs: Vec<String> = match a {
                Action::Set(vars) => {
                    for k in vars.keys() {
                        if !valid_name(k) {
                            problem(at, field, format!("set: invalid variable name {k:?}"));
                        }
                    }
                    // Every string inside a value, nested objects and arrays included.
                    fn strings(v: &Value, out: &mut Vec<String>) {
                        match v {
                            Value::String(s) => out.push(s.clone()),
                            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
                            Value::Object(o) => o.values().for_each(|x| strings(x, out)),
                            _ => {}
                        }
                    }
                    let mut found = Vec::new();
                    vars.values().for_each(|v| strings(v, &mut found));
                    found
                }
                Action::Signal(s) | Action::SignalParent(s) | Action::SignalChildren(s) => {
                    vec![s.clone()]
                }
                Action::CancelChildren => Vec::new(),
                Action::Alarm(al) => {
                    if !al.signal.contains("${") && !valid_name(&al.signal) {
                        problem(
                            at,
                            field,
                            format!("alarm: invalid signal name {:?}", al.signal),
                        );
                    }
                    if let Some(t) = &al.at
                        && !t.contains("${")
                        && chrono::DateTime::parse_from_rfc3339(t.trim()).is_err()
                    {
                        problem(
                            at,
                            field,
                            format!(
                                "alarm {:?}: at: {t:?} is not an RFC 3339 time such as 2027-01-01T00:00:00Z",
                                al.signal
                            ),
                        );
                    }
                    if al.after.is_some() == al.at.is_some() {
                        problem(
                            at,
                            field,
                            format!("alarm {:?}: give exactly one of in: or at:", al.signal),
                        );
                    }
                    if let Some(d) = &al.after
                        && !d.contains("${")
                        && duration_secs(d).is_none()
                    {
                        problem(
                            at,
                            field,
                            format!(
                                "alarm {:?}: {d:?} is not a duration such as 30s or 7 days",
                                al.signal
                            ),
                        );
                    }
                    al.after.iter().chain(al.at.iter()).cloned().collect()
                }
                Action::Fork(f) => {
                    if f.template.is_empty() {
                        problem(at, field, "fork: names no template".into());
                    }
                    f.object
                        .iter()
                        .cloned()
                        .chain(f.when.iter().map(|w| format!("${{{w}}}")))
                        .collect()
                }
                Action::Mail(mail) => {
                    if mail.to.is_empty() {
                        problem(at, field, "mail: names no recipient".into());
                    }
                    for to in mail.to.iter().filter(|t| !t.contains("${")) {
                        if let Err(e) = to.trim().parse::<lettre::message::Mailbox>() {
                            problem(
                                at,
                                field,
                                format!("mail: to: {to:?} is not an address ({e})"),
                            );
                        }
                    }
                    vec![mail.subject.clone(), mail.body.clone()]
                }
                Action::Call(f) => {
                    if !m.functions.contains_key(f) {
                        problem(
                            at,
                            field,
                            format!("call: {f:?} is not one of the functions"),
                        );
                    }
                    Vec::new()
                }
                Action::Fail(Fail::Always(msg)) => vec![msg.clone()],
                Action::Fail(Fail::When { when, message }) => {
                    vec![format!("${{{when}}}"), message.clone()]
                }
            };
            for e in exprs {
                if let Err(err) = expr::check(&e) {
                    problem(at, field, format!("{}: {err}", a.name()));
                }
            }
        }
    };
    for (sname, state) in &m.states {
        if !valid_name(sname) {
            problem(sname, "states", format!("invalid state name {sname:?}"));
        }
        if state.is_final && !state.on.is_empty() {
            problem(
                sname,
                "on",
                format!("final state {sname} cannot take signals"),
            );
        }
        check_actions(sname, "enter", &state.enter, &mut problem);
        for (signal, t) in &state.on {
            if !valid_name(signal) {
                problem(sname, "on", format!("invalid signal name {signal:?}"));
            }
            if !m.states.contains_key(t.target()) {
                problem(
                    sname,
                    "on",
                    format!("{sname} --{signal}--> {:?}: no such state", t.target()),
                );
            }
            if t.internal() && t.target() != sname {
                problem(
                    sname,
                    "on",
                    format!(
                        "{sname} --{signal}--> {}: internal: true is for a transition to the state it is in",
                        t.target()
                    ),
                );
            }
            check_actions(sname, "on", t.actions(), &mut problem);
        }
    }
    for (signal, t) in &m.global {
        if t.internal() {
            problem(
                "global",
                "global",
                format!("global {signal}: internal: true belongs on a state's own transition"),
            );
        }
        if !m.states.contains_key(t.target()) {
            problem(
                "global",
                "global",
                format!("global {signal} --> {:?}: no such state", t.target()),
            );
        }
        check_actions("global", "global", t.actions(), &mut problem);
    }
    if let Some(access) = &m.access {
        for r in access.start.iter().chain(access.signals.values().flatten()) {
            if !matches!(r.as_str(), "admin" | "robot" | "viewer") {
                problem(
                    "access",
                    "access",
                    format!("{r:?} is not a role (admin, robot, viewer)"),
                );
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(TemplateError { problems })
    }
}
