//! Archived workflows on the page: the object's page lists them, and `/ui/archive/{id}` shows
//! one as it was when archived (its steps and its history), read from its archive record.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{enc, esc, failure, page, viewer};
use crate::api::AppState;
use crate::store::{ArchivedRow, Store};

/// The object page's section listing its archived workflows (empty when it has none).
pub(super) async fn section(store: &Store, object: &str) -> String {
    let rows: Vec<ArchivedRow> = store.archived_of(object, 100).await.unwrap_or_default();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<section id=archived><h2>Archived workflows ({})</h2><table><thead><tr><th scope=col>workflow</th><th scope=col>template</th><th scope=col>completed</th><th scope=col>archived</th></tr></thead><tbody>",
        rows.len()
    );
    for r in &rows {
        let _ = write!(
            out,
            "<tr><td><a href=\"/ui/archive/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.workflow_id,
            r.workflow_id,
            esc(&r.template),
            r.completed_at
                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default(),
            r.archived_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
    out.push_str("</tbody></table></section>");
    out
}

/// `/ui/archive/{id}`: an archived workflow, its steps and its history.
pub(super) async fn workflow(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Ok(id) = id.parse::<i64>() else {
        return failure(&format!("workflow id {id:?} is not a number"));
    };
    let (object, record) = match s.store.archived(id).await {
        Ok(Some(found)) => found,
        Ok(None) => return failure(&format!("no archived workflow {id}")),
        Err(e) => return failure(&e.to_string()),
    };
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let w = &record["workflow"];
    let mut body = format!(
        "<p>Archived workflow {id} of <a href=\"/ui/objects/{}\">{}</a>: {} version {}, {} (started {}, completed {}).</p>",
        esc(&enc(&object)),
        esc(&object),
        esc(&text(&w["template"])),
        esc(&text(&w["version"])),
        esc(&text(&w["status"])),
        esc(&text(&w["created_at"])),
        esc(&text(&w["completed_at"]))
    );
    body.push_str("<h2>Steps</h2><table id=steps><thead><tr><th scope=col>step</th><th scope=col>status</th><th scope=col class=n>attempts</th><th scope=col>took</th><th scope=col>note / error</th></tr></thead><tbody>");
    for st in record["steps"].as_array().into_iter().flatten() {
        let status = text(&st["status"]);
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"{}\">{}</td><td class=n>{}/{}</td><td>{}</td><td>{}</td></tr>",
            esc(&text(&st["name"])),
            esc(&status),
            esc(&status),
            esc(&text(&st["attempts"])),
            esc(&text(&st["max_attempts"])),
            st["elapsed"]
                .as_f64()
                .map(crate::output::human_duration)
                .unwrap_or_default(),
            esc(st["error_message"]
                .as_str()
                .or(st["note"].as_str())
                .unwrap_or(""))
        );
    }
    body.push_str("</tbody></table><h2>History</h2><table id=history><tbody>");
    for e in record["events"].as_array().into_iter().flatten() {
        let place = match (e["template"].as_str(), e["step"].as_str()) {
            (Some(t), Some(st)) => format!("{t}:{st}"),
            (Some(t), None) => t.to_string(),
            _ => String::new(),
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td><span class=kind>{}</span></td><td>{} {}</td></tr>",
            esc(&text(&e["at"])),
            esc(&text(&e["kind"])),
            esc(&place),
            esc(&e["status"]
                .as_str()
                .map(|s| format!("→ {s}"))
                .unwrap_or_default())
        );
    }
    body.push_str("</tbody></table>");
    page(&format!("Archived workflow {id}"), Some(&v), &body).into_response()
}
