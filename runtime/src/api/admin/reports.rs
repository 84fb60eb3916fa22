//! The admin page's reports: errors grouped by message (with a retry per group), templates
//! with their versions, and timings per template step.

use std::fmt::Write as _;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{draw, esc, failure, page, unusable, viewer};
use crate::api::AppState;
use crate::store::Role;

/// What the last action did, as its redirect says.
#[derive(Deserialize)]
pub(super) struct Done {
    done: Option<String>,
}

/// Steps in error by template step and message: the text of one, first and last failure, and a
/// retry of the whole group (robot and admin).
pub(super) async fn errors(
    State(s): State<AppState>,
    headers: HeaderMap,
    d: Result<Query<Done>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let done = match d {
        Ok(Query(d)) => d.done.filter(|d| !d.is_empty()),
        Err(e) => return unusable(&e),
    };
    let groups = match s.store.errors_grouped().await {
        Ok(g) => g,
        Err(e) => return failure(&e.to_string()),
    };
    let mut body = done
        .map(|d| format!("<p class=done role=status>{}</p>", esc(&d)))
        .unwrap_or_default();
    let _ = write!(
        body,
        "<p>{} steps in error, in {} groups.</p><table id=errors><thead><tr><th scope=col>step</th><th scope=col>message</th><th scope=col class=n>steps</th><th scope=col>first</th><th scope=col>last</th><th></th></tr></thead><tbody>",
        groups.iter().map(|g| g.count).sum::<i64>(),
        groups.len()
    );
    for g in &groups {
        let retry = if v.role >= Role::Robot {
            let mut f = format!(
                "<form method=post action=/ui/steps/act data-confirm=\"Retry {} steps?\"><input type=hidden name=csrf value=\"{}\"><input type=hidden name=back value=/ui/errors><input type=hidden name=action value=retry>",
                g.count,
                esc(&v.csrf)
            );
            for id in &g.ids {
                let _ = write!(f, "<input type=hidden name=id value={id}>");
            }
            f.push_str("<button class=retry-group>Retry all</button></form>");
            f
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr><td>{}:{}</td><td>{}{}</td><td class=n>{}</td><td>{}</td><td>{}</td><td>{retry}</td></tr>",
            esc(&g.template),
            esc(&g.step),
            // One message as written; a group of several shows their shape and the latest.
            esc(&if g.count > 1 && g.message != g.example {
                format!("{} (e.g. {})", g.message, g.example)
            } else {
                g.example.clone()
            }),
            g.text
                .as_deref()
                .map(|t| format!(
                    "<details><summary>text</summary><pre>{}</pre></details>",
                    esc(t)
                ))
                .unwrap_or_default(),
            g.count,
            g.first.format("%Y-%m-%d %H:%M:%S"),
            g.last.format("%Y-%m-%d %H:%M:%S")
        );
    }
    body.push_str("</tbody></table>");
    page("Errors", Some(&v), &body).into_response()
}

/// Every template and bricklet with its versions (SHA-256, when loaded, which is current) and
/// its steps with their prerequisites.
pub(super) async fn templates(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let mut current = match s.store.template_list().await {
        Ok(t) => t,
        Err(e) => return failure(&e.to_string()),
    };
    current.extend(s.store.bricklet_list().await.unwrap_or_default());
    let mut body = String::from("<div id=templates>");
    for t in &current {
        let kind = if t.spec.machine.is_some() {
            "machine"
        } else if t.kind == "bricklet" {
            "bricklet"
        } else {
            "steps"
        };
        let _ = write!(
            body,
            "<section><h2>{} <small>({kind})</small></h2><ul>",
            esc(&t.name)
        );
        for version in s.store.template_versions(&t.name).await.unwrap_or_default() {
            let _ = write!(
                body,
                "<li><code>{}</code> loaded {}{}</li>",
                esc(&version.sha256[..12]),
                version.loaded_at.format("%Y-%m-%d %H:%M:%S"),
                if version.is_current {
                    " — current"
                } else {
                    ""
                }
            );
        }
        body.push_str("</ul>");
        // What this binary cannot run (a template a newer workdo loaded): its steps wait.
        for st in &t.spec.steps {
            if let Some(crate::model::template::FunctionSpec {
                runner: crate::model::template::Runner::Builtin { name },
                ..
            }) = &st.function
                && let Some(why) = crate::model::template::unknown_builtin(name)
            {
                let _ = write!(
                    body,
                    "<p class=\"error cannot-run\">This workdo cannot run step {}: {}. Its steps wait in their queue until a workdo that can runs them.</p>",
                    esc(&st.name),
                    esc(&why)
                );
            }
        }
        if let Some(m) = &t.spec.machine {
            body.push_str(&draw::machine(
                &format!("template-{}", t.name),
                m,
                None,
                &[],
            ));
        } else if !t.spec.steps.is_empty() {
            body.push_str("<table><thead><tr><th scope=col>step</th><th scope=col>after</th></tr></thead><tbody>");
            for st in &t.spec.steps {
                let _ = write!(
                    body,
                    "<tr><td>{}</td><td>{}</td></tr>",
                    esc(&st.name),
                    esc(&st.prereqs.join(", "))
                );
            }
            body.push_str("</tbody></table>");
            body.push_str(&draw::template(
                &format!("template-{}", t.name),
                &t.spec.steps,
            ));
        }
        body.push_str("</section>");
    }
    body.push_str("</div>");
    page("Templates", Some(&v), &body).into_response()
}

#[derive(Deserialize)]
pub(super) struct Window {
    hours: Option<f64>,
}

/// p50/p95/p99 of elapsed and wait (ready to started) per template step, over a window.
pub(super) async fn timings(
    State(s): State<AppState>,
    headers: HeaderMap,
    w: Result<Query<Window>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let w = match w {
        Ok(Query(w)) => w,
        Err(e) => return unusable(&e),
    };
    let hours = w
        .hours
        .filter(|h| h.is_finite() && *h > 0.0 && *h <= 24.0 * 366.0)
        .unwrap_or(24.0);
    let rows = match s.store.timings(hours).await {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    let ms = |x: Option<f64>| x.map(crate::output::human_duration).unwrap_or_default();
    let mut body = format!(
        "<form><label>last <input name=hours type=number min=1 value={hours}> hours</label> <button>show</button></form><table id=timings><thead><tr><th scope=col>step</th><th scope=col class=n>finished</th><th scope=col class=n>elapsed p50</th><th scope=col class=n>p95</th><th scope=col class=n>p99</th><th scope=col class=n>wait p50</th><th scope=col class=n>p95</th><th scope=col class=n>p99</th></tr></thead><tbody>"
    );
    for r in &rows {
        let _ = write!(
            body,
            "<tr><td>{}:{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>",
            esc(&r.template),
            esc(&r.step),
            r.finished,
            ms(r.elapsed_p50),
            ms(r.elapsed_p95),
            ms(r.elapsed_p99),
            ms(r.wait_p50),
            ms(r.wait_p95),
            ms(r.wait_p99)
        );
    }
    body.push_str("</tbody></table>");
    page("Timings", Some(&v), &body).into_response()
}

/// Schedules with their next fire time, and the alert outbox (pending, sent, failed).
pub(super) async fn schedules_alerts(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let schedules = match s.store.schedules_list().await {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    let outbox = match s.store.outbox_recent(200).await {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    let mut body = String::from(
        "<h2>Schedules</h2><table id=schedules><thead><tr><th scope=col>schedule</th><th scope=col>cron</th><th scope=col>template</th><th scope=col>enabled</th><th scope=col>next fire</th><th scope=col>last fired</th><th></th></tr></thead><tbody>",
    );
    let acts = v.role >= crate::store::Role::Robot;
    for r in &schedules {
        let buttons = if acts {
            format!(
                "<form method=post action=/ui/schedules/act class=inline><input type=hidden name=csrf value=\"{}\"><input type=hidden name=name value=\"{}\"><button class=small name=action value={}>{}</button> <button class=small name=action value=fire{}>Fire now</button></form>",
                esc(&v.csrf),
                esc(&r.name),
                if r.enabled { "disable" } else { "enable" },
                if r.enabled { "Disable" } else { "Enable" },
                if r.enabled { "" } else { " disabled" }
            )
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr data-schedule=\"{}\"><td>{}</td><td><code>{}</code> {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{buttons}</td></tr>",
            esc(&r.name),
            esc(&r.name),
            esc(&r.cron),
            esc(&r.timezone),
            esc(&r.does()),
            if r.enabled { "yes" } else { "no" },
            r.next_fire_at.format("%Y-%m-%d %H:%M:%S UTC"),
            r.last_fired_at
                .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                .unwrap_or_default()
        );
    }
    body.push_str("</tbody></table><h2>Alert outbox</h2><table id=outbox><thead><tr><th scope=col>created</th><th scope=col>kind</th><th scope=col>about</th><th scope=col>status</th><th scope=col class=n>attempts</th><th scope=col>last error</th></tr></thead><tbody>");
    for r in &outbox {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td class=n>{}</td><td>{}</td></tr>",
            r.created_at.format("%Y-%m-%d %H:%M:%S"),
            esc(&r.kind),
            esc(&format!(
                "{}:{} {}",
                r.template.as_deref().unwrap_or(""),
                r.step.as_deref().unwrap_or(""),
                r.object_id.as_deref().unwrap_or("")
            )),
            if r.last_error.is_some() && r.status == "pending" {
                "error"
            } else {
                ""
            },
            esc(&r.status),
            r.attempts,
            esc(r.last_error.as_deref().unwrap_or(""))
        );
    }
    body.push_str("</tbody></table>");
    // The hand-off to Sidekiq robots, when a runtime pushes: each readiness and its push.
    let handoff = s.store.handoff_list(200).await.unwrap_or_default();
    if !handoff.is_empty() {
        body.push_str("<h2>Handed off to Sidekiq</h2><table id=handoff><thead><tr><th scope=col>ready</th><th scope=col>object</th><th scope=col>step</th><th scope=col>queue</th><th scope=col>pushed</th><th scope=col class=n>attempts</th><th scope=col>last error</th></tr></thead><tbody>");
        for h in &handoff {
            let _ = write!(
                body,
                "<tr><td>{}</td><td><a href=\"/ui/objects/{}\">{}</a></td><td>{}:{}</td><td>{}</td><td>{}</td><td class=n>{}</td><td class=error>{}</td></tr>",
                h.created_at.format("%Y-%m-%d %H:%M:%S"),
                super::enc(&h.object_id),
                esc(&h.object_id),
                esc(&h.template),
                esc(&h.step),
                esc(h.queue.as_deref().unwrap_or("")),
                h.pushed_at
                    .map(|p| p.format("%H:%M:%S").to_string())
                    .unwrap_or_else(|| "waiting".into()),
                h.attempts,
                esc(h.last_error.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</tbody></table>");
    }
    page("Schedules and alerts", Some(&v), &body).into_response()
}

/// Enable, disable or fire a schedule from the schedules page.
pub(super) async fn schedule_act(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let pairs = super::form_pairs(&body);
    if let Err(r) = super::actor(&s, &headers, &pairs).await {
        return r;
    }
    let Some(name) = super::field(&pairs, "name") else {
        return failure("the form names no schedule");
    };
    let done = match super::field(&pairs, "action") {
        Some("enable") => s.store.schedule_enable(name, true).await,
        Some("disable") => s.store.schedule_enable(name, false).await,
        Some("fire") => s.store.schedule_fire_now(name).await.map(|_| ()),
        other => return failure(&format!("unknown schedule action {other:?}")),
    };
    match done {
        Ok(()) => axum::response::Redirect::to("/ui/schedules").into_response(),
        Err(e) => failure(&e.to_string()),
    }
}
