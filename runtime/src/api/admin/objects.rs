//! An object's page, and the signals its machine jobs accept.

use std::fmt::Write as _;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{actor, draw, enc, esc, failure, field, form_pairs, page, unusable, viewer};
use crate::api::AppState;
use crate::store::{Role, Store};

/// `?after=N`: the history from event N on, oldest first, a page at a time.
#[derive(Deserialize)]
pub(super) struct History {
    after: Option<i64>,
    /// Only events of this kind (comma-separated kinds allowed).
    kind: Option<String>,
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
    let (after, kinds) = match h {
        Ok(Query(h)) => (
            h.after,
            h.kind
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>(),
        ),
        Err(e) => return unusable(&e),
    };
    let mut view = match s.store.object_view(&id, HISTORY_PAGE).await {
        Ok(view) => view,
        Err(e) => return failure(&e.to_string()),
    };
    // Paging forward from `after` (from the start when narrowed to kinds); without it, the
    // latest page.
    let after = if kinds.is_empty() {
        after
    } else {
        Some(after.unwrap_or(0))
    };
    if let Some(after) = after {
        view.events = match s
            .store
            .events(Some(&view.id), None, after.max(0), HISTORY_PAGE, &kinds)
            .await
        {
            Ok(events) => events,
            Err(e) => return failure(&e.to_string()),
        };
    }
    let mut body = format!(
        "<p>version {}</p><h2>Properties</h2><pre id=properties>{}</pre>",
        view.version,
        esc(&serde_json::to_string_pretty(&view.properties).unwrap_or_default())
    );
    if !view.documents.is_empty() {
        body.push_str("<h2>Documents</h2>");
        for name in &view.documents {
            let text = document_text(&s.store, &view.id, name).await;
            let _ = write!(
                body,
                "<h3>{}</h3><pre class=document>{}</pre>",
                esc(name),
                esc(&pretty_xml(&text))
            );
        }
    }
    for w in &view.workflows {
        let _ = write!(
            body,
            "<section class=workflow id=\"wf-{}\" data-live><h2>{} (workflow {}, {})</h2>",
            w.workflow.id,
            esc(&w.workflow.template),
            w.workflow.id,
            esc(&w.workflow.status)
        );
        if let Some(m) = &w.machine {
            let _ = write!(body, "<p>state <b class=state>{}</b></p>", esc(&m.state));
            body.push_str(&super::machine::details(m));
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
                let _ = write!(
                    body,
                    "{}<details><summary>as Mermaid</summary><pre class=mermaid>{}</pre></details>",
                    draw::machine(
                        &format!("machine-{}", w.workflow.id),
                        spec,
                        Some(&m.state),
                        &taken
                    ),
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
                    esc(&crate::output::step_remark(
                        &st.status,
                        st.error_message.as_deref(),
                        st.note.as_deref(),
                        st.run_at,
                        chrono::Utc::now()
                    ))
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
        // Dynamic dispatch: why each bricklet was activated.
        let lines = crate::model::dispatch::activation_lines(&w.workflow.dispatch);
        if !lines.is_empty() {
            body.push_str("<h3>Why its bricklets were activated</h3><ul class=activation>");
            for (depth, line) in &lines {
                let _ = write!(
                    body,
                    "<li{}>{}</li>",
                    if *depth > 0 { " class=rule" } else { "" },
                    esc(line)
                );
            }
            body.push_str("</ul>");
        }
        body.push_str("</section>");
    }
    body.push_str("<h2>Milestones</h2><ul id=milestones data-live>");
    for m in &view.milestones {
        let _ = write!(
            body,
            "<li>{} {} (version {})</li>",
            m.at.format("%Y-%m-%d %H:%M:%S"),
            esc(&m.name),
            m.version
        );
    }
    let archived = super::archive::section(&s.store, &view.id).await;
    let here = format!("/ui/objects/{}", enc(&view.id));
    let full = view.events.len() as i64 == HISTORY_PAGE;
    let kq = if kinds.is_empty() {
        String::new()
    } else {
        format!("&kind={}", enc(&kinds.join(",")))
    };
    let nav = match (after, view.events.last()) {
        (None, _) if full => format!(
            "<p>The latest {HISTORY_PAGE} events. <a href=\"{}?after=0{kq}\">From the beginning</a></p>",
            esc(&here)
        ),
        (Some(_), Some(last)) if full => format!(
            "<p><a href=\"{}\">Latest</a> · <a href=\"{}?after={}{}\" rel=next>Next {HISTORY_PAGE}</a></p>",
            esc(&here),
            esc(&here),
            last.id,
            esc(&kq)
        ),
        (Some(_), _) => format!("<p><a href=\"{}\">Latest</a></p>", esc(&here)),
        _ => String::new(),
    };
    let kinds_here = s.store.event_kinds(&view.id).await.unwrap_or_default();
    let mut filter = format!(
        "<form method=get action=\"{}\" class=filters aria-label=\"history filter\"><label>kind<select name=kind id=kind><option value=\"\">every kind</option>",
        esc(&here)
    );
    for k in &kinds_here {
        let _ = write!(
            filter,
            "<option{}>{}</option>",
            if kinds.contains(k) { " selected" } else { "" },
            esc(k)
        );
    }
    filter.push_str("</select></label><button>Show</button></form>");
    let _ = write!(
        body,
        "</ul>{archived}<h2>History</h2>{filter}{nav}<table id=history data-live><thead><tr><th scope=col>when</th><th scope=col>kind</th><th scope=col>what happened</th></tr></thead><tbody>"
    );
    for e in &view.events {
        let _ = write!(
            body,
            "<tr data-kind=\"{}\"><td>{}</td><td><span class=kind>{}</span></td><td>{}</td></tr>",
            esc(&e.kind),
            e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            esc(&e.kind),
            esc(&happened(e))
        );
    }
    body.push_str("</tbody></table>");
    if after.is_none() {
        body.push_str(super::overview::LIVE);
    }
    page(&view.id, Some(&v), &body).into_response()
}

/// A document as text, indented when it is well-formed XML (one element per line, an element
/// holding only text kept on its line; prefixes, attributes and text as written); anything
/// else as it is.
fn pretty_xml(text: &str) -> String {
    if !text.trim_start().starts_with('<') || roxmltree::Document::parse(text).is_err() {
        return text.to_string();
    }
    // Markup tokens: `<…>` (quotes, comments, CDATA and PIs kept whole) and the text between.
    let mut tokens: Vec<&str> = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('<') {
            let end = if r.starts_with("!--") {
                r.find("-->").map(|i| i + 4)
            } else if r.starts_with("![CDATA[") {
                r.find("]]>").map(|i| i + 4)
            } else {
                let mut quote = None;
                r.char_indices()
                    .find(|&(_, c)| match quote {
                        Some(q) if c == q => {
                            quote = None;
                            false
                        }
                        Some(_) => false,
                        None if c == '"' || c == '\'' => {
                            quote = Some(c);
                            false
                        }
                        None => c == '>',
                    })
                    .map(|(i, _)| i + 2)
            };
            let end = end.unwrap_or(rest.len()).min(rest.len());
            tokens.push(&rest[..end]);
            rest = &rest[end..];
        } else {
            let end = rest.find('<').unwrap_or(rest.len());
            if !rest[..end].trim().is_empty() {
                tokens.push(rest[..end].trim());
            }
            rest = &rest[end..];
        }
    }
    let mut out = String::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        let opens = t.starts_with('<')
            && !t.starts_with("</")
            && !t.starts_with("<?")
            && !t.starts_with("<!")
            && !t.ends_with("/>");
        if t.starts_with("</") {
            depth = depth.saturating_sub(1);
        }
        out.push_str(&"  ".repeat(depth));
        // `<a>text</a>` on one line.
        if opens
            && let (Some(text), Some(close)) = (tokens.get(i + 1), tokens.get(i + 2))
            && !text.starts_with('<')
            && close.starts_with("</")
        {
            out.push_str(t);
            out.push_str(text);
            out.push_str(close);
            out.push('\n');
            i += 3;
            continue;
        }
        out.push_str(t);
        out.push('\n');
        if opens {
            depth += 1;
        }
        i += 1;
    }
    out
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
    Redirect::to(&format!("/ui/objects/{}", enc(&id))).into_response()
}

#[cfg(test)]
mod tests {
    use super::pretty_xml;

    #[test]
    fn xml_is_indented_as_written_and_anything_else_is_left_alone() {
        let mods = r#"<?xml version="1.0"?><mods:mods xmlns:mods="http://www.loc.gov/mods/v3"><mods:titleInfo><mods:title>A &amp; B</mods:title></mods:titleInfo><!-- a <note> --><mods:note type="a>b">x</mods:note><mods:empty/></mods:mods>"#;
        assert_eq!(
            pretty_xml(mods),
            "<?xml version=\"1.0\"?>\n<mods:mods xmlns:mods=\"http://www.loc.gov/mods/v3\">\n  <mods:titleInfo>\n    <mods:title>A &amp; B</mods:title>\n  </mods:titleInfo>\n  <!-- a <note> -->\n  <mods:note type=\"a>b\">x</mods:note>\n  <mods:empty/>\n</mods:mods>\n"
        );
        for other in ["plain text", "<unclosed>", "{\"json\": 1}", ""] {
            assert_eq!(pretty_xml(other), other);
        }
    }
}

/// What a history row's event did, in words, from its detail: a machine's signal, states and
/// reasons, which the kind, step and status columns do not say.
fn summary(kind: &str, actor: Option<&str>, detail: Option<&serde_json::Value>) -> String {
    let Some(d) = detail else {
        return String::new();
    };
    let t = |k: &str| match &d[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    let by = actor.map(|a| format!(" by {a}")).unwrap_or_default();
    match kind {
        "signal_received" => format!("{} in {}{by}", t("signal"), t("state")),
        "state_entered" => format!("{} → {} on {}", t("from"), t("state"), t("signal")),
        "signal_refused" => format!(
            "{} refused in {}{by}: {}",
            t("signal"),
            t("state"),
            t("reason")
        ),
        "transition_rollback" => format!(
            "{} in {} rolled back: {}",
            t("transition"),
            t("state"),
            t("reason")
        ),
        "alarm_set" => format!("{} due {} (in {})", t("signal"), t("due_at"), t("state")),
        "alarm_fired" => t("signal"),
        "action_fired" => format!("{} on {} of {}", t("action"), t("association"), t("state")),
        "child_started" => format!("{} on {}", t("template"), t("object")),
        "children_cancelled" => format!("cancelled {}", t("children")),
        "job_cancelled" => format!("with its parent {}", t("parent")),
        "job_started" => format!("in {}", t("state")),
        "job_suspended" | "job_resumed" => {
            format!("in {}, {} signal(s) waiting{by}", t("state"), t("waiting"))
        }
        "released" | "lease_expired" => t("reason"),
        _ => String::new(),
    }
}

/// One history row in words: where (`template:step`, or the template alone), the status it
/// reached and the attempt, what the detail says, and who — never a dangling colon.
fn happened(e: &crate::store::EventRow) -> String {
    let place = match (e.template.as_deref(), e.step.as_deref()) {
        (Some(t), Some(st)) if !t.is_empty() && !st.is_empty() => format!("{t}:{st}"),
        (Some(t), _) if !t.is_empty() => t.to_string(),
        (_, Some(st)) if !st.is_empty() => st.to_string(),
        _ => String::new(),
    };
    let what = summary(&e.kind, e.actor.as_deref(), e.detail.as_ref());
    let mut parts = Vec::new();
    match e.kind.as_str() {
        "workflow_started" => parts.push(format!("started {place}")),
        "workflow_completed" => parts.push(format!("{place} completed")),
        "object_registered" => parts.push("registered".to_string()),
        "object_updated" => parts.push("properties or documents changed".to_string()),
        _ => {
            if !place.is_empty() {
                parts.push(place);
            }
            if let Some(st) = e.status.as_deref().filter(|s| !s.is_empty()) {
                parts.push(format!("→ {st}"));
            }
        }
    }
    if let Some(a) = e.attempt.filter(|a| *a > 0) {
        parts.push(format!("(attempt {a})"));
    }
    if !what.is_empty() {
        parts.push(what.clone());
    } else if let Some(d) = &e.detail {
        for key in ["message", "note", "reason"] {
            if let Some(m) = d[key].as_str().filter(|m| !m.is_empty()) {
                parts.push(format!("— {m}"));
                break;
            }
        }
    }
    if let Some(a) = e.actor.as_deref().filter(|a| !a.is_empty())
        && !what.contains(" by ")
    {
        parts.push(format!("by {a}"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod summary_tests {
    use serde_json::json;

    #[test]
    fn machine_events_say_what_happened() {
        let d = json!({"signal": "approve", "state": "Notified", "reason": "not now"});
        assert_eq!(
            super::summary("signal_refused", Some("ann"), Some(&d)),
            "approve refused in Notified by ann: not now"
        );
        let d = json!({"from": "Review", "state": "Notified", "signal": "notified"});
        assert_eq!(
            super::summary("state_entered", None, Some(&d)),
            "Review → Notified on notified"
        );
        assert_eq!(super::summary("completed", None, None), "");
    }

    #[test]
    fn a_history_row_reads_as_one_line() {
        let row = |kind: &str, template: Option<&str>, step: Option<&str>, status: Option<&str>| {
            crate::store::EventRow {
                id: 1,
                at: chrono::Utc::now(),
                workflow_id: Some(1),
                template: template.map(String::from),
                version: Some(1),
                step: step.map(String::from),
                kind: kind.into(),
                status: status.map(String::from),
                attempt: None,
                actor: Some("robot".into()),
                detail: Some(json!({"message": "scanner jammed"})),
            }
        };
        assert_eq!(
            super::happened(&row("workflow_started", Some("accessionWF"), None, None)),
            "started accessionWF — scanner jammed by robot"
        );
        let line = super::happened(&row(
            "status_changed",
            Some("accessionWF"),
            Some("shelve"),
            Some("error"),
        ));
        assert_eq!(line, "accessionWF:shelve → error — scanner jammed by robot");
        assert!(!super::happened(&row("x", None, None, None)).starts_with(':'));
    }
}
