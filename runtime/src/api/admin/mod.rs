//! The admin page: server-rendered HTML on the API's address, with the API's tokens.
//!
//! `/` the overview (template × step × status counts, each a link), `/ui/steps` a facet's steps
//! with retry and skip, `/ui/objects/{id}` an object (properties, documents, workflows with their
//! graphs, a machine's signals as buttons, milestones, history), `/signin` and `/signout`. A
//! sign-in form takes a token and keeps it in an HTTP-only, same-site cookie; `--open` needs
//! none. Viewer tokens see; robot and admin tokens act. Every action is a POST carrying a CSRF
//! token derived from the session's token, and every value on a page is escaped.
use axum::Form;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use sha2::{Digest, Sha256};

mod archive;
mod draw;
mod layout;
mod machine;
mod objects;
mod overview;
mod reports;
mod search;

use super::{Access, AppState};
use crate::store::Role;

const COOKIE: &str = "workdo_token";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/signin", get(signin_form).post(signin))
        .route("/signout", post(signout))
        .route("/ui/steps", get(overview::steps))
        .route("/ui/steps/act", post(act))
        .route("/ui/pause", post(pause))
        .route("/ui/search", get(search::search))
        .route("/ui/workflows/{id}", get(machine::workflow))
        .route("/ui/archive/{id}", get(archive::workflow))
        .route("/ui/objects/{id}", get(objects::object))
        .route("/ui/objects/{id}/signal", post(objects::signal))
        .route("/ui/errors", get(reports::errors))
        .route("/ui/templates", get(reports::templates))
        .route("/ui/timings", get(reports::timings))
        .route("/ui/schedules", get(reports::schedules_alerts))
        .route("/ui/schedules/act", post(reports::schedule_act))
        .route("/ui/app.css", get(stylesheet))
        .route("/ui/app.js", get(script))
        .layer(axum::middleware::from_fn(guard))
}

/// The page's style sheet and script: static files, cached for an hour, so the page needs no
/// inline style or script and its Content-Security-Policy can forbid both.
const APP_CSS: &str = include_str!("static/app.css");
const APP_JS: &str = include_str!("static/app.js");

async fn stylesheet() -> Response {
    static_file("text/css; charset=utf-8", APP_CSS)
}

async fn script() -> Response {
    static_file("text/javascript; charset=utf-8", APP_JS)
}

fn static_file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// What every answer of the page carries: no framing by another site, and scripts, styles and
/// forms from this origin only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Every POST of the page must come from the page itself: an `Origin` (or, without one, a
/// `Referer`) naming another host is refused before the handler runs (the CSRF token is the
/// second line). A request with neither (not a browser) is left to the CSRF token. Every
/// answer gets the security headers.
async fn guard(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if req.method() == axum::http::Method::POST && !same_origin(req.headers()) {
        return (
            StatusCode::FORBIDDEN,
            "this form was sent from another site (Origin or Referer is not this server)",
        )
            .into_response();
    }
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    res
}

/// Whether `Origin` (else `Referer`) names the host the request was sent to.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let from = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER));
    let Some(from) = from else {
        return true;
    };
    let Some(from) = from.to_str().ok() else {
        return false;
    };
    // scheme://host[:port][/path]; "null" (a sandboxed frame, a file) is never this server.
    let authority = from
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""));
    matches!((authority, host), (Some(a), Some(h)) if !a.is_empty() && a.eq_ignore_ascii_case(h))
}

/// Text safe in HTML, attributes included.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A query-string value, percent-encoded.
pub(super) fn enc(s: &str) -> String {
    serde_urlencoded::to_string([("v", s)])
        .map(|q| q.trim_start_matches("v=").to_string())
        .unwrap_or_default()
}

/// Who is looking: a role, and the token whose hash is the CSRF token of its forms.
pub(super) struct Viewer {
    pub(super) role: Role,
    pub(super) csrf: String,
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| {
            kv.trim()
                .strip_prefix(COOKIE)
                .and_then(|r| r.strip_prefix('='))
                .map(str::to_string)
        })
}

/// The secret CSRF tokens are made with: random, new in every process, never sent anywhere.
static CSRF_SECRET: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| hex::encode(rand::random::<[u8; 32]>()));

/// A session's CSRF token: the hash of the process's secret and the session's token, so a
/// page of another site can neither know nor guess it (under `--open` too).
fn csrf_of(token: &str) -> String {
    hex::encode(Sha256::digest(
        format!("workdo-csrf:{}:{token}", *CSRF_SECRET).as_bytes(),
    ))
}

/// The viewer, or the sign-in page.
pub(super) async fn viewer(s: &AppState, headers: &HeaderMap) -> Result<Viewer, Response> {
    if s.access == Access::Open {
        return Ok(Viewer {
            role: Role::Admin,
            csrf: csrf_of("open"),
        });
    }
    let Some(token) = cookie_token(headers) else {
        return Err(Redirect::to("/signin").into_response());
    };
    match s.store.token_auth(&token).await {
        Ok(Some((role, None))) => Ok(Viewer {
            role,
            csrf: csrf_of(&token),
        }),
        _ => Err(Redirect::to("/signin?expired=1").into_response()),
    }
}

pub(super) fn page(title: &str, v: Option<&Viewer>, body: &str) -> Html<String> {
    let who = match v {
        Some(v) => format!(
            "<form method=post action=/signout class=who><span>{}</span> <input type=hidden name=csrf value=\"{}\"><button>Sign out</button></form>",
            v.role.as_str(),
            esc(&v.csrf)
        ),
        None => String::new(),
    };
    Html(format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width, initial-scale=1\"><title>{} · workdo</title><link rel=stylesheet href=/ui/app.css><script src=/ui/app.js defer></script></head><body><header><nav><a href=/ class=brand>workdo</a> <a href=/ui/errors>errors</a> <a href=/ui/templates>templates</a> <a href=/ui/timings>timings</a> <a href=/ui/schedules>schedules and alerts</a></nav>{} {who}</header><main><h1>{}</h1>{body}</main></body></html>",
        esc(title),
        search::form(""),
        esc(title)
    ))
}

/// A form's fields, repeated `id`s kept.
pub(super) fn form_pairs(body: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str(body).unwrap_or_default()
}

pub(super) fn field<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The viewer, allowed to act, with the form's CSRF token right.
pub(super) async fn actor(
    s: &AppState,
    headers: &HeaderMap,
    pairs: &[(String, String)],
) -> Result<Viewer, Response> {
    let v = viewer(s, headers).await?;
    if field(pairs, "csrf") != Some(v.csrf.as_str()) {
        return Err((
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong",
        )
            .into_response());
    }
    if v.role < Role::Robot {
        return Err((
            StatusCode::FORBIDDEN,
            "a viewer token cannot act; robot or admin can",
        )
            .into_response());
    }
    Ok(v)
}

async fn act(State(s): State<AppState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    let v = match actor(&s, &headers, &pairs).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    // "All matching": the facet's steps found again now, not the page's rows.
    let all = field(&pairs, "scope") == Some("all");
    let ids: Vec<i64> = if all {
        let (template, step, status) = (
            field(&pairs, "template").unwrap_or(""),
            field(&pairs, "step").unwrap_or(""),
            field(&pairs, "status").unwrap_or(""),
        );
        let text = |k: &str| field(&pairs, k).map(str::to_string);
        let filters = overview::Filters {
            lane: text("lane"),
            milestone: text("milestone"),
            property: text("property"),
            ..Default::default()
        };
        let filter = match filters.to_store() {
            Ok(f) => f,
            Err(e) => return failure(&e),
        };
        match s
            .store
            .steps_in_all(template, step, status, &filter, overview::ALL_MAX)
            .await
        {
            Ok((_, ids)) => ids,
            Err(e) => return failure(&e.to_string()),
        }
    } else {
        pairs
            .iter()
            .filter(|(k, _)| k == "id")
            .filter_map(|(_, v)| v.parse().ok())
            .collect()
    };
    let who = format!("ui:{}", v.role.as_str());
    // The chosen steps: retry acts on those in error, skip on those unfinished (the same
    // bulk commands as the CLI's, narrowed to the chosen ids).
    let n = ids.len();
    let chosen = crate::store::StepFilter {
        ids: Some(ids),
        ..Default::default()
    };
    let (done, verb) = match field(&pairs, "action") {
        Some("prioritize") => {
            let Some(priority) =
                field(&pairs, "priority").and_then(|p| p.trim().parse::<i32>().ok())
            else {
                return failure("the priority is not a whole number");
            };
            (
                s.store.steps_prioritize(&chosen, priority, &who).await,
                format!("Gave priority {priority} to"),
            )
        }
        Some("skip") => (s.store.steps_skip(&chosen, &who).await, "Skipped".into()),
        _ => (s.store.steps_retry(&chosen, &who).await, "Retried".into()),
    };
    let changed = match done {
        Ok(changed) => changed,
        Err(e) => return failure(&e.to_string()),
    };
    // Back to the list only when it is one of ours (no open redirect), saying what was done.
    let back = field(&pairs, "back")
        .filter(|b| b.starts_with("/ui/") && !b.starts_with("//"))
        .unwrap_or("/ui/errors");
    if back.chars().any(|c| c.is_control()) {
        return (
            StatusCode::BAD_REQUEST,
            "the form's back address contains a control character",
        )
            .into_response();
    }
    let said = if all {
        format!(
            "{verb} {} steps: all that matched ({} when the page was shown).",
            overview::count(changed as i64),
            overview::count(
                field(&pairs, "expected")
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(n as i64)
            )
        )
    } else if changed == n {
        format!("{verb} {changed} steps.")
    } else {
        format!(
            "{verb} {changed} of the {n} chosen steps; the others had moved on (finished, or no longer in that status)."
        )
    };
    let sep = if back.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{back}{sep}done={}", enc(&said))).into_response()
}

/// Pause or resume a queue from the overview.
async fn pause(State(s): State<AppState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    let v = match actor(&s, &headers, &pairs).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (Some(template), Some(step)) = (field(&pairs, "template"), field(&pairs, "step")) else {
        return failure("the form names no template and step");
    };
    let done = if field(&pairs, "action") == Some("resume") {
        s.store.step_resume(template, step).await.map(|_| "resumed")
    } else {
        s.store
            .step_pause(template, step, &format!("ui:{}", v.role.as_str()), None)
            .await
            .map(|_| "paused")
    };
    match done {
        Ok(_) => Redirect::to("/").into_response(),
        Err(e) => failure(&e.to_string()),
    }
}

/// A query string a page cannot use, as a page saying why (not the API's JSON).
pub(super) fn unusable(e: &axum::extract::rejection::QueryRejection) -> Response {
    failure(&format!("this address cannot be used: {}", e.body_text()))
}

pub(super) fn failure(message: &str) -> Response {
    (
        StatusCode::CONFLICT,
        page(
            "Not done",
            None,
            &format!(
                "<p class=error>{}</p><p><a href=/>Back</a></p>",
                esc(message)
            ),
        ),
    )
        .into_response()
}

#[derive(Deserialize)]
struct SigninQuery {
    expired: Option<String>,
}

async fn signin_form(Query(q): Query<SigninQuery>) -> Html<String> {
    let note = if q.expired.is_some() {
        "<p class=error>That token is unknown, expired or revoked.</p>"
    } else {
        ""
    };
    page(
        "Sign in",
        None,
        &format!(
            "{note}<form method=post action=/signin><label>Token <input name=token id=token type=password autocomplete=off required></label> <button id=signin>Sign in</button></form><p>Create one with <code>workdo tokens create --role viewer</code> (or robot, admin).</p>"
        ),
    )
}

#[derive(Deserialize)]
struct SigninForm {
    token: String,
}

async fn signin(State(s): State<AppState>, Form(f): Form<SigninForm>) -> Response {
    let token = f.token.trim();
    match s.store.token_auth(token).await {
        Ok(Some((_, None))) => (
            [(
                header::SET_COOKIE,
                format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"),
            )],
            Redirect::to("/"),
        )
            .into_response(),
        _ => Redirect::to("/signin?expired=1").into_response(),
    }
}

async fn signout(State(s): State<AppState>, headers: HeaderMap, body: String) -> Response {
    let pairs = form_pairs(&body);
    if let Ok(v) = viewer(&s, &headers).await
        && field(&pairs, "csrf") != Some(v.csrf.as_str())
    {
        return (
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong",
        )
            .into_response();
    }
    (
        [(
            header::SET_COOKIE,
            format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
        )],
        Redirect::to("/signin"),
    )
        .into_response()
}
