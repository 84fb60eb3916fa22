//! A state-machine job on its object's page: its variables, pending alarms, signals waiting in
//! its inbox, its parent and its children, each linked; and `/ui/workflows/{id}`, which opens
//! any workflow on its object's page (a parent or child named by id).

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::Value;

use super::{failure, json_text as text, object_url, viewer};
use crate::api::AppState;
use crate::store::MachineView;

/// When an alarm is due, as a person reads it: `2026-11-26 05:50:06 UTC (in 1 h 59 min)`.
fn due(v: &Value) -> String {
    let Some(at) = v
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
    else {
        return text(v);
    };
    let at = at.with_timezone(&chrono::Utc);
    let secs = (at - chrono::Utc::now()).num_milliseconds() as f64 / 1000.0;
    let when = if secs >= 0.0 {
        format!("in {}", crate::output::human_duration(secs))
    } else {
        format!("{} ago", crate::output::human_duration(-secs))
    };
    format!("{} ({when})", at.format("%Y-%m-%d %H:%M:%S UTC"))
}

/// The job's details below its state and signal buttons.
pub(super) fn details(m: &MachineView) -> Markup {
    html! {
        @if m.suspended { p.suspended { "suspended: it takes no signals until resumed" } }
        @match &m.variables {
            Value::Object(vars) if !vars.is_empty() => {
                h3 { "Variables" }
                table.variables { tbody {
                    @for (k, v) in vars {
                        tr { th scope="row" { (k) } td { code { (v.to_string()) } } }
                    }
                } }
            }
            _ => { p.mute { "no variables" } }
        }
        @if !m.alarms.is_empty() {
            h3 { "Alarms pending" }
            ul.alarms {
                @for a in &m.alarms {
                    li { b { (text(&a["signal"])) } " due " (due(&a["due_at"])) " (set in " (text(&a["state"])) ")" }
                }
            }
        }
        @if !m.inbox.is_empty() {
            h3 { "Signals waiting" }
            ul.inbox {
                @for i in &m.inbox {
                    li { b { (text(&i["signal"])) } " from " (text(&i["actor"])) " at " (text(&i["at"])) }
                }
            }
        }
        @if let Some(p) = m.parent {
            p { "parent: " a.parent href={ "/ui/workflows/" (p) } { "workflow " (p) } }
        }
        @if !m.children.is_empty() {
            h3 { "Children" }
            ul.children {
                @for c in &m.children {
                    @let object = text(&c["object"]);
                    li {
                        a href={ (object_url(&object)) "#wf-" (text(&c["workflow_id"])) } { (text(&c["template"])) " on " (object) }
                        " (workflow " (text(&c["workflow_id"])) ", " (text(&c["status"])) ")"
                    }
                }
            }
        }
    }
}

/// `/ui/workflows/{id}`: the workflow on its object's page.
pub(super) async fn workflow(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(r) = viewer(&s, &headers).await {
        return r;
    }
    let Ok(id) = id.parse::<i64>() else {
        return failure(&format!("workflow id {id:?} is not a number"));
    };
    match s.store.workflow_object(id).await {
        Ok(Some(object)) => {
            Redirect::to(&format!("{}#wf-{id}", object_url(&object))).into_response()
        }
        Ok(None) => failure(&format!("no workflow {id} (it may have been archived)")),
        Err(e) => failure(&e.to_string()),
    }
}
