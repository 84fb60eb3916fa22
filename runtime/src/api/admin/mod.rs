//! The admin page: server-rendered HTML on the API's address, with the API's tokens.
//!
//! `/` the overview (template × step × status counts, each a link), `/ui/steps` a facet's steps
//! with retry and skip, `/ui/objects/{id}` an object (properties, documents, workflows with their
//! graphs, a machine's signals as buttons, milestones, history), `/signin` and `/signout`. A
//! sign-in form takes a token and keeps it in an HTTP-only, same-site cookie; `--open` needs
//! none. Viewer tokens see; robot and admin tokens act. Every action is a POST carrying a CSRF
//! token derived from the session's token, and every value on a page is escaped.

use std::fmt::Write as _;

use axum::Form;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use sha2::{Digest, Sha256};

mod objects;
mod reports;

use super::{Access, AppState};
use crate::store::Role;

const COOKIE: &str = "workdo_token";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/signin", get(signin_form).post(signin))
        .route("/signout", post(signout))
        .route("/ui/steps", get(steps))
        .route("/ui/steps/act", post(act))
        .route("/ui/objects/{id}", get(objects::object))
        .route("/ui/objects/{id}/signal", post(objects::signal))
        .route("/ui/errors", get(reports::errors))
        .route("/ui/templates", get(reports::templates))
        .route("/ui/timings", get(reports::timings))
        .route("/ui/schedules", get(reports::schedules_alerts))
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

fn csrf_of(token: &str) -> String {
    hex::encode(Sha256::digest(format!("workdo-csrf:{token}").as_bytes()))
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
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width, initial-scale=1\"><title>{} · workdo</title><style>{STYLE}</style></head><body><header><nav><a href=/ class=brand>workdo</a> <a href=/ui/errors>errors</a> <a href=/ui/templates>templates</a> <a href=/ui/timings>timings</a> <a href=/ui/schedules>schedules and alerts</a></nav> {who}</header><main><h1>{}</h1>{body}</main></body></html>",
        esc(title),
        esc(title)
    ))
}

const STYLE: &str = "
:root{color-scheme:light dark;--fg:#1b1b1b;--bg:#fff;--mute:#666;--line:#ddd;--err:#b00020;--ok:#1b7a2e}
@media (prefers-color-scheme:dark){:root{--fg:#eee;--bg:#151515;--mute:#aaa;--line:#333;--err:#ff6b81;--ok:#6bd68a}}
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:var(--fg);background:var(--bg)}
header{display:flex;justify-content:space-between;align-items:center;padding:.6rem 1rem;border-bottom:1px solid var(--line)}
.brand{font-weight:700;text-decoration:none;color:inherit}
main{padding:1rem;max-width:1280px;margin:auto;overflow-x:auto}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}.error{color:var(--err)}.completed{color:var(--ok)}
pre{white-space:pre-wrap;word-break:break-word;background:rgba(127,127,127,.08);padding:.5rem}
button{font:inherit;padding:.25rem .7rem}a:focus,button:focus,input:focus{outline:2px solid #4a90e2}
.who{display:flex;gap:.5rem;align-items:center}
";

/// The statuses as columns, in the order a step goes through them.
const COLUMNS: [&str; 8] = [
    "waiting",
    "scheduled",
    "ready",
    "started",
    "retrying",
    "error",
    "completed",
    "skipped",
];

async fn overview(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let facets = match s.store.facets(None).await {
        Ok(f) => f,
        Err(e) => return failure(&e.to_string()),
    };
    let depths = s.store.queue_depths().await.unwrap_or_default();
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in &facets {
        let key = (f.template.clone(), f.step.clone());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    let mut body = String::from(
        "<p>Steps of every template by status; a count lists its steps. This page refreshes itself every 5 seconds.</p><table id=facets><thead><tr><th scope=col>template</th><th scope=col>step</th>",
    );
    for c in COLUMNS {
        let _ = write!(body, "<th scope=col class=n>{c}</th>");
    }
    body.push_str("<th scope=col class=n>other</th><th scope=col class=n>oldest ready</th></tr></thead><tbody>");
    for (t, st) in &rows {
        let _ = write!(body, "<tr><td>{}</td><td>{}</td>", esc(t), esc(st));
        for c in COLUMNS {
            let n: i64 = facets
                .iter()
                .filter(|f| &f.template == t && &f.step == st && f.status == c)
                .map(|f| f.count)
                .sum();
            if n == 0 {
                body.push_str("<td class=n></td>");
            } else {
                let _ = write!(
                    body,
                    "<td class=\"n {c}\"><a data-facet=\"{}:{}:{c}\" href=\"/ui/steps?template={}&amp;step={}&amp;status={c}\">{n}</a></td>",
                    esc(t),
                    esc(st),
                    esc(&enc(t)),
                    esc(&enc(st))
                );
            }
        }
        let other: i64 = facets
            .iter()
            .filter(|f| &f.template == t && &f.step == st && !COLUMNS.contains(&f.status.as_str()))
            .map(|f| f.count)
            .sum();
        // How long the oldest ready step of this queue has waited (over its lanes).
        let oldest = depths
            .iter()
            .filter(|d| &d.0 == t && &d.1 == st)
            .map(|d| d.4)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        let _ = write!(
            body,
            "<td class=n>{}</td><td class=n>{}</td></tr>",
            if other > 0 {
                other.to_string()
            } else {
                String::new()
            },
            oldest.map(age).unwrap_or_default()
        );
    }
    body.push_str("</tbody></table><script>setTimeout(()=>{if(!document.activeElement||document.activeElement===document.body)location.reload()},5000)</script>");
    page("Overview", Some(&v), &body).into_response()
}

/// Seconds as a short age: `42 s`, `7 min`, `3 h`, `2 d`.
fn age(secs: f64) -> String {
    match secs {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.0} h", s / 3600.0),
        s => format!("{:.0} d", s / 86_400.0),
    }
}

#[derive(Deserialize)]
struct FacetQuery {
    template: String,
    step: String,
    status: String,
}

async fn steps(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<FacetQuery>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let rows = match s.store.steps_in(&q.template, &q.step, &q.status, 500).await {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    let acts = v.role >= Role::Robot;
    let mut body = format!(
        "<p>{} steps of <b>{}:{}</b> in <b>{}</b> (most recently changed first).</p>",
        rows.len(),
        esc(&q.template),
        esc(&q.step),
        esc(&q.status)
    );
    if acts {
        let _ = write!(
            body,
            "<form method=post action=/ui/steps/act id=act onsubmit=\"const n=this.querySelectorAll('input[name=id]:checked').length;return n>0&&confirm(this.dataset.verb+' '+n+' steps?')\"><input type=hidden name=csrf value=\"{}\"><input type=hidden name=back value=\"{}\">",
            esc(&v.csrf),
            esc(&format!(
                "/ui/steps?template={}&step={}&status={}",
                enc(&q.template),
                enc(&q.step),
                enc(&q.status)
            ))
        );
        body.push_str("<p><label><input type=checkbox id=all onclick=\"for(const b of document.querySelectorAll('input[name=id]'))b.checked=this.checked\"> all</label> <button name=action value=retry id=retry onclick=\"this.form.dataset.verb='Retry'\">Retry chosen</button> <button name=action value=skip id=skip onclick=\"this.form.dataset.verb='Skip'\">Skip chosen</button> <label>priority <input name=priority id=priority type=number value=100 style=width:6em></label> <button name=action value=prioritize id=prioritize onclick=\"this.form.dataset.verb='Prioritize'\">Prioritize chosen</button></p>");
    }
    body.push_str("<table><thead><tr><th></th><th scope=col>object</th><th scope=col>step</th><th scope=col class=n>attempts</th><th scope=col>message</th><th scope=col>changed</th></tr></thead><tbody>");
    for r in &rows {
        let check = if acts {
            format!(
                "<input type=checkbox name=id value={} aria-label=\"choose {}\">",
                r.id,
                esc(&r.object_id)
            )
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr><td>{check}</td><td><a href=\"/ui/objects/{}\">{}</a></td><td>{}</td><td class=n>{}/{}</td><td>{}</td><td>{}</td></tr>",
            esc(&enc(&r.object_id)),
            esc(&r.object_id),
            esc(&r.name),
            r.attempts,
            r.max_attempts,
            esc(r
                .error_message
                .as_deref()
                .or(r.note.as_deref())
                .unwrap_or("")),
            r.updated_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
    body.push_str("</tbody></table>");
    if acts {
        body.push_str("</form>");
    }
    page(
        &format!("{}:{} {}", q.template, q.step, q.status),
        Some(&v),
        &body,
    )
    .into_response()
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
    let ids: Vec<i64> = pairs
        .iter()
        .filter(|(k, _)| k == "id")
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    let who = format!("ui:{}", v.role.as_str());
    // The chosen steps: retry acts on those in error, skip on those unfinished (the same
    // bulk commands as the CLI's, narrowed to the chosen ids).
    let chosen = crate::store::StepFilter {
        ids: Some(ids),
        ..Default::default()
    };
    let done = match field(&pairs, "action") {
        Some("prioritize") => {
            let Some(priority) =
                field(&pairs, "priority").and_then(|p| p.trim().parse::<i32>().ok())
            else {
                return failure("the priority is not a whole number");
            };
            s.store.steps_prioritize(&chosen, priority, &who).await
        }
        Some("skip") => s.store.steps_skip(&chosen, &who).await,
        _ => s.store.steps_retry(&chosen, &who).await,
    };
    if let Err(e) = done {
        return failure(&e.to_string());
    }
    // Back to the list only when it is one of ours (no open redirect).
    let back = field(&pairs, "back")
        .filter(|b| b.starts_with("/ui/") && !b.starts_with("//"))
        .unwrap_or("/");
    Redirect::to(back).into_response()
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
