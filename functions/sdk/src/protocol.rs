//! The function protocol, `workdo/1`: one JSON event in, one JSON result out.
//!
//! These types are the protocol's definition; the runtime uses them too, so the two can't drift.
//! Times are RFC 3339 strings so any language can read and write them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const PROTOCOL: &str = "workdo/1";

/// What the runtime sends a function: one step of one object's workflow to perform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Always `workdo/1`.
    pub protocol: String,
    pub step_id: i64,
    pub workflow_id: i64,
    /// The object worked on, e.g. `druid:bb123cd4567`.
    pub object: String,
    pub template: String,
    pub step: String,
    /// Object version the workflow belongs to.
    pub version: i32,
    pub lane: String,
    /// This attempt's number, from 1.
    pub attempt: i32,
    pub max_attempts: i32,
    /// The object's properties.
    #[serde(default)]
    pub properties: Map<String, Value>,
    /// The object documents the step asked for (`documents:` in the template).
    #[serde(default)]
    pub documents: BTreeMap<String, String>,
    /// The workflow's context (state variables).
    #[serde(default)]
    pub context: Map<String, Value>,
    /// W3C trace context of the step's span, to continue the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// When the runtime stops waiting (RFC 3339).
    pub deadline: String,
    /// Warm functions: this call's id, unique among the calls a pool makes. The answer must carry
    /// it back in its own `call` field; answers are matched to calls by it, never by position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// A generated step's matched node (dynamic dispatch's `pfrag`): the element (as XML) or
    /// the attribute or text value its bricklet instance was made for. Absent for other steps,
    /// and for instances of a rule that matched a boolean or a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragment: Option<String>,
}

/// What a function answers. `status` is one of `completed`, `skipped`, `error`, `defer`, or an
/// intermediate status the template declares for the step; the other fields apply as noted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: String,
    /// Warm functions: the `call` of the event this answers (copied from the event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// Short note shown with the step (any status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `completed`: record this lifecycle milestone (besides the one the template declares).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<String>,
    /// `completed`: changes to the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectUpdate>,
    /// `completed`: keys merged into the workflow context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    /// `completed`: workflows to start on this object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub start: Vec<StartWorkflow>,
    /// `completed`, for a state machine's `call` action: the signal sent back to the job
    /// (default `done`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// `error`: short message for reports and mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `error`: long text, e.g. a stack trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `error`: whether a retry may help (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// `defer`: not before this time (RFC 3339)…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// …or this many seconds from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Seconds the work took, if the function measured it better than the runtime can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed: Option<f64>,
    /// The function's own trace spans; the runtime records them as children of the call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<FunctionSpan>,
}

/// A span a function reports: what it did and when (Unix nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionSpan {
    pub name: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// Changes to the object a function worked on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObjectUpdate {
    /// Merged into the object's properties (a `null` value removes the key).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
    /// Named documents replaced.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub documents: BTreeMap<String, String>,
}

/// A workflow a function starts on its object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StartWorkflow {
    pub template: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
    /// RFC 3339; future-dates the new workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
}

impl Outcome {
    pub fn with_status(status: impl Into<String>) -> Self {
        Outcome {
            status: status.into(),
            ..Default::default()
        }
    }

    pub fn completed() -> Self {
        Self::with_status("completed")
    }

    pub fn skipped() -> Self {
        Self::with_status("skipped")
    }

    pub fn error(message: impl Into<String>) -> Self {
        Outcome {
            message: Some(message.into()),
            ..Self::with_status("error")
        }
    }

    /// Not ready yet: try again in `seconds`. Does not use up an attempt.
    pub fn defer(seconds: f64) -> Self {
        Outcome {
            seconds: Some(seconds),
            ..Self::with_status("defer")
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    pub fn lifecycle(mut self, milestone: impl Into<String>) -> Self {
        self.lifecycle = Some(milestone.into());
        self
    }

    pub fn property(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.object
            .get_or_insert_with(Default::default)
            .properties
            .insert(key.into(), value.into());
        self
    }

    pub fn document(mut self, name: impl Into<String>, content: impl Into<String>) -> Self {
        self.object
            .get_or_insert_with(Default::default)
            .documents
            .insert(name.into(), content.into());
        self
    }

    pub fn context(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.context
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn start(mut self, template: impl Into<String>) -> Self {
        self.start.push(StartWorkflow {
            template: template.into(),
            ..Default::default()
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip_as_documented() {
        let o = Outcome::completed()
            .note("ok")
            .property("pages", 12)
            .document("descMetadata", "<mods/>")
            .start("accessionWF");
        let json = serde_json::to_value(&o).expect("encode");
        assert_eq!(
            json,
            serde_json::json!({
                "status": "completed", "note": "ok",
                "object": {"properties": {"pages": 12}, "documents": {"descMetadata": "<mods/>"}},
                "start": [{"template": "accessionWF"}]
            })
        );
        let custom: Outcome =
            serde_json::from_str(r#"{"status":"IN PROCESS","note":"cataloguing"}"#)
                .expect("decode");
        assert_eq!(custom.status, "IN PROCESS");
        assert_eq!(
            serde_json::to_value(Outcome::defer(30.0)).expect("encode"),
            serde_json::json!({"status": "defer", "seconds": 30.0})
        );
    }
}
