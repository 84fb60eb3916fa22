//! The model: what workdo's words mean, as pure data and pure functions (no I/O, no SQL).
//!
//! - [`status`]: a step's statuses and the state machine between them.
//! - [`template`]: templates (YAML and WorkDo XML), their parsers and validation.
//! - [`schedule`]: cron schedule specs and their next fire times.
//! - [`outcome`]: what a function call produced (the protocol's types).
//! - [`retry`]: back-off, and the decision a function's outcome leads to.
//! - [`alert`]: alert mail as text.
//! - [`object_id`]: the one rule for object ids.
//! - [`numbers`]: JSON numbers kept exactly as written, or refused.
//!
//! - [`dispatch`]: dynamic dispatch: bricklets, observers' matching rules, generators'
//!   construction rules and the composition of subnets.
//!
//! - [`machine`]: state machines: states, transitions, actions, the expression language.
//!
//! - [`spec`]: the types those three share (a step, its function, a bricklet, rules, a
//!   problem with a source), a leaf: `template`, `dispatch` and `machine` import it and not
//!   each other's types, so the modules form no cycle.

pub mod alert;
pub mod dispatch;
pub mod handoff;
pub mod machine;
pub mod numbers;
pub mod object_id;
pub mod outcome;
pub mod retry;
pub mod schedule;
pub mod spec;
pub mod status;
pub mod template;

use serde_json::Value;

/// Where in a JSON value a NUL character (U+0000) is, as a path like `properties.a` or
/// `objects[2]`: Postgres stores none in text or jsonb, so every input is checked with this.
pub fn nul_at(value: &Value) -> Option<String> {
    fn walk(v: &Value, at: &str) -> Option<String> {
        match v {
            Value::String(s) if s.contains('\0') => Some(at.to_string()),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, x)| walk(x, &format!("{at}[{i}]"))),
            Value::Object(map) => map.iter().find_map(|(k, x)| {
                let here = if at.is_empty() {
                    k.replace('\0', "\\0")
                } else {
                    format!("{at}.{}", k.replace('\0', "\\0"))
                };
                if k.contains('\0') {
                    Some(here)
                } else {
                    walk(x, &here)
                }
            }),
            _ => None,
        }
    }
    walk(value, "")
}
