//! A transition as a plan: pure code decides everything a signal does to a job — the state it
//! leads to, the variables after every `set`, the alarms, signals, children, mails and calls,
//! the events in order — or refuses it, or rolls it back with the reason. The store applies a
//! plan in one transaction (`store/machine`), as it applies a step's [`Decision`] from
//! `model/retry.rs` and a generator's composition from `model/dispatch`.
//!
//! [`Decision`]: crate::model::retry::Decision

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::expr::{self, Scope};
use super::{Action, Fail, Machine, accepted, duration_secs, transition as find};

/// The job a plan is for, as it is before the signal.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    pub id: i64,
    pub object: &'a str,
    pub template: &'a str,
    pub parent: Option<i64>,
    pub context: &'a Value,
    pub state: &'a str,
    pub variables: Map<String, Value>,
    /// The job already reached a final state.
    pub finished: bool,
    /// Its children still running (`${children.running}`).
    pub children_running: i64,
}

/// The signal being taken.
#[derive(Debug, Clone, Copy)]
pub struct Signal<'a> {
    pub name: &'a str,
    pub actor: &'a str,
    pub data: &'a Value,
}

/// Where an action's `action_fired` event says it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    pub state: String,
    /// `transition` or `enter`.
    pub association: &'static str,
}

/// One thing a plan does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// An event of the job.
    Event {
        kind: &'static str,
        actor: String,
        status: Option<&'static str>,
        detail: Value,
    },
    /// A signal into an inbox: this job's own (`to: None`), or another job's (its parent).
    Signal {
        to: Option<i64>,
        signal: String,
        data: Value,
        actor: String,
    },
    /// An alarm, belonging to `state` (cancelled when the job leaves it).
    Alarm {
        signal: String,
        due_at: DateTime<Utc>,
        state: String,
    },
    /// Leaving `state`: its alarms are cancelled.
    CancelAlarms { state: String },
    /// A child to start (the store checks the fork limits and records `child_started`, then
    /// the action's `action_fired` with the children's ids).
    Fork {
        template: String,
        object: String,
        context: Value,
        /// Replace a workflow of the template running on the object (else the fork is refused).
        replace: bool,
        fired: Fired,
    },
    /// A mail through the alert outbox.
    Mail {
        to: Vec<String>,
        subject: String,
        body: String,
        state: String,
    },
    /// One of the machine's functions to run as a step (the store names the step and records
    /// the action's `action_fired`).
    Call { function: String, fired: Fired },
    /// A signal to every child of this job still running.
    SignalChildren { signal: String },
    /// Cancel every child still running, and theirs: their pending steps skipped, machines
    /// ended (`job_cancelled`).
    CancelChildren,
}

/// What a signal does to a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub from: String,
    pub to: String,
    pub variables: Map<String, Value>,
    /// The job reaches a final state: its pending steps are skipped, its alarms cancelled,
    /// its workflow completed.
    pub finished: bool,
    pub effects: Vec<Effect>,
}

/// Why there is no plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The signal is not accepted here: nothing was attempted.
    NotAccepted(String),
    /// An action failed: nothing of the transition happens.
    Rollback(String),
}

/// Plan what `signal` does to `job` at `now`.
///
/// # Errors
/// [`Refusal::NotAccepted`] when the job is finished or its state takes no such signal;
/// [`Refusal::Rollback`] when an action fails (`fail`, an expression, a bad alarm time, a
/// `signal-parent` with no parent, a fork of the job's own template on its own object).
pub fn transition(
    m: &Machine,
    job: &Job<'_>,
    signal: Signal<'_>,
    now: DateTime<Utc>,
) -> Result<Plan, Refusal> {
    if job.finished {
        return Err(Refusal::NotAccepted(format!(
            "the job is finished (in {})",
            job.state
        )));
    }
    let Some(t) = find(m, job.state, signal.name) else {
        return Err(Refusal::NotAccepted(format!(
            "{:?} is not accepted in {}; it accepts {}",
            signal.name,
            job.state,
            accepted(m, job.state).join(", ")
        )));
    };
    let mut run = Run::new(m, job, signal, now);
    run.event(
        "signal_received",
        signal.actor,
        json!({"state": job.state, "signal": signal.name, "data": signal.data,
               "variables": run.vars}),
    );
    let target = t.target().to_string();
    if t.internal() {
        // No exit and no entry: the state's alarms stay, its enter actions do not run again.
        run.actions(job.state, &target, t.actions(), "transition")?;
        return Ok(run.finish(job.state, job.state, false));
    }
    // Leaving the state cancels its alarms first, so that an alarm the transition's actions
    // set for the target stands even when the target is the state being left.
    run.effects.push(Effect::CancelAlarms {
        state: job.state.to_string(),
    });
    run.actions(job.state, &target, t.actions(), "transition")?;
    run.event(
        "state_entered",
        signal.actor,
        json!({"state": target, "from": job.state, "signal": signal.name}),
    );
    let enter = m
        .states
        .get(&target)
        .map(|s| s.enter.clone())
        .unwrap_or_default();
    run.actions(&target, &target, &enter, "enter")?;
    let finished = m.states.get(&target).is_some_and(|s| s.is_final);
    if finished {
        // A job that ends takes its children with it, unless its template keeps them.
        if !m.keep_children && job.children_running > 0 {
            run.effects.push(Effect::CancelChildren);
        }
        run.effects.push(Effect::Event {
            kind: "workflow_completed",
            actor: signal.actor.to_string(),
            status: Some("completed"),
            detail: json!({"state": target}),
        });
    }
    Ok(run.finish(job.state, &target, finished))
}

/// Plan a job's start: its initial state entered with the machine's variables, that state's
/// enter actions run.
///
/// # Errors
/// [`Refusal::Rollback`] when an enter action fails: the start fails.
pub fn start(m: &Machine, job: &Job<'_>, now: DateTime<Utc>) -> Result<Plan, Refusal> {
    let data = json!({});
    let signal = Signal {
        name: "start",
        actor: "machine",
        data: &data,
    };
    let mut run = Run::new(m, job, signal, now);
    run.event(
        "job_started",
        "machine",
        json!({"state": m.initial, "variables": run.vars}),
    );
    let enter = m
        .states
        .get(&m.initial)
        .map(|s| s.enter.clone())
        .unwrap_or_default();
    run.actions(&m.initial, &m.initial, &enter, "enter")?;
    let finished = m.states.get(&m.initial).is_some_and(|s| s.is_final);
    Ok(run.finish(&m.initial, &m.initial, finished))
}

/// A plan being made: the variables as the actions change them, the effects so far.
struct Run<'a> {
    m: &'a Machine,
    job: &'a Job<'a>,
    signal: Value,
    now: DateTime<Utc>,
    vars: Map<String, Value>,
    effects: Vec<Effect>,
}

impl<'a> Run<'a> {
    fn new(m: &'a Machine, job: &'a Job<'a>, signal: Signal<'_>, now: DateTime<Utc>) -> Self {
        Run {
            m,
            job,
            signal: json!({"name": signal.name, "actor": signal.actor, "data": signal.data}),
            now,
            vars: job.variables.clone(),
            effects: Vec::new(),
        }
    }

    fn event(&mut self, kind: &'static str, actor: &str, detail: Value) {
        self.effects.push(Effect::Event {
            kind,
            actor: actor.to_string(),
            status: None,
            detail,
        });
    }

    fn finish(self, from: &str, to: &str, finished: bool) -> Plan {
        Plan {
            from: from.to_string(),
            to: to.to_string(),
            variables: self.vars,
            finished,
            effects: self.effects,
        }
    }

    /// Run `actions` of `state` (`association`: `transition` or `enter`); alarms belong to
    /// `owner`, the state the job is in once the transition is done.
    fn actions(
        &mut self,
        state: &str,
        owner: &str,
        actions: &[Action],
        association: &'static str,
    ) -> Result<(), Refusal> {
        for a in actions {
            let fired = Fired {
                state: state.to_string(),
                association,
            };
            if let Some(params) = self.action(a, state, owner, &fired)? {
                self.event(
                    "action_fired",
                    "machine",
                    json!({"state": state, "association": association,
                           "action": a.name(), "parameters": params}),
                );
            }
        }
        Ok(())
    }

    /// One action's effects; its `action_fired` parameters, or `None` when the store records
    /// the event itself (a fork that starts children, a call).
    fn action(
        &mut self,
        a: &Action,
        state: &str,
        owner: &str,
        fired: &Fired,
    ) -> Result<Option<Value>, Refusal> {
        let ctx = Ctx {
            vars: &self.vars,
            context: self.job.context,
            config: &self.m.config,
            state,
            signal: &self.signal,
            now: self.now.to_rfc3339(),
            children: self.job.children_running,
        };
        let bad = |e: String| Refusal::Rollback(format!("{}: {e}", a.name()));
        let text = |e: &str| {
            expr::eval_text(e, &ctx)
                .map(|v| expr::text_of(&v))
                .map_err(bad)
        };
        Ok(Some(match a {
            Action::Set(assign) => {
                let mut out = Map::new();
                for (k, v) in assign {
                    out.insert(k.clone(), expr::eval_value(v, &ctx).map_err(bad)?);
                }
                self.vars.extend(out.clone());
                Value::Object(out)
            }
            Action::Signal(s) => {
                let name = text(s)?;
                self.effects.push(Effect::Signal {
                    to: None,
                    signal: name.clone(),
                    data: json!({}),
                    actor: "self".into(),
                });
                json!({"signal": name})
            }
            Action::SignalParent(s) => {
                let name = text(s)?;
                let Some(parent) = self.job.parent else {
                    return Err(Refusal::Rollback(
                        "signal-parent: this job has no parent".into(),
                    ));
                };
                self.effects.push(Effect::Signal {
                    to: Some(parent),
                    signal: name.clone(),
                    data: json!({"child": self.job.id, "object": self.job.object,
                                 "template": self.job.template}),
                    actor: format!("child:{}", self.job.id),
                });
                json!({"signal": name, "parent": parent})
            }
            Action::Alarm(al) => {
                let due = due_of(al, &ctx, self.now).map_err(bad)?;
                let params = json!({"signal": al.signal, "due_at": due, "state": owner});
                self.effects.push(Effect::Alarm {
                    signal: al.signal.clone(),
                    due_at: due,
                    state: owner.to_string(),
                });
                self.event("alarm_set", "machine", params.clone());
                params
            }
            Action::Fork(f) => {
                if let Some(when) = &f.when
                    && !expr::truthy(&expr::eval(when, &ctx).map_err(bad)?)
                {
                    return Ok(Some(
                        json!({"template": f.template, "when": when, "forked": false}),
                    ));
                }
                let object = match &f.object {
                    Some(o) => text(o)?,
                    None => self.job.object.to_string(),
                };
                // Starting the same template on the same object replaces its workflow: here,
                // the very job that forks.
                if f.template == self.job.template && object == self.job.object {
                    return Err(Refusal::Rollback(format!(
                        "fork {}: a job cannot fork its own template on its own object (that \
                         would replace the job itself); name another object",
                        f.template
                    )));
                }
                let context = expr::eval_value(&json!(f.context), &ctx).map_err(bad)?;
                self.effects.push(Effect::Fork {
                    template: f.template.clone(),
                    object,
                    context,
                    replace: f.replace,
                    fired: fired.clone(),
                });
                return Ok(None);
            }
            Action::Mail(mail) => {
                let subject = text(&mail.subject)?;
                let body = text(&mail.body)?;
                let params = json!({"to": mail.to, "subject": subject});
                self.effects.push(Effect::Mail {
                    to: mail.to.clone(),
                    subject,
                    body,
                    state: state.to_string(),
                });
                params
            }
            Action::Call(f) => {
                self.effects.push(Effect::Call {
                    function: f.clone(),
                    fired: fired.clone(),
                });
                return Ok(None);
            }
            Action::SignalChildren(s) => {
                let name = text(s)?;
                self.effects.push(Effect::SignalChildren {
                    signal: name.clone(),
                });
                json!({"signal": name})
            }
            Action::CancelChildren => {
                self.effects.push(Effect::CancelChildren);
                json!({})
            }
            Action::Fail(Fail::Always(msg)) => return Err(Refusal::Rollback(text(msg)?)),
            Action::Fail(Fail::When { when, message }) => {
                if expr::truthy(&expr::eval(when, &ctx).map_err(bad)?) {
                    return Err(Refusal::Rollback(text(message)?));
                }
                json!({"when": when, "held": false})
            }
        }))
    }
}

/// Names while a transition runs: state variables, then the job's context, then config; `now`,
/// `state`, `signal.name`, `signal.actor`, `signal.data…`, `children.running`.
struct Ctx<'c> {
    vars: &'c Map<String, Value>,
    context: &'c Value,
    config: &'c BTreeMap<String, Value>,
    state: &'c str,
    signal: &'c Value,
    now: String,
    children: i64,
}

impl Scope for Ctx<'_> {
    fn lookup(&self, path: &str) -> Option<Value> {
        let (head, rest) = match path.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        let base = match head {
            "now" => Value::String(self.now.clone()),
            "state" => Value::String(self.state.to_string()),
            "signal" => self.signal.clone(),
            "children" => json!({"running": self.children}),
            _ => self
                .vars
                .get(head)
                .or_else(|| self.context.get(head))
                .or_else(|| self.config.get(head))
                .cloned()?,
        };
        match rest {
            None => Some(base),
            Some(r) => base.pointer(&format!("/{}", r.replace('.', "/"))).cloned(),
        }
    }
}

/// When an alarm is due: `in` a duration from now, or `at` a time.
fn due_of(al: &super::Alarm, ctx: &Ctx<'_>, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Some(d) = &al.after {
        let text = expr::text_of(&expr::eval_text(d, ctx)?);
        let secs = duration_secs(&text)
            .ok_or_else(|| format!("alarm {}: {text:?} is not a duration", al.signal))?;
        let span = chrono::Duration::try_milliseconds((secs * 1000.0) as i64)
            .filter(|_| secs < 315_576_000.0)
            .ok_or_else(|| format!("alarm {}: {text:?} is too far away", al.signal))?;
        return Ok(now + span);
    }
    let text = al
        .at
        .as_ref()
        .map(|a| expr::eval_text(a, ctx).map(|v| expr::text_of(&v)))
        .transpose()?
        .unwrap_or_default();
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("alarm {}: {text:?} is not an RFC 3339 time: {e}", al.signal))
}

#[cfg(test)]
mod tests;
