//! A state-machine job on its object's page: its variables, pending alarms, signals waiting in
//! its inbox, its parent and its children, each linked; and `/ui/workflows/{id}`, which opens
//! any workflow on its object's page (a parent or child named by id).

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::{enc, esc, failure, viewer};
use crate::api::AppState;
use crate::store::MachineView;

/// The job's details below its state and signal buttons.
pub(super) fn details(m: &MachineView) -> String {
    let mut out = String::new();
    if m.suspended {
        out.push_str("<p class=suspended>suspended: it takes no signals until resumed</p>");
    }
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    match &m.variables {
        Value::Object(vars) if !vars.is_empty() => {
            out.push_str("<h3>Variables</h3><table class=variables><tbody>");
            for (k, v) in vars {
                let _ = write!(
                    out,
                    "<tr><th scope=row>{}</th><td><code>{}</code></td></tr>",
                    esc(k),
                    esc(&v.to_string())
                );
            }
            out.push_str("</tbody></table>");
        }
        _ => out.push_str("<p class=mute>no variables</p>"),
    }
    if !m.alarms.is_empty() {
        out.push_str("<h3>Alarms pending</h3><ul class=alarms>");
        for a in &m.alarms {
            let _ = write!(
                out,
                "<li><b>{}</b> due {} (set in {})</li>",
                esc(&text(&a["signal"])),
                esc(&text(&a["due_at"])),
                esc(&text(&a["state"]))
            );
        }
        out.push_str("</ul>");
    }
    if !m.inbox.is_empty() {
        out.push_str("<h3>Signals waiting</h3><ul class=inbox>");
        for i in &m.inbox {
            let _ = write!(
                out,
                "<li><b>{}</b> from {} at {}</li>",
                esc(&text(&i["signal"])),
                esc(&text(&i["actor"])),
                esc(&text(&i["at"]))
            );
        }
        out.push_str("</ul>");
    }
    if let Some(p) = m.parent {
        let _ = write!(
            out,
            "<p>parent: <a class=parent href=\"/ui/workflows/{p}\">workflow {p}</a></p>"
        );
    }
    if !m.children.is_empty() {
        out.push_str("<h3>Children</h3><ul class=children>");
        for c in &m.children {
            let object = text(&c["object"]);
            let _ = write!(
                out,
                "<li><a href=\"/ui/objects/{}#wf-{}\">{} on {}</a> (workflow {}, {})</li>",
                esc(&enc(&object)),
                esc(&text(&c["workflow_id"])),
                esc(&text(&c["template"])),
                esc(&object),
                esc(&text(&c["workflow_id"])),
                esc(&text(&c["status"]))
            );
        }
        out.push_str("</ul>");
    }
    out
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
            Redirect::to(&format!("/ui/objects/{}#wf-{id}", enc(&object))).into_response()
        }
        Ok(None) => failure(&format!("no workflow {id} (it may have been archived)")),
        Err(e) => failure(&e.to_string()),
    }
}
