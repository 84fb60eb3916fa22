//! `/api/functions`: deploy a step function's bytes into the database, list and show its
//! versions, roll back, delete. Deploying, rolling back and deleting are the admin's.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

use super::access::{Act, decide};
use super::{ApiError, ApiResult, AppState, Caller, json_body, param, query_pairs};
use crate::store::Role;
use crate::store::functions::{Deployment, FunctionInfo, NewArtifact};

/// The largest function a deploy takes: `WORKDO_FUNCTION_MAX_BYTES`, 64 MiB by default.
pub fn max_bytes() -> u64 {
    static MAX: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        std::env::var("WORKDO_FUNCTION_MAX_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(crate::artifact::DEFAULT_MAX_BYTES)
    });
    *MAX
}

pub fn router() -> Router<AppState> {
    // A function's bytes are allowed past the API's 1 MiB body limit, up to the deploy limit
    // (one byte more, so that the store's own check names the limit).
    let limit = usize::try_from(max_bytes().saturating_add(1)).unwrap_or(usize::MAX);
    Router::new()
        .route("/api/functions", get(list))
        .route(
            "/api/functions/{name}",
            get(show)
                .put(deploy)
                .delete(delete)
                .layer(DefaultBodyLimit::max(limit)),
        )
        .route("/api/functions/{name}/rollback", post(rollback))
}

/// Deploy a function: the body is one executable file (`application/octet-stream`) or a
/// folder as a tar archive (`application/x-tar`, with `?entry=` naming the file that runs). A
/// new version of `name`, current for workflows started from now on; the same bytes again make
/// no new version. 201 for a new version, 200 otherwise.
#[utoipa::path(put, path = "/api/functions/{name}", tag = "functions",
    params(("name" = String, Path), ("entry" = Option<String>, Query, description = "a folder's file to run"), ("note" = Option<String>, Query, description = "why this version")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "the file (or, as application/x-tar, a folder's archive)"),
    responses((status = 201, description = "A new version, now current", body = Deployment), (status = 200, description = "These bytes were a version already: now current", body = Deployment)))]
pub(super) async fn deploy(
    State(s): State<AppState>,
    c: Caller,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Deployment>)> {
    decide(&s, &c, Act::Change(Role::Admin)).await?;
    let pairs = query_pairs(q.as_deref())?;
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let archive = match kind.as_str() {
        "application/octet-stream" => false,
        "application/x-tar" => true,
        other => {
            return Err(ApiError::bad_request(format!(
                "Content-Type {other:?}: send application/octet-stream (one file) or \
                 application/x-tar (a folder, with ?entry=FILE)"
            )));
        }
    };
    let art = NewArtifact {
        bytes: &body,
        archive,
        entry: param(&pairs, "entry"),
        note: param(&pairs, "note"),
        max: max_bytes(),
    };
    let d = s
        .store
        .function_deploy(&name, &art, &format!("api:{}", c.0.as_str()))
        .await?;
    let status = if d.new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(d)))
}

/// Deployed functions, each with its versions (hash, size, who deployed it, when, note, how
/// many unfinished workflows pin it), newest first.
#[utoipa::path(get, path = "/api/functions", tag = "functions", responses((status = 200, description = "Every deployed function", body = Vec<FunctionInfo>)))]
pub(super) async fn list(
    State(s): State<AppState>,
    _c: Caller,
) -> ApiResult<Json<Vec<FunctionInfo>>> {
    Ok(Json(s.store.function_list().await?))
}

/// One deployed function with its versions.
#[utoipa::path(get, path = "/api/functions/{name}", tag = "functions", params(("name" = String, Path)), responses((status = 200, description = "The function's versions", body = FunctionInfo)))]
pub(super) async fn show(
    State(s): State<AppState>,
    _c: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<FunctionInfo>> {
    Ok(Json(s.store.function_show(&name).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RollbackBody {
    /// The version to make current.
    to: i32,
}

/// What a rollback did.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct RolledBack {
    function: String,
    from: i32,
    to: i32,
}

/// Make version `to` current again, for workflows started from now on.
#[utoipa::path(post, path = "/api/functions/{name}/rollback", tag = "functions", params(("name" = String, Path)), request_body = RollbackBody, responses((status = 200, description = "Now current", body = RolledBack)))]
pub(super) async fn rollback(
    State(s): State<AppState>,
    c: Caller,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<RolledBack>> {
    decide(&s, &c, Act::Change(Role::Admin)).await?;
    let b: RollbackBody = json_body(&body)?;
    let from = s
        .store
        .function_rollback(&name, b.to, &format!("api:{}", c.0.as_str()))
        .await?;
    Ok(Json(RolledBack {
        function: name,
        from,
        to: b.to,
    }))
}

/// What a delete did.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct FunctionDeleted {
    function: String,
    versions_deleted: u64,
}

/// Delete every version of a function; 409 while an unfinished workflow pins one (naming them)
/// or a current template names it.
#[utoipa::path(delete, path = "/api/functions/{name}", tag = "functions", params(("name" = String, Path)), responses((status = 200, description = "Deleted", body = FunctionDeleted)))]
pub(super) async fn delete(
    State(s): State<AppState>,
    c: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<FunctionDeleted>> {
    decide(&s, &c, Act::Change(Role::Admin)).await?;
    let n = s
        .store
        .function_delete(&name, &format!("api:{}", c.0.as_str()))
        .await?;
    Ok(Json(FunctionDeleted {
        function: name,
        versions_deleted: n,
    }))
}
