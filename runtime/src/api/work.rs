//! The JSON API under `/api`: workflows, steps, queues, facets, priority and retry.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::bodies::{EventsPage, PauseChanged, Prioritized, Retried};
use super::json::{oid, page};
use super::{
    ApiError, ApiResult, AppState, Caller, ErrorBody, json_body, param, query_pairs, split_step,
};
use crate::store::{
    Facet, Paused, QueueEntry, Role, SetOutcome, SetRequest, StartRequest, Started, StepFilter,
    StepRow, WorkflowView,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workflows", post(workflows_start))
        .route(
            "/api/workflows/{id}",
            get(workflow_show).delete(workflow_delete),
        )
        .route("/api/workflows/{id}/events", get(workflow_events))
        .route("/api/steps/{object}/{template}/{step}", put(step_update))
        .route("/api/queues/{template}/{step}", get(queue))
        .route("/api/queues/{template}/{step}/errors", get(queue_errors))
        .route("/api/queues/{template}/{step}/pause", post(queue_pause))
        .route("/api/queues/{template}/{step}/resume", post(queue_resume))
        .route("/api/paused", get(paused))
        .route("/api/queues/{name}", get(named_queue))
        .route("/api/facets", get(facets))
        .route("/api/priority", post(priority))
        .route("/api/retry", post(retry))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StartBody {
    template: String,
    objects: Vec<String>,
    #[serde(default)]
    version: Option<i32>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    lane: Option<String>,
    #[serde(default)]
    start_at: Option<DateTime<Utc>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    context: Option<Value>,
}

/// Start a template on objects (one workflow each; registered on the fly when new).
#[utoipa::path(post, path = "/api/workflows", tag = "workflows", request_body = StartBody, responses((status = 201, description = "The workflows started, one per object", body = Vec<Started>)))]
pub(super) async fn workflows_start(
    State(s): State<AppState>,
    c: Caller,
    body: Bytes,
) -> ApiResult<Response> {
    // Who may start anything at all, before the body is read; then the template's own rule.
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let b: StartBody = json_body(&body)?;
    if b.objects.is_empty() {
        return Err(ApiError::bad_request("`objects` is empty"));
    }
    super::access::decide(
        &s,
        &c,
        super::access::Act::Start {
            template: &b.template,
        },
    )
    .await?;
    let req = StartRequest {
        template: b.template,
        objects: b.objects,
        version: b.version,
        priority: b.priority,
        lane: b.lane.unwrap_or_else(|| "default".into()),
        start_at: b.start_at,
        context: b.context.unwrap_or_else(|| json!({})),
        actor: format!("api:{}", c.0.as_str()),
        parent: None,
    };
    let started = s.store.workflow_start(&req).await?;
    Ok((StatusCode::CREATED, Json(started)).into_response())
}

fn workflow_id(text: &str) -> ApiResult<i64> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("workflow id {text:?} is not a number")))
}

/// A workflow and its steps.
#[utoipa::path(get, path = "/api/workflows/{id}", tag = "workflows", params(("id" = i64, Path)), responses((status = 200, description = "The workflow and its steps", body = WorkflowView)))]
pub(super) async fn workflow_show(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<WorkflowView>> {
    let id = workflow_id(&id)?;
    let view = s
        .store
        .workflow_view(id)
        .await
        .map_err(|_| ApiError::not_found(format!("no workflow {id}")))?;
    Ok(Json(view))
}

/// Delete a workflow with its steps (its history stays).
#[utoipa::path(delete, path = "/api/workflows/{id}", tag = "workflows", params(("id" = i64, Path)), responses((status = 204, description = "Deleted with its steps")))]
pub(super) async fn workflow_delete(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Admin)).await?;
    let id = workflow_id(&id)?;
    let view = s
        .store
        .workflow_view(id)
        .await
        .map_err(|_| ApiError::not_found(format!("no workflow {id}")))?;
    let object = view
        .steps
        .first()
        .map(|st| st.object_id.clone())
        .unwrap_or_default();
    s.store
        .workflow_delete(
            &object,
            Some(&view.workflow.template),
            Some(view.workflow.version),
            "api",
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A workflow's history, a page at a time.
#[utoipa::path(get, path = "/api/workflows/{id}/events", tag = "workflows", params(("id" = i64, Path), ("after" = Option<i64>, Query, description = "event id to continue after"), ("limit" = Option<i64>, Query, description = "at most 1000"), ("kind" = Option<Vec<String>>, Query, description = "only events of these kinds (repeatable, or comma-separated)")), responses((status = 200, description = "The workflow's events, oldest first", body = EventsPage)))]
pub(super) async fn workflow_events(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<EventsPage>> {
    let id = workflow_id(&id)?;
    let pairs = query_pairs(q.as_deref())?;
    let (after, limit) = page(&pairs)?;
    let events = s
        .store
        .events(
            None,
            Some(id),
            after,
            limit,
            &super::json::kinds_param(&pairs),
        )
        .await?;
    let next_after = events.last().map(|e| e.id);
    Ok(Json(EventsPage { events, next_after }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StepBody {
    status: String,
    #[serde(default)]
    note: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    lifecycle: Option<String>,
    #[serde(default)]
    elapsed: Option<f64>,
    #[serde(default)]
    current_status: Option<String>,
    #[serde(default)]
    version: Option<i32>,
}

/// Set a step's status (completed, error, skipped, waiting…), as a robot reports its work.
#[utoipa::path(put, path = "/api/steps/{object}/{template}/{step}", tag = "steps", params(("object" = String, Path), ("template" = String, Path), ("step" = String, Path)), request_body = StepBody, responses((status = 200, description = "The step, and next_steps: those that became ready", body = SetOutcome), (status = 409, description = "current_status did not match, or the change is not allowed; nothing changed", body = ErrorBody)))]
pub(super) async fn step_update(
    State(s): State<AppState>,
    c: Caller,
    Path((object, template, step)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Json<SetOutcome>> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let b: StepBody = json_body(&body)?;
    let req = SetRequest {
        object: oid(&object)?,
        template,
        step,
        status: b.status,
        note: b.note,
        error_message: b.message,
        error_text: b.text,
        lifecycle: b.lifecycle,
        elapsed: b.elapsed,
        current_status: b.current_status,
        service_words: None,
        version: b.version,
        actor: format!("api:{}", c.0.as_str()),
    };
    Ok(Json(s.store.step_set(&req).await?))
}

/// The objects waiting at a step whose prerequisites are done: the step's queue.
#[utoipa::path(get, path = "/api/queues/{template}/{step}", tag = "steps", params(("template" = String, Path), ("step" = String, Path), ("completed" = Option<Vec<String>>, Query, description = "TEMPLATE:STEP that must be completed, repeatable"), ("lane" = Option<String>, Query, description = "one lane"), ("limit" = Option<i64>, Query, description = "default 100")), responses((status = 200, description = "Objects waiting at the step whose `completed` steps are done", body = Vec<QueueEntry>)))]
pub(super) async fn queue(
    State(s): State<AppState>,
    _c: Caller,
    Path((template, step)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<QueueEntry>>> {
    let pairs = query_pairs(q.as_deref())?;
    s.store.step_known(&template, &step).await?;
    let completed = pairs
        .iter()
        .filter(|(k, _)| k == "completed")
        .map(|(_, v)| split_step(v))
        .collect::<ApiResult<Vec<_>>>()?;
    for (ct, cs) in &completed {
        s.store.step_known(ct, cs).await?;
    }
    let limit = super::limit_param(&pairs, 100)?;
    let properties = property_params(&pairs)?;
    let rows = s
        .store
        .queue_waiting_with(
            &template,
            &step,
            &completed,
            param(&pairs, "lane"),
            &properties,
            limit,
        )
        .await?;
    Ok(Json(rows))
}

/// `property=KEY=VALUE` (repeatable): the properties a queue's objects must hold, as strings.
pub(super) fn property_params(pairs: &[(String, String)]) -> ApiResult<Value> {
    let mut out = serde_json::Map::new();
    for (_, kv) in pairs.iter().filter(|(k, _)| k == "property") {
        let Some((k, v)) = kv.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(super::ApiError::bad_request(format!(
                "property={kv:?}: give property=KEY=VALUE"
            )));
        };
        out.insert(k.to_string(), Value::String(v.to_string()));
    }
    Ok(Value::Object(out))
}

/// The objects in a named queue (defined with `workdo queues define`).
#[utoipa::path(get, path = "/api/queues/{name}", tag = "steps", params(("name" = String, Path, description = "a queue defined with `workdo queues define`"), ("limit" = Option<i64>, Query, description = "default 100")), responses((status = 200, description = "What waits in the named queue", body = Vec<QueueEntry>), (status = 404, description = "No such queue", body = ErrorBody)))]
pub(super) async fn named_queue(
    State(s): State<AppState>,
    _c: Caller,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<QueueEntry>>> {
    let pairs = query_pairs(q.as_deref())?;
    let limit = super::limit_param(&pairs, 100)?;
    Ok(Json(s.store.queue_named_waiting(&name, limit).await?))
}

/// The objects whose step is in error, with their messages.
#[utoipa::path(get, path = "/api/queues/{template}/{step}/errors", tag = "steps", params(("template" = String, Path), ("step" = String, Path), ("limit" = Option<i64>, Query, description = "default 100")), responses((status = 200, description = "Steps in error, most recent first", body = Vec<StepRow>)))]
pub(super) async fn queue_errors(
    State(s): State<AppState>,
    _c: Caller,
    Path((template, step)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<StepRow>>> {
    let pairs = query_pairs(q.as_deref())?;
    s.store.step_known(&template, &step).await?;
    let limit = super::limit_param(&pairs, 100)?;
    Ok(Json(s.store.queue_errors(&template, &step, limit).await?))
}

/// Step counts by template, step and status (the admin view's facets).
#[utoipa::path(get, path = "/api/facets", tag = "steps", params(("template" = Option<String>, Query, description = "one template")), responses((status = 200, description = "Active steps per template, step and status", body = Vec<Facet>), (status = 404, description = "no template of that name", body = ErrorBody)))]
pub(super) async fn facets(
    State(s): State<AppState>,
    _c: Caller,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<Facet>>> {
    let pairs = query_pairs(q.as_deref())?;
    let template = param(&pairs, "template");
    if let Some(t) = template {
        // A misspelt template is a 404 naming it, not an empty list read as "nothing there".
        s.store.template_current(t).await?;
    }
    Ok(Json(s.store.facets(template).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PriorityBody {
    priority: i32,
    #[serde(default)]
    object: Option<String>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    step: Option<String>,
    #[serde(default)]
    workflow: Option<i64>,
}

/// Give matching unfinished steps a priority (higher is claimed first).
#[utoipa::path(post, path = "/api/priority", tag = "steps", request_body = PriorityBody, responses((status = 200, description = "How many unfinished steps got the priority", body = Prioritized)))]
pub(super) async fn priority(
    State(s): State<AppState>,
    c: Caller,
    body: Bytes,
) -> ApiResult<Json<Prioritized>> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Admin)).await?;
    let b: PriorityBody = json_body(&body)?;
    if b.object.is_none() && b.template.is_none() && b.step.is_none() && b.workflow.is_none() {
        return Err(ApiError::bad_request(
            "name at least one of object, template, step or workflow",
        ));
    }
    let filter = StepFilter {
        objects: b
            .object
            .as_deref()
            .map(oid)
            .transpose()?
            .into_iter()
            .collect(),
        workflow: b.workflow,
        template: b.template,
        step: b.step,
        ..StepFilter::default()
    };
    let n = s
        .store
        .steps_prioritize(&filter, b.priority, &format!("api:{}", c.0.as_str()))
        .await?;
    Ok(Json(Prioritized {
        steps: n,
        priority: b.priority,
    }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RetryBody {
    #[serde(default)]
    object: Option<String>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    step: Option<String>,
    /// Run the retried steps on the deployed functions' versions current now, not those their
    /// workflows pinned (after deploying a fix).
    #[serde(default)]
    current_functions: bool,
}

/// Put steps in error back in the queue with fresh attempts.
#[utoipa::path(post, path = "/api/retry", tag = "steps", request_body = RetryBody, responses((status = 200, description = "How many steps in error went back in the queue", body = Retried)))]
pub(super) async fn retry(
    State(s): State<AppState>,
    c: Caller,
    body: Bytes,
) -> ApiResult<Json<Retried>> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let b: RetryBody = json_body(&body)?;
    let filter = StepFilter {
        objects: b
            .object
            .as_deref()
            .map(oid)
            .transpose()?
            .into_iter()
            .collect(),
        template: b.template,
        step: b.step,
        ..StepFilter::default()
    };
    let who = format!("api:{}", c.0.as_str());
    let (n, moved) = if b.current_functions {
        s.store.steps_retry_current(&filter, false, &who).await?
    } else {
        (s.store.steps_retry(&filter, &who).await?, 0)
    };
    Ok(Json(Retried {
        steps: n,
        pins_moved: moved,
    }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseBody {
    /// Why, shown on the page and by `workdo pause`.
    #[serde(default)]
    reason: Option<String>,
}

/// Pause a queue: no worker in any process claims the step's ready steps until it is resumed.
#[utoipa::path(post, path = "/api/queues/{template}/{step}/pause", tag = "queues", params(("template" = String, Path), ("step" = String, Path, description = "a template step, or a generated step's BRICKLET/STEP (its / as %2F)")), request_body(content = PauseBody, description = "optional"), responses((status = 200, description = "Paused (changed says whether it was running)", body = PauseChanged)))]
pub(super) async fn queue_pause(
    State(s): State<AppState>,
    c: Caller,
    Path((template, step)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<PauseChanged>> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let b: PauseBody = if body.is_empty() {
        PauseBody { reason: None }
    } else {
        json_body(&body)?
    };
    let changed = s
        .store
        .step_pause(
            &template,
            &step,
            &format!("api:{}", c.0.as_str()),
            b.reason.as_deref(),
        )
        .await?;
    Ok(Json(PauseChanged {
        paused: true,
        changed,
    }))
}

/// Resume a paused queue: its workers claim again at once.
#[utoipa::path(post, path = "/api/queues/{template}/{step}/resume", tag = "queues", params(("template" = String, Path), ("step" = String, Path)), responses((status = 200, description = "Resumed (changed says whether it was paused)", body = PauseChanged)))]
pub(super) async fn queue_resume(
    State(s): State<AppState>,
    c: Caller,
    Path((template, step)): Path<(String, String)>,
) -> ApiResult<Json<PauseChanged>> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let changed = s.store.step_resume(&template, &step).await?;
    Ok(Json(PauseChanged {
        paused: false,
        changed,
    }))
}

/// The paused queues.
#[utoipa::path(get, path = "/api/paused", tag = "queues", responses((status = 200, description = "Every paused step", body = Vec<Paused>)))]
pub(super) async fn paused(State(s): State<AppState>, _c: Caller) -> ApiResult<Json<Vec<Paused>>> {
    Ok(Json(s.store.paused_list().await?))
}
