//! An object's page, and the signals its machine jobs accept.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::{actor, draw, enc, esc, failure, field, form_pairs, page, viewer};
use crate::api::AppState;
use crate::store::{Role, Store};

pub(super) async fn object(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let view = match s.store.object_view(&id, 50).await {
        Ok(view) => view,
        Err(e) => return failure(&e.to_string()),
    };
    let mut body = format!(
        "<p>version {}</p><h2>Properties</h2><pre id=properties>{}</pre>",
        view.version,
        esc(&serde_json::to_string_pretty(&view.properties).unwrap_or_default())
    );
    if !view.documents.is_empty() {
        body.push_str("<h2>Documents</h2>");
        for name in &view.documents {
            let text = document_text(&s.store, &view.id, name).await;
            let _ = write!(body, "<h3>{}</h3><pre>{}</pre>", esc(name), esc(&text));
        }
    }
    for w in &view.workflows {
        let _ = write!(
            body,
            "<section class=workflow><h2>{} (workflow {}, {})</h2>",
            esc(&w.workflow.template),
            w.workflow.id,
            esc(&w.workflow.status)
        );
        if let Some(m) = &w.machine {
            let _ = write!(body, "<p>state <b class=state>{}</b></p>", esc(&m.state));
            if v.role >= Role::Robot && !m.accepts.is_empty() {
                let _ = write!(
                    body,
                    "<form method=post action=\"/ui/objects/{}/signal\"><input type=hidden name=csrf value=\"{}\"><input type=hidden name=workflow value={}>",
                    esc(&enc(&view.id)),
                    esc(&v.csrf),
                    w.workflow.id
                );
                for a in &m.accepts {
                    let _ = write!(
                        body,
                        "<button name=signal value=\"{}\">{}</button> ",
                        esc(a),
                        esc(a)
                    );
                }
                body.push_str("</form>");
            }
            if let Ok(t) = s.store.template_by_id(w.workflow.template_id).await
                && let Some(spec) = &t.spec.machine
            {
                let _ = write!(
                    body,
                    "{}<details><summary>as Mermaid</summary><pre class=mermaid>{}</pre></details>",
                    draw::machine(&format!("machine-{}", w.workflow.id), spec, Some(&m.state)),
                    esc(&crate::graph::machine_mermaid(spec, Some(&m.state)))
                );
            }
        }
        if !w.steps.is_empty() {
            body.push_str("<table><thead><tr><th scope=col>step</th><th scope=col>status</th><th scope=col class=n>attempts</th><th scope=col>note / error</th></tr></thead><tbody>");
            for st in &w.steps {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td class=\"{}\">{}</td><td class=n>{}/{}</td><td>{}</td></tr>",
                    esc(&st.name),
                    esc(&st.status),
                    esc(&st.status),
                    st.attempts,
                    st.max_attempts,
                    esc(st
                        .error_message
                        .as_deref()
                        .or(st.note.as_deref())
                        .unwrap_or(""))
                );
            }
            body.push_str("</tbody></table>");
            let _ = write!(
                body,
                "{}<details><summary>as Mermaid</summary><pre class=mermaid>{}</pre></details>",
                draw::workflow(&format!("workflow-{}", w.workflow.id), &w.steps),
                esc(&crate::graph::mermaid(&w.steps))
            );
        }
        body.push_str("</section>");
    }
    body.push_str("<h2>Milestones</h2><ul>");
    for m in &view.milestones {
        let _ = write!(
            body,
            "<li>{} {} (version {})</li>",
            m.at.format("%Y-%m-%d %H:%M:%S"),
            esc(&m.name),
            m.version
        );
    }
    body.push_str("</ul><h2>History</h2><table id=history><tbody>");
    for e in &view.events {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            esc(&e.kind),
            esc(&format!(
                "{}:{}",
                e.template.as_deref().unwrap_or(""),
                e.step.as_deref().unwrap_or("")
            )),
            esc(e.status.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</tbody></table>");
    page(&view.id, Some(&v), &body).into_response()
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
    // The machine's access rules, as over the API.
    let allowed = matches!(
        s.store.machine_access(workflow).await,
        Ok(Some((_, access))) if access.may_signal(v.role.as_str(), &name)
    );
    if !allowed {
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
    Redirect::to(&format!("/ui/objects/{}", enc(&id))).into_response()
}
