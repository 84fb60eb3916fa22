//! The admin page: server-rendered HTML on the API's address, with the API's tokens.
//!
//! `/` the overview (template × step × status counts, each a link), `/ui/steps` a facet's steps
//! with retry and skip, `/ui/objects/{id}` an object (properties, documents, workflows with their
//! graphs, a machine's signals as buttons, milestones, history), `/signin` and `/signout`. A
//! sign-in form takes a token and keeps it in an HTTP-only, same-site cookie; `--open` needs
//! none. Viewer tokens see; robot and admin tokens act. Every action is a POST carrying a CSRF
//! token derived from the session's token. Pages are maud templates, which escape every value
//! they splice; the cookie is axum-extra's.
use axum::Form;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;
use sha2::{Digest, Sha256};

mod actions;
mod archive;
mod documents;
mod draw;
mod functions;
mod history;
mod known;
mod layout;
mod machine;
mod objects;
mod overview;
mod place;
mod reports;
mod search;
mod steps;

use super::{Access, AppState};
use crate::store::Role;

const COOKIE: &str = "workdo_token";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::overview))
        .route("/signin", get(signin_form).post(signin))
        .route("/signout", post(signout))
        .route("/ui/steps", get(steps::steps))
        .route("/ui/steps/act", post(actions::act))
        .route("/ui/pause", post(actions::pause))
        .route("/ui/search", get(search::search))
        .route("/ui/workflows/{id}", get(machine::workflow))
        .route("/ui/archive/{id}", get(archive::workflow))
        .route("/ui/objects/{id}", get(objects::object))
        .route("/ui/objects/{id}/signal", post(objects::signal))
        .route("/ui/objects/{id}/suspend", post(objects::suspend))
        .route("/ui/errors", get(reports::errors))
        .route("/ui/templates", get(reports::templates))
        .route("/ui/timings", get(reports::timings))
        .route("/ui/schedules", get(reports::schedules_alerts))
        .route("/ui/schedules/act", post(reports::schedule_act))
        .route("/ui/functions", get(functions::functions))
        .route("/ui/functions/rollback", post(functions::rollback))
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

/// A query-string value, percent-encoded.
pub(super) fn enc(s: &str) -> String {
    serde_urlencoded::to_string([("v", s)])
        .map(|q| q.trim_start_matches("v=").to_string())
        .unwrap_or_default()
}

/// A JSON value as a page shows it: a string as itself, null as nothing, anything else as JSON.
pub(super) fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A time as every page writes one: `2026-11-29 10:30:01`, in UTC.
pub(super) fn when(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A JSON value that may hold a time (an archived row's `created_at`): written as [`when`]
/// writes times, anything else as [`json_text`] writes it.
pub(super) fn json_time(v: &serde_json::Value) -> String {
    v.as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| when(&t.with_timezone(&chrono::Utc)))
        .unwrap_or_else(|| json_text(v))
}

/// A table's header row, a cell a column: a name starting with `#` is a number column
/// (right-aligned), an empty one a column without a heading (a row's boxes or buttons).
pub(super) fn head(columns: &[&str]) -> Markup {
    html! {
        thead { tr {
            @for c in columns {
                @if c.is_empty() {
                    th {}
                } @else if let Some(n) = c.strip_prefix('#') {
                    th scope="col" class="n" { (n) }
                } @else {
                    th scope="col" { (c) }
                }
            }
        } }
    }
}

/// An object's page.
pub(super) fn object_url(id: &str) -> String {
    format!("/ui/objects/{}", enc(id))
}

/// Who is looking: a role, and the token whose hash is the CSRF token of its forms.
pub(super) struct Viewer {
    pub(super) role: Role,
    pub(super) csrf: String,
}

/// The session's token: the first `workdo_token` cookie sent (a browser sends the one of the
/// most specific path first, so a stale or planted one of a wider path does not win).
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_string())
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

/// The page around a body: the header with the sections, the search box and who is signed
/// in; the title as the heading.
pub(super) fn page(title: &str, v: Option<&Viewer>, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · workdo" }
                    link rel="stylesheet" href="/ui/app.css";
                    script src="/ui/app.js" defer {}
                }
                body {
                    header {
                        nav {
                            a.brand href="/" { "workdo" } " "
                            a href="/ui/errors" { "errors" } " "
                            a href="/ui/templates" { "templates" } " "
                            a href="/ui/timings" { "timings" } " "
                            a href="/ui/functions" { "functions" } " "
                            a href="/ui/schedules" { "schedules and alerts" }
                        }
                        (search::form(""))
                        // Under `--open` there is no token to sign out of.
                        @if let Some(v) = v.filter(|v| v.csrf != csrf_of("open")) {
                            form.who method="post" action="/signout" {
                                span { (v.role.as_str()) } " "
                                input type="hidden" name="csrf" value=(v.csrf);
                                button { "Sign out" }
                            }
                        }
                    }
                    main { h1 { (title) } (body) }
                }
            }
        }
        .into_string(),
    )
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
        return Err(forbidden("the form's CSRF token is missing or wrong"));
    }
    // The one access decision the API's routes take too (`api::access::decide`).
    if !allowed(s, &v, Role::Robot).await {
        return Err(forbidden("a viewer token cannot act; robot or admin can"));
    }
    Ok(v)
}

/// [`actor`], allowed an action that needs `need` (prioritizing, a schedule, a rollback, a
/// job's suspension: the admin's), or 403 saying `why`.
pub(super) async fn actor_for(
    s: &AppState,
    headers: &HeaderMap,
    pairs: &[(String, String)],
    need: Role,
    why: &str,
) -> Result<Viewer, Response> {
    let v = actor(s, headers, pairs).await?;
    if !allowed(s, &v, need).await {
        return Err(forbidden(why));
    }
    Ok(v)
}

/// Whether `access::decide` lets the viewer change what needs `need`.
async fn allowed(s: &AppState, v: &Viewer, need: Role) -> bool {
    let caller = crate::api::Caller(v.role, None);
    crate::api::access::decide(s, &caller, crate::api::access::Act::Change(need))
        .await
        .is_ok()
}

/// 403 with a page saying why.
pub(super) fn forbidden(message: &str) -> Response {
    (StatusCode::FORBIDDEN, message.to_string()).into_response()
}

/// A query string a page cannot use: 400, a page naming the parameter and what it takes (not
/// the framework's "Failed to deserialize query string").
pub(super) fn unusable(e: &axum::extract::rejection::QueryRejection) -> Response {
    bad_address(&address_problem(&e.body_text()))
}

/// The framework's sentence about a query string, said as an operator reads it.
fn address_problem(text: &str) -> String {
    let text = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(text);
    if let Some(field) = text
        .strip_prefix("missing field `")
        .and_then(|r| r.split('`').next())
    {
        return format!("this address needs the parameter {field}");
    }
    match text.split_once(": ") {
        Some(("page", _)) => "the parameter page takes a whole number from 1".to_string(),
        Some((field, why)) if !field.contains(' ') => {
            format!("the parameter {field} is not usable: {why}")
        }
        _ => format!("this address cannot be used: {text}"),
    }
}

/// 400: the address (its parameters) is wrong, said on a page.
pub(super) fn bad_address(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        page(
            "Not understood",
            None,
            html! { p.error role="alert" { (message) } p { a href="/" { "Back" } } },
        ),
    )
        .into_response()
}

pub(super) fn failure(message: &str) -> Response {
    (
        StatusCode::CONFLICT,
        page(
            "Not done",
            None,
            html! { p.error { (message) } p { a href="/" { "Back" } } },
        ),
    )
        .into_response()
}

#[cfg(test)]
mod address_tests {
    #[test]
    fn a_bad_parameter_is_named_with_what_it_takes() {
        assert_eq!(
            super::address_problem(
                "Failed to deserialize query string: page: invalid digit found in string"
            ),
            "the parameter page takes a whole number from 1"
        );
        assert_eq!(
            super::address_problem("Failed to deserialize query string: missing field `step`"),
            "this address needs the parameter step"
        );
    }
}

#[derive(Deserialize)]
struct SigninQuery {
    expired: Option<String>,
}

async fn signin_form(Query(q): Query<SigninQuery>) -> Html<String> {
    page(
        "Sign in",
        None,
        html! {
            @if q.expired.is_some() { p.error { "That token is unknown, expired or revoked." } }
            form method="post" action="/signin" {
                label { "Token " input #token name="token" type="password" autocomplete="off" required; }
                " " button #signin { "Sign in" }
            }
            p { "Create one with " code { "workdo tokens create --role viewer" } " (or robot, admin)." }
        },
    )
}

#[derive(Deserialize)]
struct SigninForm {
    token: String,
}

/// The session cookie: HTTP-only, same-site, the whole page's.
fn session(value: String) -> Cookie<'static> {
    Cookie::build((COOKIE, value))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .build()
}

async fn signin(State(s): State<AppState>, jar: CookieJar, Form(f): Form<SigninForm>) -> Response {
    let token = f.token.trim();
    match s.store.token_auth(token).await {
        Ok(Some((_, None))) => {
            (jar.add(session(token.to_string())), Redirect::to("/")).into_response()
        }
        _ => Redirect::to("/signin?expired=1").into_response(),
    }
}

async fn signout(
    State(s): State<AppState>,
    jar: CookieJar,
    headers: HeaderMap,
    body: String,
) -> Response {
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
    (jar.remove(session(String::new())), Redirect::to("/signin")).into_response()
}
