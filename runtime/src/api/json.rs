//! The JSON API under `/api`.

use std::collections::BTreeMap;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    ApiError, ApiResult, AppState, Caller, int_param, json_body, param, query_pairs, split_step,
};
use crate::model::template::{self, Format};
use crate::store::{Role, Saved, SetRequest, StartRequest, StepFilter};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/templates", get(templates_list).post(template_load))
        .route("/api/templates/{name}", get(template_show))
        .route("/api/objects", post(object_create))
        .route("/api/objects/{id}", get(object_show).patch(object_update))
        .route("/api/objects/{id}/lifecycle", get(object_lifecycle))
        .route("/api/objects/{id}/events", get(object_events))
        .route("/api/workflows", post(workflows_start))
        .route(
            "/api/workflows/{id}",
            get(workflow_show).delete(workflow_delete),
        )
        .route("/api/workflows/{id}/events", get(workflow_events))
        .route("/api/steps/{object}/{template}/{step}", put(step_update))
        .route("/api/queues/{template}/{step}", get(queue))
        .route("/api/queues/{template}/{step}/errors", get(queue_errors))
        .route("/api/facets", get(facets))
        .route("/api/priority", post(priority))
        .route("/api/retry", post(retry))
}

async fn templates_list(State(s): State<AppState>, _c: Caller) -> ApiResult<Json<Value>> {
    let rows = s.store.template_list().await?;
    Ok(Json(json!(rows)))
}

async fn template_show(
    State(s): State<AppState>,
    _c: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(s.store.template_current(&name).await?)))
}

/// Load a new template version: the body is the YAML or XML source; `?format=` or the
/// Content-Type says which.
async fn template_load(
    State(s): State<AppState>,
    c: Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    c.require(Role::Admin)?;
    let pairs = query_pairs(q.as_deref())?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let format = match param(&pairs, "format") {
        Some("yaml") => Format::Yaml,
        Some("xml") => Format::Xml,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format={other:?}: use yaml or xml"
            )));
        }
        None if content_type.contains("xml") => Format::Xml,
        None if content_type.contains("yaml") => Format::Yaml,
        None => {
            return Err(ApiError::bad_request(
                "say the format: ?format=yaml|xml or a YAML/XML Content-Type",
            ));
        }
    };
    let source = std::str::from_utf8(&body)
        .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8: {e}")))?;
    let origin = param(&pairs, "origin").unwrap_or("api").to_string();
    let loaded = template::parse(&origin, format, source)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let (id, saved) = s.store.template_save(&loaded).await?;
    let created = saved == Saved::New;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut body = json!({"id": id, "name": loaded.template.name, "sha256": loaded.sha256,
                          "new": created, "saved": saved.as_str()});
    if let Saved::MadeCurrent { loaded_at } = saved {
        body["first_loaded_at"] = json!(loaded_at);
    }
    Ok((status, Json(body)).into_response())
}

/// An object id from a request in its one spelling, or a 400 saying what is wrong with it.
fn oid(text: &str) -> ApiResult<String> {
    crate::model::object_id::normalize(text).map_err(ApiError::bad_request)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, Value>,
    #[serde(default)]
    documents: BTreeMap<String, String>,
}

async fn object_create(State(s): State<AppState>, c: Caller, body: Bytes) -> ApiResult<Response> {
    c.require(Role::Robot)?;
    let b: ObjectBody = json_body(&body)?;
    let id = oid(&b
        .id
        .ok_or_else(|| ApiError::bad_request("missing field `id`"))?)?;
    let created = s
        .store
        .object_put(&id, &b.properties, &b.documents, "api")
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({"id": id, "created": created}))).into_response())
}

async fn object_update(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let id = oid(&id)?;
    c.require(Role::Robot)?;
    let b: ObjectBody = json_body(&body)?;
    if !s.store.object_exists(&id).await? {
        return Err(ApiError::not_found(format!("no object {id:?}")));
    }
    s.store
        .object_put(&id, &b.properties, &b.documents, "api")
        .await?;
    Ok(Json(json!(s.store.object_view(&id, 0).await?)))
}

async fn object_show(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = oid(&id)?;
    Ok(Json(json!(s.store.object_view(&id, 20).await?)))
}

async fn object_lifecycle(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = oid(&id)?;
    if !s.store.object_exists(&id).await? {
        return Err(ApiError::not_found(format!("no object {id:?}")));
    }
    Ok(Json(json!(s.store.milestones(&id).await?)))
}

fn page(pairs: &[(String, String)]) -> ApiResult<(i64, i64)> {
    Ok((
        int_param(pairs, "after")?.unwrap_or(0),
        int_param(pairs, "limit")?.unwrap_or(100),
    ))
}

async fn object_events(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Value>> {
    let id = oid(&id)?;
    let pairs = query_pairs(q.as_deref())?;
    let (after, limit) = page(&pairs)?;
    if !s.store.object_exists(&id).await? {
        return Err(ApiError::not_found(format!("no object {id:?}")));
    }
    let events = s.store.events(Some(&id), None, after, limit).await?;
    let next = events.last().map(|e| e.id);
    Ok(Json(json!({"events": events, "next_after": next})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
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
    context: Option<Value>,
}

async fn workflows_start(State(s): State<AppState>, c: Caller, body: Bytes) -> ApiResult<Response> {
    c.require(Role::Robot)?;
    let b: StartBody = json_body(&body)?;
    if b.objects.is_empty() {
        return Err(ApiError::bad_request("`objects` is empty"));
    }
    // A machine may say who starts it.
    if let Ok(t) = s.store.template_current(&b.template).await
        && let Some(m) = &t.spec.machine
        && !m.access.clone().unwrap_or_default().may_start(c.0.as_str())
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("a {} token may not start {}", c.0.as_str(), b.template),
        ));
    }
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
    Ok((StatusCode::CREATED, Json(json!(started))).into_response())
}

fn workflow_id(text: &str) -> ApiResult<i64> {
    text.parse()
        .map_err(|_| ApiError::bad_request(format!("workflow id {text:?} is not a number")))
}

async fn workflow_show(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = workflow_id(&id)?;
    let view = s
        .store
        .workflow_view(id)
        .await
        .map_err(|_| ApiError::not_found(format!("no workflow {id}")))?;
    Ok(Json(json!(view)))
}

async fn workflow_delete(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    c.require(Role::Admin)?;
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

async fn workflow_events(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Value>> {
    let id = workflow_id(&id)?;
    let pairs = query_pairs(q.as_deref())?;
    let (after, limit) = page(&pairs)?;
    let events = s.store.events(None, Some(id), after, limit).await?;
    let next = events.last().map(|e| e.id);
    Ok(Json(json!({"events": events, "next_after": next})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepBody {
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

async fn step_update(
    State(s): State<AppState>,
    c: Caller,
    Path((object, template, step)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    c.require(Role::Robot)?;
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
        version: b.version,
        actor: format!("api:{}", c.0.as_str()),
    };
    Ok(Json(json!(s.store.step_set(&req).await?)))
}

async fn queue(
    State(s): State<AppState>,
    _c: Caller,
    Path((template, step)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref())?;
    s.store.step_known(&template, &step).await?;
    let completed = pairs
        .iter()
        .filter(|(k, _)| k == "completed")
        .map(|(_, v)| split_step(v))
        .collect::<ApiResult<Vec<_>>>()?;
    let limit = int_param(&pairs, "limit")?.unwrap_or(100);
    let rows = s
        .store
        .queue_waiting(&template, &step, &completed, param(&pairs, "lane"), limit)
        .await?;
    Ok(Json(json!(rows)))
}

async fn queue_errors(
    State(s): State<AppState>,
    _c: Caller,
    Path((template, step)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref())?;
    s.store.step_known(&template, &step).await?;
    let limit = int_param(&pairs, "limit")?.unwrap_or(100);
    Ok(Json(json!(
        s.store.queue_errors(&template, &step, limit).await?
    )))
}

async fn facets(
    State(s): State<AppState>,
    _c: Caller,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref())?;
    Ok(Json(json!(
        s.store.facets(param(&pairs, "template")).await?
    )))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriorityBody {
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

async fn priority(State(s): State<AppState>, c: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    c.require(Role::Admin)?;
    let b: PriorityBody = json_body(&body)?;
    if b.object.is_none() && b.template.is_none() && b.step.is_none() && b.workflow.is_none() {
        return Err(ApiError::bad_request(
            "name at least one of object, template, step or workflow",
        ));
    }
    let filter = StepFilter {
        object: b.object.as_deref().map(oid).transpose()?,
        workflow: b.workflow,
        template: b.template,
        step: b.step,
        ..StepFilter::default()
    };
    let n = s
        .store
        .steps_prioritize(&filter, b.priority, &format!("api:{}", c.0.as_str()))
        .await?;
    Ok(Json(json!({"steps": n, "priority": b.priority})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    #[serde(default)]
    object: Option<String>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    step: Option<String>,
}

/// Put steps in error back in the queue with fresh attempts.
async fn retry(State(s): State<AppState>, c: Caller, body: Bytes) -> ApiResult<Json<Value>> {
    c.require(Role::Robot)?;
    let b: RetryBody = json_body(&body)?;
    let filter = StepFilter {
        object: b.object.as_deref().map(oid).transpose()?,
        template: b.template,
        step: b.step,
        ..StepFilter::default()
    };
    let n = s
        .store
        .steps_retry(&filter, &format!("api:{}", c.0.as_str()))
        .await?;
    Ok(Json(json!({"steps": n})))
}
