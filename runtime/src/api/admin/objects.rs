//! An object's page, and the signals its machine jobs accept.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::documents::pretty_xml;
use super::history::happened;
use super::{
    actor, draw, enc, failure, field, form_pairs, head, object_url, page, unusable, viewer,
};
use crate::api::AppState;
use crate::store::{Role, Store};

/// `?after=N`: the history from event N on, oldest first, a page at a time.
#[derive(Deserialize)]
pub(super) struct History {
    after: Option<i64>,
    /// Only events of this kind (comma-separated kinds allowed).
    kind: Option<String>,
    /// What a step row's action did (the form comes back here).
    done: Option<String>,
    /// The history's page of events older than this one, newest first.
    before: Option<i64>,
}

/// Events on one page of an object's history.
const HISTORY_PAGE: i64 = 50;

pub(super) async fn object(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    h: Result<Query<History>, QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (after, before, kinds, done) = match h {
        Ok(Query(h)) => (
            h.after,
            h.before,
            h.kind
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>(),
            h.done.filter(|d| !d.trim().is_empty()),
        ),
        Err(e) => return unusable(&e),
    };
    let mut view = match s.store.object_view(&id, HISTORY_PAGE).await {
        Ok(view) => view,
        Err(e) => return failure(&e.to_string()),
    };
    // Paging forward from `after` (oldest first, "From the beginning"); otherwise the newest
    // first: the latest page, or the page older than `before`, narrowed to kinds if asked.
    if let Some(after) = after {
        view.events = match s
            .store
            .events(Some(&view.id), None, after.max(0), HISTORY_PAGE, &kinds)
            .await
        {
            Ok(events) => events,
            Err(e) => return failure(&e.to_string()),
        };
    } else if before.is_some() || !kinds.is_empty() {
        view.events = match s
            .store
            .events_newest_first(&view.id, before, HISTORY_PAGE, &kinds)
            .await
        {
            Ok(events) => events,
            Err(e) => return failure(&e.to_string()),
        };
    } else {
        view.events.reverse();
    }
    // Everything the page needs from the database, before it is written.
    let mut documents = Vec::with_capacity(view.documents.len());
    for name in &view.documents {
        let text = document_text(&s.store, &view.id, name).await;
        documents.push((name.clone(), pretty_xml(&text)));
    }
    let mut machines = Vec::with_capacity(view.workflows.len());
    for w in &view.workflows {
        let mut drawn = None;
        if w.machine.is_some()
            && let Ok(t) = s.store.template_by_id(w.workflow.template_id).await
            && let Some(spec) = t.spec.machine
        {
            // The path the job took: its transitions, from its history.
            let taken: Vec<(String, String)> = s
                .store
                .events(
                    None,
                    Some(w.workflow.id),
                    0,
                    1000,
                    &["state_entered".to_string()],
                )
                .await
                .unwrap_or_default()
                .iter()
                .filter_map(|e| {
                    let d = e.detail.as_ref()?;
                    Some((
                        d["from"].as_str()?.to_string(),
                        d["state"].as_str()?.to_string(),
                    ))
                })
                .collect();
            drawn = Some((spec, taken));
        }
        machines.push(drawn);
    }
    let archived = super::archive::section(&s.store, &view.id).await;
    let kinds_here = s.store.event_kinds(&view.id).await.unwrap_or_default();
    let here = object_url(&view.id);
    let full = view.events.len() as i64 == HISTORY_PAGE;
    let kq = if kinds.is_empty() {
        String::new()
    } else {
        format!("&kind={}", enc(&kinds.join(",")))
    };
    // The latest page, narrowed as this one is.
    let newest = if kinds.is_empty() {
        here.clone()
    } else {
        format!("{here}?kind={}", enc(&kinds.join(",")))
    };
    let now = chrono::Utc::now();
    let body = html! {
        @if let Some(d) = &done { p.done role="status" { (d) } }
        p { "version " (view.version) }
        h2 { "Properties" }
        pre #properties { (serde_json::to_string_pretty(&view.properties).unwrap_or_default()) }
        @if !documents.is_empty() {
            h2 { "Documents" }
            @for (name, text) in &documents {
                h3 { (name) }
                pre.document { (text) }
            }
        }
        @for (w, drawn) in view.workflows.iter().zip(&machines) {
            section.workflow id={ "wf-" (w.workflow.id) } data-live {
                h2 { (w.workflow.template) " (workflow " a href={ "/ui/workflows/" (w.workflow.id) } { (w.workflow.id) } ", "
                    @if w.machine.as_ref().is_some_and(|m| m.cancelled) { "cancelled with its parent" } @else { (w.workflow.status) } ")" }
                @if let Some(m) = &w.machine {
                    p { "state " b.state { (m.state) } }
                    (super::machine::details(m))
                    // Suspend a running job, resume a suspended one (admins, as on the API).
                    @if v.role >= Role::Admin && w.workflow.status == "active" {
                        form.inline method="post" action={ (here) "/suspend" } {
                            input type="hidden" name="csrf" value=(v.csrf);
                            input type="hidden" name="workflow" value=(w.workflow.id);
                            @if m.suspended {
                                button.small name="action" value="resume" { "Resume" }
                            } @else {
                                button.small name="action" value="suspend" { "Suspend" }
                            }
                        }
                    }
                    @if v.role >= Role::Robot && !m.accepts.is_empty() {
                        form method="post" action={ (here) "/signal" } {
                            input type="hidden" name="csrf" value=(v.csrf);
                            input type="hidden" name="workflow" value=(w.workflow.id);
                            @for a in &m.accepts {
                                button name="signal" value=(a) { (a) }
                                " "
                            }
                        }
                    }
                    @if let Some((spec, taken)) = drawn {
                        (draw::machine(&format!("machine-{}", w.workflow.id), spec, Some(&m.state), taken))
                        details { summary { "as Mermaid" } pre.mermaid { (crate::graph::machine_mermaid(spec, Some(&m.state))) } }
                    }
                }
                @if !w.steps.is_empty() {
                    table {
                        @if w.functions.is_empty() {
                            (head(&["step", "status", "#attempts", "note / error", ""]))
                        } @else {
                            (head(&["step", "status", "#attempts", "note / error", "", "function"]))
                        }
                        tbody {
                            @for st in &w.steps {
                                tr {
                                    td { (st.name) }
                                    td class=(st.status) { (st.status) }
                                    td.n { (st.attempts) "/" (st.max_attempts) }
                                    td { (crate::output::step_remark(&st.status, st.error_message.as_deref(), st.note.as_deref(), st.run_at, now)) }
                                    td.acts { (row_actions(&v, &here, st)) }
                                    @if !w.functions.is_empty() {
                                        td.function {
                                            @if let Some(f) = w.functions.iter().find(|f| f.step == st.name) {
                                                a href="/ui/functions" { (f.name) }
                                                @if let (Some(ver), Some(sha)) = (f.version, &f.sha256) {
                                                    " version " (ver) " " code title=(sha) { (sha.get(..12).unwrap_or_default()) }
                                                } @else { " (not deployed)" }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    (draw::workflow(&format!("workflow-{}", w.workflow.id), &w.steps))
                    details { summary { "as Mermaid" } pre.mermaid { (crate::graph::mermaid(&w.steps)) } }
                }
                // Dynamic dispatch: why each bricklet was activated.
                @let lines = crate::model::dispatch::activation_lines(&w.workflow.dispatch);
                @if !lines.is_empty() {
                    h3 { "Why its bricklets were activated" }
                    ul.activation {
                        @for (depth, line) in &lines {
                            li class=[(*depth > 0).then_some("rule")] { (line) }
                        }
                    }
                }
            }
        }
        h2 { "Milestones" }
        ul #milestones data-live {
            @for m in &view.milestones {
                li { (m.at.format("%Y-%m-%d %H:%M:%S")) " " (m.name) " (version " (m.version) ")" }
            }
        }
        (archived)
        h2 { "History" }
        form.filters method="get" action=(here) aria-label="history filter" {
            label {
                "kind"
                select #kind name="kind" {
                    option value="" { "every kind" }
                    @for k in &kinds_here { option selected[kinds.contains(k)] { (k) } }
                }
            }
            button { "Show" }
        }
        @match (after, view.events.last()) {
            (None, Some(oldest)) if full => {
                p {
                    @if before.is_some() { a href=(newest) { "Newest" } " · " } @else { "The latest " (HISTORY_PAGE) " events, newest first. " }
                    a rel="next" href={ (here) "?before=" (oldest.id) (kq) } { "Older " (HISTORY_PAGE) }
                    " · " a href={ (here) "?after=0" (kq) } { "From the beginning" }
                }
            }
            (None, _) if before.is_some() => { p { a href=(newest) { "Newest" } } }
            (Some(_), Some(last)) if full => {
                p { a href=(here) { "Latest" } " · " a rel="next" href={ (here) "?after=" (last.id) (kq) } { "Next " (HISTORY_PAGE) } }
            }
            (Some(_), _) => { p { a href=(here) { "Latest" } } }
            _ => {}
        }
        table #history data-live {
            (head(&["when", "kind", "what happened"]))
            tbody {
                @for e in &view.events {
                    tr data-kind=(e.kind) {
                        td { (super::when(&e.at)) }
                        td { span.kind { (e.kind) } }
                        td { (happened(e)) }
                    }
                }
            }
        }
    };
    page(&view.id, Some(&v), body).into_response()
}

/// A step row's own actions, where the operator looks at it: Retry on a failed step, Skip
/// on an unfinished one (the bulk actions' form, for this one step, coming back here).
fn row_actions(v: &super::Viewer, here: &str, st: &crate::store::StepRow) -> maud::Markup {
    // What `retry` takes: a step in error (a `retrying` one runs again by itself).
    let failed = matches!(st.status.as_str(), "error" | "exception");
    let unfinished = !matches!(st.status.as_str(), "completed" | "skipped");
    html! {
        @if v.role >= Role::Robot && unfinished {
            form.inline method="post" action="/ui/steps/act" {
                input type="hidden" name="csrf" value=(v.csrf);
                input type="hidden" name="id" value=(st.id);
                input type="hidden" name="back" value=(here);
                @if failed {
                    button.small name="action" value="retry" { "Retry" }
                    " "
                }
                button.small name="action" value="skip" { "Skip" }
            }
        }
    }
}

async fn document_text(store: &Store, object: &str, name: &str) -> String {
    store
        .document(object, name)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

pub(super) async fn signal(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: String,
) -> Response {
    let pairs = form_pairs(&body);
    let v = match actor(&s, &headers, &pairs).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let workflow: i64 = field(&pairs, "workflow")
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    let name = field(&pairs, "signal").unwrap_or_default().to_string();
    // The one access decision the API takes too.
    let caller = crate::api::Caller(v.role, None);
    let act = crate::api::access::Act::Signal {
        job: workflow,
        signal: &name,
    };
    if crate::api::access::decide(&s, &caller, act).await.is_err() {
        return (StatusCode::FORBIDDEN, "this token may not send that signal").into_response();
    }
    let who = format!("ui:{}", v.role.as_str());
    if let Err(e) = s
        .store
        .machine_signal(workflow, &name, &serde_json::json!({}), &who)
        .await
    {
        return failure(&e.to_string());
    }
    Redirect::to(&object_url(&id)).into_response()
}

/// Suspend or resume a machine job from its object's page: the API's rule (admins), decided by
/// `access::decide`.
pub(super) async fn suspend(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: String,
) -> Response {
    let pairs = form_pairs(&body);
    let why = "suspending a job needs the admin role";
    let v = match super::actor_for(&s, &headers, &pairs, Role::Admin, why).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let workflow: i64 = field(&pairs, "workflow")
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    let suspend = field(&pairs, "action") != Some("resume");
    let who = format!("ui:{}", v.role.as_str());
    match s.store.machine_suspend(workflow, suspend, &who).await {
        Ok(_) => {
            let said = if suspend {
                format!("Suspended workflow {workflow}: its signals wait until it is resumed.")
            } else {
                format!("Resumed workflow {workflow}.")
            };
            Redirect::to(&format!("{}?done={}", object_url(&id), super::enc(&said))).into_response()
        }
        Err(e) => failure(&e.to_string()),
    }
}
