//! The HTTP API: a JSON API under `/api` (described by `/openapi.json`) and the WorkDo
//! workflow-service XML routes at their original paths, so existing robots and clients work
//! unchanged. Every request but `/health` and `/openapi.json` needs a bearer token; its role
//! decides what it may do.

pub(crate) mod access;
mod admin;
mod bodies;
mod functions;
pub mod idempotency;
mod input;
mod json;
mod machines;
mod openapi;
mod work;
mod workdo;

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::store::{Role, Store, StoreError};

use bodies::ErrorBody;

/// Largest request body accepted (templates included).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How requests are authorised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Bearer tokens with roles.
    Tokens,
    /// Everyone is admin: local development only (loopback addresses).
    Open,
}

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub access: Access,
}

/// The whole API as a router, for serving and for in-process tests.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/health", get(openapi::health))
        .route("/ready", get(openapi::ready))
        .merge(admin::router())
        .route("/openapi.json", get(openapi::document))
        .merge(json::router())
        .merge(functions::router())
        .merge(work::router())
        .merge(machines::router())
        .merge(workdo::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            idempotency::idempotent,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(DEFAULT_BODY_LIMIT))
        .layer(axum::middleware::from_fn(input::refuse_nul))
        .layer(axum::middleware::from_fn(input::json_errors))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                tower_http::trace::DefaultMakeSpan::new().level(tracing::Level::INFO),
            ),
        )
        .with_state(state)
}

/// Every request that changes something must come from this server's own pages or from a
/// client that is not a browser: a POST, PUT, PATCH or DELETE whose `Origin` (else `Referer`)
/// names another site is refused before anything runs (a page elsewhere cannot drive the API,
/// even with bodies a browser sends without asking). Under `--open` (no tokens, loopback only)
/// the `Host` must be a loopback name too, so a DNS name rebound to 127.0.0.1 cannot reach it.
async fn guard(
    axum::extract::State(s): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let changes = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    if changes && !admin::same_origin(req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "this request was sent from another site (Origin or Referer is not this server)",
        )
        .into_response();
    }
    if s.access == Access::Open {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = host
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(host, |(n, _)| n);
        let loopback = name.eq_ignore_ascii_case("localhost")
            || name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                format!("--open answers loopback hosts only, not {host:?}"),
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The token a request carries: `Bearer TOKEN` (any case), or `Basic` with the token as the
/// password. `Err` says what is wrong with the header; `Ok(None)` means there is none.
pub(crate) fn request_token(
    headers: &axum::http::HeaderMap,
) -> Result<Option<String>, &'static str> {
    let Some(header) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = header
        .to_str()
        .map_err(|_| "the Authorization header is not text")?
        .trim();
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        return Ok(Some(rest.trim().to_string()));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        use base64::Engine as _;
        return base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|d| String::from_utf8(d).ok())
            .and_then(|up| up.split_once(':').map(|(_, p)| p.to_string()))
            .map(Some)
            .ok_or("the Basic credentials are not base64 of user:token");
    }
    Err("the Authorization header is not `Bearer <token>` (or Basic with the token as password)")
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "--open serves without tokens and is only allowed on a loopback address, not {0}; create a token with `workdo tokens create --role admin` instead"
    )]
    OpenNotLoopback(SocketAddr),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serve the API on `listen` until `shutdown` is cancelled.
///
/// # Errors
/// `--open` on a non-loopback address, or the address cannot be bound.
pub async fn serve(
    store: Store,
    listen: SocketAddr,
    access: Access,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    if access == Access::Open && !listen.ip().is_loopback() {
        return Err(ServeError::OpenNotLoopback(listen));
    }
    let listener = std::net::TcpListener::bind(listen).map_err(|e| ServeError::Bind(listen, e))?;
    serve_on(store, listener, access, shutdown).await
}

/// Serve the API on a socket already bound (so a caller can report the port it got) until
/// `shutdown` is cancelled.
///
/// # Errors
/// `--open` on a non-loopback address, or the socket cannot be used.
pub async fn serve_on(
    store: Store,
    listener: std::net::TcpListener,
    access: Access,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let listen = listener.local_addr()?;
    if access == Access::Open && !listen.ip().is_loopback() {
        return Err(ServeError::OpenNotLoopback(listen));
    }
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    // Requests wait at most a few seconds for a connection (then 503 with Retry-After), on a
    // pool of their own so the runtime's work never starves the API nor the API the runtime.
    let store = store.for_requests();
    tracing::info!(%listen, ?access, "API listening");
    axum::serve(listener, app(AppState { store, access }))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

/// An error response. 4xx bodies say what was wrong; 5xx bodies hide internals (they are logged).
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let status = match &e {
            StoreError::UnknownTemplate(_)
            | StoreError::UnknownObject(_)
            | StoreError::UnknownWorkflow { .. }
            | StoreError::UnknownStep { .. }
            | StoreError::UnknownQueue(_)
            | StoreError::UnknownFunction(_)
            | StoreError::UnknownWorkflowId(_) => StatusCode::NOT_FOUND,
            StoreError::FunctionInUse { .. } | StoreError::FunctionConflict(_) => {
                StatusCode::CONFLICT
            }
            StoreError::BadArtifact(_) | StoreError::BadInput(_) => StatusCode::BAD_REQUEST,
            StoreError::StatusMismatch { .. }
            | StoreError::OldVersion { .. }
            | StoreError::SignalRefused(_)
            | StoreError::MigrationRefused(_)
            | StoreError::Queued
            | StoreError::TransitionRolledBack(_) => StatusCode::CONFLICT,
            StoreError::InvalidStatus { .. }
            | StoreError::Invalid { .. }
            | StoreError::ObjectId(_)
            | StoreError::UnknownBricklets { .. }
            | StoreError::SubnetTooLarge { .. }
            | StoreError::Schedule(_) => StatusCode::BAD_REQUEST,
            // The last line of defence for a character Postgres cannot store in a field the
            // checks above do not see (e.g. inside an uploaded template), or a date or number
            // outside what it stores (a `start_at` before 4713 BC).
            StoreError::Sql(sqlx::Error::Database(d))
                if matches!(
                    d.code().as_deref(),
                    Some("22021" | "22P05" | "22P02" | "22008" | "22003")
                ) =>
            {
                return ApiError::bad_request(format!("a value cannot be stored: {}", d.message()));
            }
            // lock_timeout (55P03) or statement_timeout (57014) ran out: the request's
            // transaction rolled back whole.
            StoreError::Sql(sqlx::Error::Database(d))
                if matches!(d.code().as_deref(), Some("55P03" | "57014")) =>
            {
                tracing::warn!(error = %e, "request refused: the database did not answer in time");
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the database did not answer in time ({}): another session holds what \
                         this request needs, or it ran too long; nothing was done; try again \
                         shortly",
                        d.message()
                    ),
                );
            }
            StoreError::Sql(
                sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_),
            ) => {
                tracing::warn!(error = %e, "request refused: no database connection");
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the database is not answering; nothing was done; try again shortly",
                );
            }
            StoreError::SessionLost(_) => {
                tracing::warn!(error = %e, "request refused: the database session is shared");
                return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
            }
            StoreError::CorruptTemplate(..) | StoreError::Sql(_) => {
                tracing::error!(error = %e, "request failed");
                return ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error; see the server log",
                );
            }
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.message,
        };
        let mut res = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            res.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("2"));
        }
        res
    }
}

/// The authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller(pub Role, pub Option<Scope>);

/// A token scoped to one job and some of its signals.
#[derive(Debug, Clone)]
pub struct Scope {
    pub workflow: i64,
    pub signals: Vec<String>,
}

impl Caller {
    /// 403 unless the caller's role includes `role`.
    pub fn require(&self, role: Role) -> ApiResult<()> {
        if self.1.is_none() && self.0 >= role {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "this needs the {} role; the token has {}",
                    role.as_str(),
                    self.0.as_str()
                ),
            ))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // Decided already for this request (the idempotency layer checks the token before it
        // gives a stored answer back): not asked of the database twice.
        if let Some(caller) = parts.extensions.get::<Caller>() {
            return Ok(caller.clone());
        }
        if state.access == Access::Open {
            return Ok(Caller(Role::Admin, None));
        }
        let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m);
        let token = request_token(&parts.headers)
            .map_err(unauthorized)?
            .ok_or_else(|| unauthorized("missing bearer token (Authorization: Bearer …)"))?;
        let token = token.as_str();
        match state.store.token_auth(token).await? {
            Some((role, None)) => Ok(Caller(role, None)),
            // A scoped token signals its job and does nothing else, reads included.
            Some((role, Some((workflow, signals)))) => {
                if parts.method != axum::http::Method::POST
                    || !parts.uri.path().ends_with("/signals")
                {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        format!(
                            "this token may only send {} to workflow {workflow}",
                            signals.join(", ")
                        ),
                    ));
                }
                Ok(Caller(role, Some(Scope { workflow, signals })))
            }
            None => Err(unauthorized("unknown, expired or revoked token")),
        }
    }
}

/// Parse a JSON body, naming the problem when it is malformed.
pub fn json_body<T: DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    if let Ok(text) = std::str::from_utf8(body) {
        crate::model::numbers::check_exact(text)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    }
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    if let Some(at) = input::nul_in_json(&value) {
        return Err(ApiError::bad_request(format!(
            "body field {at:?} contains a NUL character (U+0000), which workdo cannot store"
        )));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// Query pairs, keeping repeated keys (`completed=a&completed=b`).
pub fn query_pairs(raw: Option<&str>) -> ApiResult<Vec<(String, String)>> {
    serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))
}

/// An integer query parameter.
pub fn int_param<T: std::str::FromStr>(
    pairs: &[(String, String)],
    key: &str,
) -> ApiResult<Option<T>> {
    match pairs.iter().find(|(k, _)| k == key) {
        None => Ok(None),
        Some((_, v)) => v.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!("query parameter {key}={v:?} is not a number"))
        }),
    }
}

/// The `limit` query parameter: a whole number of rows, 0 or more (`default` when absent).
pub fn limit_param(pairs: &[(String, String)], default: i64) -> ApiResult<i64> {
    match int_param::<i64>(pairs, "limit")? {
        None => Ok(default),
        Some(n) if n >= 0 => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "query parameter limit={n} is negative; give 0 or more"
        ))),
    }
}

pub fn param<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `TEMPLATE:STEP`, or `REPOSITORY:TEMPLATE:STEP` as workflow-service clients write it (the
/// repository, e.g. `dor:`, is ignored, as the service ignores it).
pub fn split_step(text: &str) -> ApiResult<(String, String)> {
    let text = match text.rsplitn(3, ':').collect::<Vec<_>>().as_slice() {
        [_, _, _] => text.split_once(':').map_or(text, |(_, rest)| rest),
        _ => text,
    };
    match text.split_once(':') {
        Some((t, s)) if !t.is_empty() && !s.is_empty() => Ok((t.to_string(), s.to_string())),
        _ => Err(ApiError::bad_request(format!(
            "{text:?} is not WORKFLOW:STEP"
        ))),
    }
}
