//! State machines over HTTP: `POST /api/workflows/{id}/signals` and
//! `POST /api/objects/{object}/workflows/{template}/signals`, body `{"signal": …, "data": {…}}`.
//! Who may send a signal: the machine's `access` by the token's role, or a token scoped to the
//! job and the signal. A refused signal is 403 (not allowed) or 409 (not accepted in the job's
//! state, or an action failed and the transition rolled back), and changes nothing.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiResult, AppState, Caller, ErrorBody, json_body};
use crate::store::{Signalled, Suspension};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/workflows/{id}/signals", post(by_id))
        .route(
            "/api/objects/{object}/workflows/{template}/signals",
            post(by_object),
        )
        .route("/api/workflows/{id}/suspend", post(suspend))
        .route("/api/workflows/{id}/resume", post(resume))
}

/// Suspend a machine job: it takes no signals (they wait in its inbox) until resumed. Admins.
#[utoipa::path(post, path = "/api/workflows/{id}/suspend", tag = "machines", params(("id" = i64, Path)), responses((status = 200, description = "Suspended (or already was: `changed` false)", body = Suspension), (status = 409, description = "Not a machine job that is still running", body = ErrorBody)))]
pub(super) async fn suspend(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Suspension>> {
    suspension(&s, &c, &id, true).await
}

/// Resume a suspended machine job: what waited in its inbox is taken now, in order. Admins.
#[utoipa::path(post, path = "/api/workflows/{id}/resume", tag = "machines", params(("id" = i64, Path)), responses((status = 200, description = "Resumed, with the signals taken", body = Suspension), (status = 409, description = "Not a machine job that is still running", body = ErrorBody)))]
pub(super) async fn resume(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Suspension>> {
    suspension(&s, &c, &id, false).await
}

async fn suspension(
    s: &AppState,
    c: &Caller,
    id: &str,
    suspend: bool,
) -> ApiResult<Json<Suspension>> {
    super::access::decide(s, c, super::access::Act::Change(crate::store::Role::Admin)).await?;
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("workflow id {id:?} is not a number")))?;
    let actor = format!("api:{}", c.0.as_str());
    Ok(Json(s.store.machine_suspend(id, suspend, &actor).await?))
}

/// A signal and its data (the transition's `${data.…}`).
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SignalBody {
    signal: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    data: Option<Value>,
}

/// Send a signal to a state-machine job by its workflow id.
#[utoipa::path(post, path = "/api/workflows/{id}/signals", tag = "machines", params(("id" = i64, Path)), request_body = SignalBody, responses((status = 200, description = "The transition taken, and the signals the job sent itself after it", body = Signalled), (status = 409, description = "Not accepted in the job's state, or a failing action rolled the transition back; nothing changed", body = ErrorBody)))]
pub(super) async fn by_id(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Signalled>)> {
    let id: i64 = id
        .parse()
        .map_err(|_| ApiError::bad_request(format!("workflow id {id:?} is not a number")))?;
    deliver(&s, c, id, &body).await
}

/// Send a signal to an object's running job of a machine template.
#[utoipa::path(post, path = "/api/objects/{object}/workflows/{template}/signals", tag = "machines", params(("object" = String, Path), ("template" = String, Path)), request_body = SignalBody, responses((status = 200, description = "As /api/workflows/{id}/signals", body = Signalled), (status = 409, description = "Not accepted, or rolled back; nothing changed", body = ErrorBody)))]
pub(super) async fn by_object(
    State(s): State<AppState>,
    c: Caller,
    Path((object, template)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Signalled>)> {
    let object = crate::model::object_id::normalize(&object).map_err(ApiError::bad_request)?;
    let id = s.store.machine_job(&object, &template).await?;
    deliver(&s, c, id, &body).await
}

async fn deliver(
    s: &AppState,
    c: Caller,
    id: i64,
    body: &Bytes,
) -> ApiResult<(StatusCode, Json<Signalled>)> {
    let b: SignalBody = json_body(body)?;
    super::access::decide(
        s,
        &c,
        super::access::Act::Signal {
            job: id,
            signal: &b.signal,
        },
    )
    .await?;
    let data = b.data.unwrap_or_else(|| json!({}));
    let actor = match &c.1 {
        Some(_) => format!("api:scoped:{id}"),
        None => format!("api:{}", c.0.as_str()),
    };
    let done = s.store.machine_signal(id, &b.signal, &data, &actor).await?;
    Ok((StatusCode::OK, Json(done)))
}
