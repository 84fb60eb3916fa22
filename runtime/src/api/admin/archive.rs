//! Archived workflows on the page: the object's page lists them, and `/ui/archive/{id}` shows
//! one as it was when archived (its steps and its history), read from its archive record.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde_json::Value;

use super::{failure, head, json_text as text, json_time, object_url, page, viewer};
use crate::api::AppState;
use crate::store::{ArchivedRow, Store};

/// The object page's section listing its archived workflows (empty when it has none).
pub(super) async fn section(store: &Store, object: &str) -> Markup {
    let rows: Vec<ArchivedRow> = store.archived_of(object, 100).await.unwrap_or_default();
    html! {
        @if !rows.is_empty() {
            section #archived {
                h2 { "Archived workflows (" (rows.len()) ")" }
                table {
                    (head(&["workflow", "template", "completed", "archived"]))
                    tbody {
                        @for r in &rows {
                            tr {
                                td { a href={ "/ui/archive/" (r.workflow_id) } { (r.workflow_id) } }
                                td { (r.template) }
                                td { (r.completed_at.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_default()) }
                                td { (r.archived_at.format("%Y-%m-%d %H:%M:%S")) }
                            }
                        }
                    }
                }
            }
        }
    }
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
    let w = &record["workflow"];
    let steps: Vec<Value> = record["steps"].as_array().cloned().unwrap_or_default();
    let events: Vec<Value> = record["events"].as_array().cloned().unwrap_or_default();
    let body = html! {
        p {
            "Archived workflow " (id) " of " a href=(object_url(&object)) { (object) } ": "
            (text(&w["template"])) " version " (text(&w["version"])) ", " (text(&w["status"]))
             " (started " (json_time(&w["created_at"])) ", completed " (json_time(&w["completed_at"])) ")."
        }
        h2 { "Steps" }
        table #steps {
            (head(&["step", "status", "#attempts", "took", "note / error"]))
            tbody {
                @for st in &steps {
                    @let status = text(&st["status"]);
                    tr {
                        td { (text(&st["name"])) }
                        td class=(status) { (status) }
                        td.n { (text(&st["attempts"])) "/" (text(&st["max_attempts"])) }
                        td { (st["elapsed"].as_f64().map(crate::output::human_duration).unwrap_or_default()) }
                        td { (st["error_message"].as_str().or(st["note"].as_str()).unwrap_or("")) }
                    }
                }
            }
        }
        h2 { "History" }
        table #history {
            tbody {
                @for e in &events {
                    tr {
                        td { (json_time(&e["at"])) }
                        td { span.kind { (text(&e["kind"])) } }
                        td {
                            @match (e["template"].as_str(), e["step"].as_str()) {
                                (Some(t), Some(st)) => { (t) ":" (st) }
                                (Some(t), None) => { (t) }
                                _ => {}
                            }
                            @if let Some(st) = e["status"].as_str() { " → " (st) }
                        }
                    }
                }
            }
        }
    };
    page(&format!("Archived workflow {id}"), Some(&v), body).into_response()
}
