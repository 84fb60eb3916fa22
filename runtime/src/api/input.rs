//! What the API refuses before any handler runs, and the shape of every error body.
//!
//! Postgres `text` and `jsonb` cannot hold a NUL character (U+0000): a NUL that reached a
//! statement failed it with a database error, answered as a 500. Every way input enters —
//! the path, the query string, a JSON body — is checked here and answered 400 naming where the
//! NUL was. Responses the framework makes itself (an unknown route, a body over the limit, a
//! method not allowed) get the same `{"error": …}` body as the handlers' errors.

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::ApiError;

/// Refuse a request whose path or query string holds a NUL (also percent-encoded, `%00`).
pub(super) async fn refuse_nul(request: Request, next: Next) -> Response {
    let uri = request.uri();
    if let Some(e) = nul_in_uri(uri.path(), uri.query()) {
        return e.into_response();
    }
    next.run(request).await
}

fn nul_in_uri(path: &str, query: Option<&str>) -> Option<ApiError> {
    for (i, segment) in path.split('/').filter(|s| !s.is_empty()).enumerate() {
        let decoded = percent_decode(segment);
        if decoded.contains(&0) {
            return Some(ApiError::bad_request(format!(
                "path segment {} ({:?}) contains a NUL character (U+0000), which workdo cannot store",
                i + 1,
                String::from_utf8_lossy(&decoded).replace('\0', "\\0")
            )));
        }
    }
    let query = query?;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(&key.replace('+', " "));
        let value = percent_decode(&value.replace('+', " "));
        if key.contains(&0) || value.contains(&0) {
            return Some(ApiError::bad_request(format!(
                "query parameter {:?} contains a NUL character (U+0000), which workdo cannot store",
                String::from_utf8_lossy(&key).replace('\0', "\\0")
            )));
        }
    }
    None
}

fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                let v = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(v as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Where in a JSON value a NUL is ([`crate::model::nul_at`]).
pub(super) fn nul_in_json(value: &Value) -> Option<String> {
    crate::model::nul_at(value)
}

/// Marks an error answer a handler wrote in another shape on purpose (the workflow service's
/// plain sentences): [`json_errors`] passes it as it is.
#[derive(Clone, Copy, Debug)]
pub(super) struct OwnBody;

/// Give the framework's own error responses (no handler ran) the API's JSON error body. A
/// handler's own JSON or HTML (the admin page's "Not done" page, which says what went wrong)
/// passes as it is.
pub(super) async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_own = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"))
        || response.extensions().get::<OwnBody>().is_some();
    if !(status.is_client_error() || status.is_server_error()) || is_own {
        return response;
    }
    let message = match status {
        StatusCode::NOT_FOUND => "no such route; see /openapi.json".to_string(),
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route".to_string(),
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "request body over the limit of {} bytes",
            super::DEFAULT_BODY_LIMIT
        ),
        StatusCode::URI_TOO_LONG => "request URI too long".to_string(),
        other => other
            .canonical_reason()
            .unwrap_or("request refused")
            .to_lowercase(),
    };
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let mut out = ApiError::new(status, message).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_found_wherever_it_is() {
        assert!(nul_in_uri("/api/objects/a%00b", None).is_some());
        assert!(nul_in_uri("/api/objects/ab", Some("error=a%00b:h1")).is_some());
        assert!(nul_in_uri("/api/objects/ab", Some("x=1&y=2")).is_none());
        let v: Value = serde_json::json!({"properties": {"a": "x\u{0}y"}});
        assert_eq!(nul_in_json(&v).as_deref(), Some("properties.a"));
        let v: Value = serde_json::json!({"objects": ["ok", "a\u{0}"]});
        assert_eq!(nul_in_json(&v).as_deref(), Some("objects[1]"));
        assert_eq!(nul_in_json(&serde_json::json!({"a": ["b"]})), None);
    }
}
