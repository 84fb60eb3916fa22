//! `Idempotency-Key` on every request that starts, signals, changes or deletes (POST, PUT,
//! PATCH, DELETE of the JSON API and the workflow-service routes): the first request with a key
//! runs and its answer is kept for 24 hours; a repeat with the same key and the same request
//! gets that answer back (with `Idempotency-Replayed: true`) and applies nothing. A key reused
//! for a different request is a 422; a repeat while the first is still being answered is a 409.
//! A client that retries after a timeout or a 5xx with the same key never applies a change twice.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::{ApiError, AppState, DEFAULT_BODY_LIMIT};
use crate::store::Claim;

/// The request header.
pub const HEADER: &str = "idempotency-key";

/// Set on an answer given again for a repeated key.
pub const REPLAYED: &str = "idempotency-replayed";

/// Whether `key` can be an idempotency key: 1 to 255 visible ASCII characters.
fn valid(key: &str) -> bool {
    (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

fn hex_sha256(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
        h.update([0]);
    }
    hex::encode(h.finalize())
}

pub async fn idempotent(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let changes = matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let page = req.uri().path() == "/signin"
        || req.uri().path() == "/signout"
        || req.uri().path().starts_with("/ui/");
    let Some(key) = req.headers().get(HEADER).filter(|_| changes && !page) else {
        return next.run(req).await;
    };
    let Some(key) = key.to_str().ok().filter(|k| valid(k)).map(str::to_string) else {
        return ApiError::bad_request(
            "the Idempotency-Key header must be 1 to 255 visible ASCII characters",
        )
        .into_response();
    };
    // Keys are kept per token (however it is sent: Bearer, Basic), as a hash, never the token
    // itself. A request without one is refused by the route; no key is kept for it.
    let token = match super::request_token(req.headers()) {
        Ok(Some(t)) => t,
        _ if s.access == super::Access::Open => "open".to_string(),
        _ => return next.run(req).await,
    };
    let scope = hex_sha256(&[b"api", token.as_bytes()]);
    let (mut parts, body) = req.into_parts();
    // The token is checked now, before any answer is given again: a revoked or expired token
    // got the answers stored for its keys (started workflow ids) back. The route applies its
    // own rule to the caller found here (kept in the request's extensions).
    match <super::Caller as axum::extract::FromRequestParts<AppState>>::from_request_parts(
        &mut parts, &s,
    )
    .await
    {
        Ok(caller) => {
            parts.extensions.insert(caller);
        }
        Err(e) => return e.into_response(),
    }
    let Ok(body) = axum::body::to_bytes(body, DEFAULT_BODY_LIMIT).await else {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {DEFAULT_BODY_LIMIT} bytes"),
        )
        .into_response();
    };
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or_default();
    // What the request means, not how it is spelled: a JSON body in its canonical form (the
    // same JSON with other whitespace or key order is the same request), and the Content-Type
    // it was sent as (the same bytes as another type are another request).
    let content_type = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    let canonical = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .filter(|_| content_type.is_empty() || content_type.ends_with("json"))
        .and_then(|v| serde_json::to_vec(&v).ok());
    let fingerprint = hex_sha256(&[
        parts.method.as_str().as_bytes(),
        target.as_bytes(),
        content_type.as_bytes(),
        canonical.as_deref().unwrap_or(&body),
    ]);
    match s.store.idempotency_claim(&scope, &key, &fingerprint).await {
        Err(e) => return ApiError::from(e).into_response(),
        Ok(Claim::OtherRequest) => {
            return ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "this Idempotency-Key was used for a different request; use a new key for a new request",
            )
            .into_response();
        }
        Ok(Claim::Running) => {
            return ApiError::new(
                StatusCode::CONFLICT,
                "a request with this Idempotency-Key is being answered, or its server stopped before answering; try again later",
            )
            .into_response();
        }
        Ok(Claim::Answered {
            status,
            content_type,
            body,
        }) => return replay(status, content_type, body),
        Ok(Claim::New) => {}
    }
    // The request and the keeping of its answer run on a task of their own: a client that
    // times out and goes away does not cancel them half-way (which would leave the key claimed
    // with no answer), and its retry gets the answer.
    let store = s.store.clone();
    let work = tokio::spawn(async move {
        let res = next.run(Request::from_parts(parts, Body::from(body))).await;
        keep(&store, &scope, &key, res).await
    });
    work.await
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Keep `res` as the answer to the request that claimed `key`, or give the key back when the
/// request was refused before anything ran or failed (a repeat may then run).
async fn keep(store: &crate::store::Store, scope: &str, key: &str, res: Response) -> Response {
    let status = res.status();
    // Refused (no credentials, not allowed, no database connection) or failed inside (every
    // changing route applies in one transaction, rolled back on the error): nothing was
    // applied, the key is given back so that a repeat may run.
    // Only answers that changed something, or refused the request for good (a malformed
    // body, 400 or 422), are kept: a 404 or 409 depends on what exists now (an object created
    // since, a step that moved on), and a repeat must be answered as things are then.
    if matches!(
        status,
        StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN
            | StatusCode::NOT_FOUND
            | StatusCode::CONFLICT
    ) || status.is_server_error()
    {
        if let Err(e) = store.idempotency_release(scope, key).await {
            tracing::warn!(error = %e, "could not give an idempotency key back");
        }
        return res;
    }
    let (parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if let Err(e) = store
        .idempotency_finish(scope, key, i32::from(status.as_u16()), content_type, &bytes)
        .await
    {
        // The change is applied; only its answer could not be kept. A repeat gets a 409
        // (the key stays claimed), never a second application.
        tracing::warn!(error = %e, "could not keep the answer of an idempotent request");
    }
    Response::from_parts(parts, Body::from(bytes))
}

fn replay(status: i32, content_type: Option<String>, body: Vec<u8>) -> Response {
    let status = u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut res = (status, Bytes::from(body)).into_response();
    let h = res.headers_mut();
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::CONTENT_TYPE, ct);
    }
    h.insert(REPLAYED, HeaderValue::from_static("true"));
    res
}
