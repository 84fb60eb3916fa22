//! Workflows as described state machines (seed 002): pure data and pure functions, no I/O.
//!
//! A machine template (`kind: machine`) has states, transitions on named signals (per state, and
//! `global` ones accepted in every non-final state), actions run on entering a state or on a
//! transition, constants (`config`) and initial state variables (`variables`), functions its
//! `call` actions run as steps, and who may start it and send which signal (`access`). The store
//! runs transitions (`store/machine/`); this module parses, validates and plans them.

mod call_end;
pub mod expr;
pub mod plan;
mod validate;

pub use call_end::{MAX_SIGNAL_DATA_BYTES, call_end_data};
pub use validate::validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::FunctionSpec;

/// A validated machine description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, Value>,
    pub initial: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub global: BTreeMap<String, Transition>,
    pub states: BTreeMap<String, State>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub functions: BTreeMap<String, FunctionSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    /// A job that reaches a final state cancels its children still running, unless this is set.
    #[serde(
        default,
        rename = "keep-children",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub keep_children: bool,
}

/// One state: actions on entering it, its transitions, whether it ends the job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enter: Vec<Action>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub on: BTreeMap<String, Transition>,
    #[serde(default, rename = "final")]
    pub is_final: bool,
}

/// Where a signal leads, and the actions on the way: `Target` or `{to, actions, internal}`.
/// `internal: true` (a transition to the state it is in) runs its actions without leaving the
/// state: no exit (its alarms stay), no enter actions — SCXML's internal transition. Without it
/// a transition back to the same state leaves and re-enters it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Transition {
    To(String),
    With {
        to: String,
        #[serde(default)]
        actions: Vec<Action>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        internal: bool,
    },
}

/// A transition written as a map: only these keys (a typo such as `actoins` is refused, naming
/// the key, instead of its actions being dropped).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransitionBody {
    to: String,
    #[serde(default)]
    actions: Vec<Action>,
    #[serde(default)]
    internal: bool,
}

impl<'de> Deserialize<'de> for Transition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Shape;
        impl<'de> serde::de::Visitor<'de> for Shape {
            type Value = Transition;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a target state, or a map with `to`, `actions` and `internal`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Transition, E> {
                Ok(Transition::To(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Transition, A::Error> {
                let b =
                    TransitionBody::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Transition::With {
                    to: b.to,
                    actions: b.actions,
                    internal: b.internal,
                })
            }
        }
        d.deserialize_any(Shape)
    }
}

impl Transition {
    pub fn target(&self) -> &str {
        match self {
            Transition::To(t) | Transition::With { to: t, .. } => t,
        }
    }

    pub fn actions(&self) -> &[Action] {
        match self {
            Transition::To(_) => &[],
            Transition::With { actions, .. } => actions,
        }
    }

    /// An internal transition: its actions run without leaving the state.
    pub fn internal(&self) -> bool {
        matches!(self, Transition::With { internal: true, .. })
    }
}

/// Who may start the machine and send which signal, by token role (`admin` may always).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    #[serde(default)]
    pub start: Vec<String>,
    /// Per signal, or `"*"` for the others.
    #[serde(default)]
    pub signals: BTreeMap<String, Vec<String>>,
}

impl Access {
    /// Whether `role` may send `signal`: admins always; else the roles listed for the signal,
    /// or for `"*"`; a machine that lists nothing lets robots and admins signal.
    pub fn may_signal(&self, role: &str, signal: &str) -> bool {
        role == "admin"
            || self
                .signals
                .get(signal)
                .or_else(|| self.signals.get("*"))
                .map_or(role == "robot", |roles| roles.iter().any(|r| r == role))
    }

    /// Whether `role` may start the machine.
    pub fn may_start(&self, role: &str) -> bool {
        role == "admin"
            || if self.start.is_empty() {
                role == "robot"
            } else {
                self.start.iter().any(|r| r == role)
            }
    }
}

/// The actions (run in order; if one fails, the whole transition rolls back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ActionMap", into = "ActionMap")]
pub enum Action {
    /// State variables, each value a `${…}` expression or a literal.
    Set(BTreeMap<String, Value>),
    /// Signal this job itself, after the transition commits.
    Signal(String),
    /// A signal delivered later: `in` a duration or `at` a time; cancelled when the job leaves
    /// the state it was set in.
    Alarm(Alarm),
    /// Start a child workflow (a machine or a step template) on this or another object.
    Fork(Fork),
    /// Signal the job that forked this one.
    SignalParent(String),
    /// Mail through the alert outbox.
    Mail(Mail),
    /// Run one of the machine's functions as a step; its result comes back as a signal.
    Call(String),
    /// Fail the transition (when `when` is true, or always): nothing of it happens.
    Fail(Fail),
    /// Signal every child of this job still running.
    SignalChildren(String),
    /// Cancel every child of this job still running (and theirs).
    CancelChildren,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Alarm {
    pub signal: String,
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    pub template: String,
    /// Fork only when this expression is true (e.g. the article carries a tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Another object (an expression); this job's object by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, Value>,
    /// Replace a workflow of the template still running on the object (its steps start over).
    /// Without it such a fork is refused and its transition rolls back: a fork never silently
    /// replaces running work (a second child of a join, or a state entered again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mail {
    /// One address, or a list of them.
    #[serde(deserialize_with = "one_or_many")]
    pub to: Vec<String>,
    pub subject: String,
    #[serde(default)]
    pub body: String,
}

/// `to: ops@example.org` as well as `to: [a@x, b@y]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// `fail: MESSAGE`, or `fail: { when: EXPR, message: MESSAGE }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Fail {
    Always(String),
    When { when: String, message: String },
}

/// An action as written: exactly one key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ActionMap {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    set: Option<BTreeMap<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    alarm: Option<Alarm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fork: Option<Fork>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal_parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mail: Option<Mail>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    call: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fail: Option<Fail>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal_children: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cancel_children: Option<bool>,
}

impl TryFrom<ActionMap> for Action {
    type Error = String;
    fn try_from(m: ActionMap) -> Result<Self, String> {
        let mut found = Vec::new();
        if let Some(v) = m.set {
            found.push(Action::Set(v));
        }
        if let Some(v) = m.signal {
            found.push(Action::Signal(v));
        }
        if let Some(v) = m.alarm {
            found.push(Action::Alarm(v));
        }
        if let Some(v) = m.fork {
            found.push(Action::Fork(v));
        }
        if let Some(v) = m.signal_parent {
            found.push(Action::SignalParent(v));
        }
        if let Some(v) = m.mail {
            found.push(Action::Mail(v));
        }
        if let Some(v) = m.call {
            found.push(Action::Call(v));
        }
        if let Some(v) = m.fail {
            found.push(Action::Fail(v));
        }
        if let Some(v) = m.signal_children {
            found.push(Action::SignalChildren(v));
        }
        match m.cancel_children {
            Some(true) => found.push(Action::CancelChildren),
            Some(false) => return Err("cancel-children: write `cancel-children: true`".into()),
            None => {}
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            _ => Err("an action is exactly one of set, signal, alarm, fork, signal-parent, signal-children, cancel-children, mail, call, fail".into()),
        }
    }
}

impl From<Action> for ActionMap {
    fn from(a: Action) -> Self {
        let mut m = ActionMap::default();
        match a {
            Action::Set(v) => m.set = Some(v),
            Action::Signal(v) => m.signal = Some(v),
            Action::Alarm(v) => m.alarm = Some(v),
            Action::Fork(v) => m.fork = Some(v),
            Action::SignalParent(v) => m.signal_parent = Some(v),
            Action::Mail(v) => m.mail = Some(v),
            Action::Call(v) => m.call = Some(v),
            Action::Fail(v) => m.fail = Some(v),
            Action::SignalChildren(v) => m.signal_children = Some(v),
            Action::CancelChildren => m.cancel_children = Some(true),
        }
        m
    }
}

impl Action {
    /// The action's name in events.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Set(_) => "set",
            Action::Signal(_) => "signal",
            Action::Alarm(_) => "alarm",
            Action::Fork(_) => "fork",
            Action::SignalParent(_) => "signal-parent",
            Action::Mail(_) => "mail",
            Action::Call(_) => "call",
            Action::Fail(_) => "fail",
            Action::SignalChildren(_) => "signal-children",
            Action::CancelChildren => "cancel-children",
        }
    }
}

/// What a signal does in `state`: the transition it takes, and whether it is a global one.
pub fn transition<'m>(m: &'m Machine, state: &str, signal: &str) -> Option<&'m Transition> {
    let s = m.states.get(state)?;
    if s.is_final {
        return None;
    }
    s.on.get(signal).or_else(|| m.global.get(signal))
}

/// The signals `state` accepts, its own then the global ones.
pub fn accepted(m: &Machine, state: &str) -> Vec<String> {
    let Some(s) = m.states.get(state) else {
        return Vec::new();
    };
    if s.is_final {
        return Vec::new();
    }
    let mut out: Vec<String> = s.on.keys().cloned().collect();
    out.extend(m.global.keys().filter(|g| !s.on.contains_key(*g)).cloned());
    out
}

/// Parse a duration: `30s`, `5m`, `2h`, `7d`, or words (`7 days`, `90 minutes`, `1 week`).
pub fn duration_secs(text: &str) -> Option<f64> {
    let t = text.trim();
    if let Some(s) = super::spec::parse_duration_secs(t) {
        return Some(s);
    }
    let (num, unit) = t.split_once(char::is_whitespace)?;
    let n: f64 = num.trim().parse().ok()?;
    let unit = unit.trim().trim_end_matches('s');
    let secs = match unit {
        "second" | "sec" => 1.0,
        "minute" | "min" => 60.0,
        "hour" => 3600.0,
        "day" => 86_400.0,
        "week" => 604_800.0,
        _ => return None,
    };
    let v = n * secs;
    (v.is_finite() && v >= 0.0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_words() {
        assert_eq!(duration_secs("7 days"), Some(604_800.0));
        assert_eq!(duration_secs("90 minutes"), Some(5400.0));
        assert_eq!(duration_secs("30s"), Some(30.0));
        assert_eq!(duration_secs("1 fortnight"), None);
    }

    #[test]
    fn access_defaults_to_robots_and_admins() {
        let open = Access::default();
        assert!(open.may_signal("robot", "approve") && !open.may_signal("viewer", "approve"));
        let mut signals = BTreeMap::new();
        signals.insert("approve".to_string(), vec!["admin".to_string()]);
        signals.insert(
            "*".to_string(),
            vec!["robot".to_string(), "viewer".to_string()],
        );
        let a = Access {
            start: vec!["robot".into()],
            signals,
        };
        assert!(!a.may_signal("robot", "approve"));
        assert!(a.may_signal("viewer", "remind"));
        assert!(a.may_signal("admin", "approve"));
        assert!(a.may_start("robot") && !a.may_start("viewer"));
    }
}
