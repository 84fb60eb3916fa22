//! The JSON API under `/api`: templates and objects (workflows, steps and queues are in
//! `work.rs`).

use std::collections::BTreeMap;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;

use super::bodies::{EventsPage, ObjectCreated, ObjectsBatched, TemplateLoaded};
use super::{ApiError, ApiResult, AppState, Caller, int_param, json_body, param, query_pairs};
use crate::model::template::{self, Format};
use crate::store::{Milestone, NewObject, ObjectView, Role, Saved, TemplateRow};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/templates", get(templates_list).post(template_load))
        .route("/api/templates/{name}", get(template_show))
        .route("/api/objects", post(object_create))
        .route("/api/objects/batch", post(objects_batch))
        .route("/api/objects/{id}", get(object_show).patch(object_update))
        .route("/api/objects/{id}/lifecycle", get(object_lifecycle))
        .route("/api/objects/{id}/events", get(object_events))
}

/// The current version of every template.
#[utoipa::path(get, path = "/api/templates", tag = "templates", responses((status = 200, description = "The current version of every template", body = Vec<TemplateRow>)))]
pub(super) async fn templates_list(
    State(s): State<AppState>,
    _c: Caller,
) -> ApiResult<Json<Vec<TemplateRow>>> {
    Ok(Json(s.store.template_list().await?))
}

/// A template's current version, with its spec and source.
#[utoipa::path(get, path = "/api/templates/{name}", tag = "templates", params(("name" = String, Path)), responses((status = 200, description = "The current version", body = TemplateRow)))]
pub(super) async fn template_show(
    State(s): State<AppState>,
    _c: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<TemplateRow>> {
    Ok(Json(s.store.template_current(&name).await?))
}

/// Load a new template version: the body is the YAML or XML source; `?format=` or the
/// Content-Type says which.
#[utoipa::path(post, path = "/api/templates", tag = "templates", params(("format" = Option<String>, Query, description = "yaml or xml (else from the Content-Type)"), ("origin" = Option<String>, Query, description = "where it came from, for messages")), request_body(content = String, content_type = "application/yaml", description = "The template's YAML (or, with format=xml, its WorkDo XML) source"), responses((status = 201, description = "A new version, now current", body = TemplateLoaded), (status = 200, description = "A version already stored (made current again if it was not)", body = TemplateLoaded)))]
pub(super) async fn template_load(
    State(s): State<AppState>,
    c: Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Admin)).await?;
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
    let source = String::from_utf8(body.to_vec())
        .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8: {e}")))?;
    let origin = param(&pairs, "origin").unwrap_or("api").to_string();
    // Parsing a large template takes a while: on a blocking thread, so that the server's other
    // requests (`/health` included) do not wait for it.
    let loaded = tokio::task::spawn_blocking(move || template::parse(&origin, format, &source))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let (id, saved) = s.store.template_save(&loaded).await?;
    let created = saved == Saved::New;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = TemplateLoaded {
        id,
        name: loaded.template.name,
        sha256: loaded.sha256,
        new: created,
        saved: saved.as_str().to_string(),
        first_loaded_at: match saved {
            Saved::MadeCurrent { loaded_at } => Some(loaded_at),
            _ => None,
        },
    };
    Ok((status, Json(body)).into_response())
}

/// An object id from a request in its one spelling, or a 400 saying what is wrong with it.
pub(super) fn oid(text: &str) -> ApiResult<String> {
    crate::model::object_id::normalize(text).map_err(ApiError::bad_request)
}

/// An object: its id (in the URL for PATCH), properties to merge (`null` removes one) and
/// documents to replace.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ObjectBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Object)]
    properties: BTreeMap<String, Value>,
    #[serde(default)]
    documents: BTreeMap<String, String>,
}

/// Register an object, or merge properties and documents into an existing one.
#[utoipa::path(post, path = "/api/objects", tag = "objects", request_body = ObjectBody, responses((status = 201, description = "Registered", body = ObjectCreated), (status = 200, description = "It existed: properties merged, documents replaced", body = ObjectCreated)))]
pub(super) async fn object_create(
    State(s): State<AppState>,
    c: Caller,
    body: Bytes,
) -> ApiResult<Response> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
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
    Ok((status, Json(ObjectCreated { id, created })).into_response())
}

/// Many objects at once: `{"objects": [ObjectBody, …]}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ObjectsBody {
    objects: Vec<ObjectBody>,
}

/// The most objects one batch may hold.
const BATCH_MAX: usize = 10_000;

/// Register or update many objects in one transaction: all of them, or (an error naming the
/// entry) none.
#[utoipa::path(post, path = "/api/objects/batch", tag = "objects", request_body = ObjectsBody, responses((status = 200, description = "Every object registered or merged into, in the order given", body = ObjectsBatched)))]
pub(super) async fn objects_batch(
    State(s): State<AppState>,
    c: Caller,
    body: Bytes,
) -> ApiResult<Json<ObjectsBatched>> {
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let b: ObjectsBody = json_body(&body)?;
    if b.objects.len() > BATCH_MAX {
        return Err(ApiError::bad_request(format!(
            "{} objects in one batch, over the limit of {BATCH_MAX}; send them in several",
            b.objects.len()
        )));
    }
    let objects = b
        .objects
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let id = o.id.ok_or_else(|| {
                ApiError::bad_request(format!("objects[{i}]: missing field `id`"))
            })?;
            Ok(NewObject {
                id: oid(&id)
                    .map_err(|e| ApiError::bad_request(format!("objects[{i}]: {}", e.message)))?,
                properties: o.properties,
                documents: o.documents,
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let created = s.store.objects_put(&objects, "api").await?;
    let registered = created.iter().filter(|c| **c).count();
    Ok(Json(ObjectsBatched {
        registered,
        updated: created.len() - registered,
        objects: objects
            .into_iter()
            .zip(created)
            .map(|(o, created)| ObjectCreated { id: o.id, created })
            .collect(),
    }))
}

/// Merge properties (a null removes one) and replace documents of a registered object.
#[utoipa::path(patch, path = "/api/objects/{id}", tag = "objects", params(("id" = String, Path)), request_body = ObjectBody, responses((status = 200, description = "The object after the change", body = ObjectView)))]
pub(super) async fn object_update(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<ObjectView>> {
    let id = oid(&id)?;
    super::access::decide(&s, &c, super::access::Act::Change(Role::Robot)).await?;
    let b: ObjectBody = json_body(&body)?;
    if !s.store.object_exists(&id).await? {
        return Err(ApiError::not_found(format!("no object {id:?}")));
    }
    s.store
        .object_put(&id, &b.properties, &b.documents, "api")
        .await?;
    Ok(Json(s.store.object_view(&id, 0).await?))
}

/// An object: properties, documents, workflows with their steps, milestones, recent events.
#[utoipa::path(get, path = "/api/objects/{id}", tag = "objects", params(("id" = String, Path)), responses((status = 200, description = "Properties, documents, workflows with their steps, milestones, the last 20 events", body = ObjectView)))]
pub(super) async fn object_show(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ObjectView>> {
    let id = oid(&id)?;
    Ok(Json(s.store.object_view(&id, 20).await?))
}

/// An object's lifecycle milestones, in the order reached.
#[utoipa::path(get, path = "/api/objects/{id}/lifecycle", tag = "objects", params(("id" = String, Path)), responses((status = 200, description = "Milestones, oldest first", body = Vec<Milestone>)))]
pub(super) async fn object_lifecycle(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<Milestone>>> {
    let id = oid(&id)?;
    if !s.store.object_exists(&id).await? {
        return Err(ApiError::not_found(format!("no object {id:?}")));
    }
    Ok(Json(s.store.milestones(&id).await?))
}

pub(super) fn page(pairs: &[(String, String)]) -> ApiResult<(i64, i64)> {
    Ok((
        int_param(pairs, "after")?.unwrap_or(0),
        super::limit_param(pairs, 100)?,
    ))
}

/// An object's history, a page at a time.
#[utoipa::path(get, path = "/api/objects/{id}/events", tag = "objects", params(("id" = String, Path), ("after" = Option<i64>, Query, description = "event id to continue after (next_after of the last page)"), ("limit" = Option<i64>, Query, description = "at most 1000"), ("kind" = Option<Vec<String>>, Query, description = "only events of these kinds (repeatable, or comma-separated)")), responses((status = 200, description = "Events, oldest first", body = EventsPage)))]
pub(super) async fn object_events(
    State(s): State<AppState>,
    _c: Caller,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<EventsPage>> {
    let id = oid(&id)?;
    let pairs = query_pairs(q.as_deref())?;
    let (after, limit) = page(&pairs)?;
    if !s.store.object_exists(&id).await? {
        return Err(ApiError::not_found(format!("no object {id:?}")));
    }
    let events = s
        .store
        .events(Some(&id), None, after, limit, &kinds_param(&pairs))
        .await?;
    let next_after = events.last().map(|e| e.id);
    Ok(Json(EventsPage { events, next_after }))
}

/// `kind=a&kind=b` or `kind=a,b`: the event kinds a history is narrowed to (none: all).
pub(super) fn kinds_param(pairs: &[(String, String)]) -> Vec<String> {
    pairs
        .iter()
        .filter(|(k, _)| k == "kind")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}
