//! The Functions page: each deployed function with its versions (hash, size, who deployed it,
//! when, note), the current one marked, how many unfinished workflows pin each, and, for an
//! admin, a rollback button per version.

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::reports::Done;
use super::{enc, failure, head, page, unusable, viewer};
use crate::api::AppState;
use crate::store::Role;

pub(super) async fn functions(
    State(s): State<AppState>,
    headers: HeaderMap,
    d: Result<Query<Done>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let done = match d {
        Ok(Query(d)) => d.said(),
        Err(e) => return unusable(&e),
    };
    let all = match s.store.function_list().await {
        Ok(f) => f,
        Err(e) => return failure(&e.to_string()),
    };
    let admin = v.role >= Role::Admin;
    let body = html! {
        @if let Some(done) = done { p.done role="status" { (done) } }
        @if all.is_empty() {
            p { "No function is deployed. " code { "workdo functions deploy NAME PATH" } " stores one; templates name it with "
                code { "function: { deployed: NAME }" } "." }
        }
        @for f in &all {
            section.function data-function=(f.name) {
                h2 { (f.name) " " small { "current: version " (f.current) } }
                table {
                    (head(&["version", "sha256", "#bytes", "kind", "#pinned", "deployed by", "when", "note", ""]))
                    tbody {
                        @for ver in &f.versions {
                            tr.current[ver.current] data-version=(ver.version) {
                                td { (ver.version) @if ver.current { " (current)" } }
                                td { code title=(ver.sha256) { (ver.sha256.get(..12).unwrap_or_default()) } }
                                td.n { (super::overview::count(ver.size)) }
                                td { @match (&ver.entry, ver.archive) {
                                    (Some(e), true) => { "folder, runs " code { (e) } },
                                    _ => "file",
                                } }
                                td.n { (super::overview::count(ver.pinned)) }
                                td { (ver.deployed_by) }
                                td { (ver.deployed_at.format("%Y-%m-%d %H:%M:%S")) }
                                td { (ver.note.as_deref().unwrap_or("")) }
                                td {
                                    @if admin && !ver.current {
                                        form.inline method="post" action="/ui/functions/rollback"
                                            data-confirm={ "Make " (f.name) " version " (ver.version) " current for workflows started from now on?" } {
                                            input type="hidden" name="csrf" value=(v.csrf);
                                            input type="hidden" name="name" value=(f.name);
                                            input type="hidden" name="to" value=(ver.version);
                                            button.small { "Roll back to " (ver.version) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page("Functions", Some(&v), body).into_response()
}

/// Roll a function back from the Functions page (the admin's).
pub(super) async fn rollback(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let pairs = super::form_pairs(&body);
    let need = "rolling back a function needs the admin role";
    let who = match super::actor_for(&s, &headers, &pairs, Role::Admin, need).await {
        Err(r) => return r,
        Ok(v) => format!("ui:{}", v.role.as_str()),
    };
    let Some(name) = super::field(&pairs, "name") else {
        return failure("the form names no function");
    };
    let Some(to) = super::field(&pairs, "to").and_then(|t| t.trim().parse::<i32>().ok()) else {
        return failure("the form's version is not a whole number");
    };
    match s.store.function_rollback(name, to, &who).await {
        Ok(from) => Redirect::to(&format!(
            "/ui/functions?done={}",
            enc(&format!("{name}: version {to} is current again (was {from}); workflows started from now on run it."))
        ))
        .into_response(),
        Err(e) => failure(&e.to_string()),
    }
}
