//! What the JSON routes answer, as types: the handlers return them and `/openapi.json` is
//! generated from them (with the store's rows they return as they are), so the document
//! describes what is sent.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::store::EventRow;

/// Every 4xx and 5xx answer: what was wrong (5xx say only "internal error"; the log has more).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// A template version loaded.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TemplateLoaded {
    pub id: i64,
    pub name: String,
    pub sha256: String,
    /// Whether this version was new.
    pub new: bool,
    /// `new`, `unchanged` or `made current`.
    pub saved: String,
    /// When a version already stored was first loaded (it is current again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_loaded_at: Option<DateTime<Utc>>,
}

/// An object registered, or merged into.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ObjectCreated {
    pub id: String,
    pub created: bool,
}

/// A batch of objects registered or merged into.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ObjectsBatched {
    /// How many were new.
    pub registered: usize,
    /// How many existed (properties merged, documents replaced).
    pub updated: usize,
    pub objects: Vec<ObjectCreated>,
}

/// A page of events; ask again with `after=next_after` for the next.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EventsPage {
    pub events: Vec<EventRow>,
    pub next_after: Option<i64>,
}

/// Steps given a priority.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Prioritized {
    pub steps: usize,
    pub priority: i32,
}

/// A queue paused or resumed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PauseChanged {
    /// Whether the queue is paused now.
    pub paused: bool,
    /// Whether this call changed it (false: it already was).
    pub changed: bool,
}

/// Steps put back in the queue.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Retried {
    pub steps: usize,
    /// Workflows' function pins moved to the current version (`current_functions`).
    pub pins_moved: u64,
}

/// The steps of the workflow that became ready.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NextSteps {
    pub next_steps: Vec<String>,
}

/// A template's processes, as the workflow service lists them.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Processes {
    pub processes: Vec<Process>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Process {
    pub name: String,
    /// The template's `<label>` of the step (`""` when it has none), as the service gives it.
    pub label: String,
}
