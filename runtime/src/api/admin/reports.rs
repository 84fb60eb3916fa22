//! The admin page's reports: errors grouped by message (with a retry per group), templates
//! with their versions (an index first), timings per template step, schedules (enable,
//! disable, fire now) and the alert outbox.

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::{draw, failure, head, object_url, page, unusable, viewer};
use crate::api::AppState;
use crate::store::Role;

/// What the last action did, as its redirect says.
#[derive(Deserialize)]
pub(super) struct Done {
    done: Option<String>,
    /// The page of the alert outbox shown (schedules page), from 1.
    outbox: Option<i64>,
}

impl Done {
    /// What to say, when anything.
    pub(super) fn said(self) -> Option<String> {
        self.done.filter(|d| !d.is_empty())
    }
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
    let acts = v.role >= Role::Robot;
    let body = html! {
        @if let Some(d) = &done { p.done role="status" { (d) } }
        @let in_error: i64 = groups.iter().map(|g| g.count).sum();
        p { (super::overview::count(in_error)) (if in_error == 1 { " step" } else { " steps" }) " in error, in " (groups.len()) (if groups.len() == 1 { " group." } else { " groups." }) }
        table #errors {
            (head(&["step", "message", "#steps", "first", "last", ""]))
            tbody {
                @for g in &groups {
                    tr {
                        td { (g.template) ":" (g.step) }
                        td {
                            // One message as written; a group of several shows their shape and the latest.
                            @if g.count > 1 && g.message != g.example {
                                (g.message) " (e.g. " (g.example) ")"
                            } @else {
                                (g.example)
                            }
                            @if let Some(t) = &g.text {
                                details { summary { "text" } pre { (t) } }
                            }
                        }
                        td.n { (g.count) }
                        td { (g.first.format("%Y-%m-%d %H:%M:%S")) }
                        td { (g.last.format("%Y-%m-%d %H:%M:%S")) }
                        td {
                            @if acts {
                                form method="post" action="/ui/steps/act" data-confirm={ "Retry " (g.count) (if g.count == 1 { " step of " } else { " steps of " }) (g.template) ":" (g.step) " failed with “" (g.message) "”?" } {
                                    input type="hidden" name="csrf" value=(v.csrf);
                                    input type="hidden" name="back" value="/ui/errors";
                                    input type="hidden" name="action" value="retry";
                                    @for id in &g.ids { input type="hidden" name="id" value=(id); }
                                    button.retry-group { "Retry all" }
                                    " " label { input name="current_functions" type="checkbox"; " on today's functions" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page("Errors", Some(&v), body).into_response()
}

/// Every template and bricklet with its versions (SHA-256, when loaded, which is current) and
/// its steps with their prerequisites, after an index of them all.
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
    let kind = |t: &crate::store::TemplateRow| {
        if t.spec.machine.is_some() {
            "machine"
        } else if t.kind == "bricklet" {
            "bricklet"
        } else {
            "steps"
        }
    };
    let mut versions = Vec::with_capacity(current.len());
    for t in &current {
        versions.push(s.store.template_versions(&t.name).await.unwrap_or_default());
    }
    let body = html! {
        table #template-index {
            (head(&["template", "kind", "#steps or states", "#versions"]))
            tbody {
                @for (t, vs) in current.iter().zip(&versions) {
                    tr {
                        td { a href={ "#t-" (t.name) } { (t.name) } }
                        td { (kind(t)) }
                        td.n { (t.spec.machine.as_ref().map_or(t.spec.steps.len(), |m| m.states.len())) }
                        td.n { (vs.len()) }
                    }
                }
            }
        }
        div #templates {
            @for (t, vs) in current.iter().zip(&versions) {
                section id={ "t-" (t.name) } {
                    h2 { (t.name) " " small { "(" (kind(t)) ")" } }
                    ul {
                        @for version in vs {
                            li {
                                code { (version.sha256.chars().take(12).collect::<String>()) }
                                " loaded " (version.loaded_at.format("%Y-%m-%d %H:%M:%S"))
                                @if version.is_current { " — current" }
                            }
                        }
                    }
                    // What this binary cannot run (a template a newer workdo loaded): its steps wait.
                    @for st in &t.spec.steps {
                        @if let Some(crate::model::template::FunctionSpec { runner: crate::model::template::Runner::Builtin { name }, .. }) = &st.function {
                            @if let Some(why) = crate::model::template::unknown_builtin(name) {
                                p class="error cannot-run" { "This workdo cannot run step " (st.name) ": " (why) ". Its steps wait in their queue until a workdo that can runs them." }
                            }
                        }
                    }
                    @if let Some(m) = &t.spec.machine {
                        (draw::machine(&format!("template-{}", t.name), m, None, &[]))
                    } @else if !t.spec.steps.is_empty() {
                        table {
                            (head(&["step", "after"]))
                            tbody {
                                @for st in &t.spec.steps {
                                    tr { td { (st.name) } td { (st.prereqs.join(", ")) } }
                                }
                            }
                        }
                        (draw::template(&format!("template-{}", t.name), &t.spec.steps))
                    }
                }
            }
        }
    };
    page("Templates", Some(&v), body).into_response()
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
    let body = html! {
        form {
            label { "last " input name="hours" type="number" min="1" value=(hours); " hours" }
            " " button { "show" }
        }
        table #timings {
            (head(&["step", "#finished", "#elapsed p50", "#p95", "#p99", "#wait p50", "#p95", "#p99"]))
            tbody {
                @for r in &rows {
                    tr {
                        // Generated and call steps as the overview counts them (one row for
                        // every instance); their instances one click away.
                        td { a href=(super::overview::url("/ui/steps", &[("template", r.template.clone()), ("step", r.step.clone()), ("status", "completed".to_string())])) { (r.template) ":" (r.step) } }
                        td.n { (super::overview::count(r.finished)) }
                        td.n { (ms(r.elapsed_p50)) }
                        td.n { (ms(r.elapsed_p95)) }
                        td.n { (ms(r.elapsed_p99)) }
                        td.n { (ms(r.wait_p50)) }
                        td.n { (ms(r.wait_p95)) }
                        td.n { (ms(r.wait_p99)) }
                    }
                }
            }
        }
    };
    page("Timings", Some(&v), body).into_response()
}

/// Alert outbox rows on one page of the schedules page.
const OUTBOX_PAGE: i64 = 50;

/// Schedules with their next fire time (enable, disable, fire now), the alert outbox (pending,
/// sent, failed) and the hand-off to Sidekiq.
pub(super) async fn schedules_alerts(
    State(s): State<AppState>,
    headers: HeaderMap,
    d: Result<Query<Done>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (done, outbox_page) = match d {
        Ok(Query(d)) => (
            d.done.filter(|d| !d.is_empty()),
            d.outbox.unwrap_or(1).max(1),
        ),
        Err(e) => return unusable(&e),
    };
    let schedules = match s.store.schedules_list().await {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    // A page of the outbox at a time, so the schedules stay in sight (one more row read says
    // whether there is an older page).
    let mut outbox = match s
        .store
        .outbox_recent(
            OUTBOX_PAGE + 1,
            (outbox_page - 1).saturating_mul(OUTBOX_PAGE),
        )
        .await
    {
        Ok(r) => r,
        Err(e) => return failure(&e.to_string()),
    };
    // The hand-off to Sidekiq robots, when a runtime pushes: each readiness and its push.
    let handoff = s.store.handoff_list(200).await.unwrap_or_default();
    let lost = s
        .store
        .handoff_queued_over(crate::runtime::handoff::PUSH_AGAIN_AFTER, 200)
        .await
        .unwrap_or_default();
    let older = outbox.len() as i64 > OUTBOX_PAGE;
    outbox.truncate(OUTBOX_PAGE as usize);
    let acts = v.role >= Role::Admin;
    // Mail pending with no attempt for over a minute: nothing is sending it (a runtime sends
    // within seconds of a failure when it has somewhere to send).
    let minute_ago = chrono::Utc::now() - chrono::Duration::minutes(1);
    let untried = s.store.outbox_untried(minute_ago).await.unwrap_or(0);
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let body = html! {
        @if let Some(d) = &done { p.done role="status" { (d) } }
        h2 { "Schedules" }
        table #schedules {
            (head(&["schedule", "cron", "template", "enabled", "next fire", "last fired", ""]))
            tbody {
                @for r in &schedules {
                    tr data-schedule=(r.name) {
                        td { (r.name) }
                        td { code { (r.cron) } " " (r.timezone) }
                        td { (r.does()) }
                        td { @if r.enabled { "yes" } @else { "no" } }
                        td { (when(r.next_fire_at)) }
                        td { (r.last_fired_at.map(when).unwrap_or_default()) }
                        td {
                            @if acts {
                                form.inline method="post" action="/ui/schedules/act" {
                                    input type="hidden" name="csrf" value=(v.csrf);
                                    input type="hidden" name="name" value=(r.name);
                                    @if r.enabled {
                                        button.small name="action" value="disable" { "Disable" }
                                    } @else {
                                        button.small name="action" value="enable" { "Enable" }
                                    }
                                    " "
                                    button.small name="action" value="fire" disabled[!r.enabled] { "Fire now" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Alert outbox" }
        @if untried > 0 {
            p.note #outbox-untried {
                (untried) " " (if untried == 1 { "message waits" } else { "messages wait" })
                " over a minute with no attempt: no running runtime sends mail. `workdo up` sends it \
                 only with WORKDO_SMTP_URL and WORKDO_ALERT_TO set (docs/alerts-and-schedules.md)."
            }
        }
        @if outbox_page > 1 || older {
            nav.pager aria-label="outbox pages" {
                @if outbox_page > 1 { a rel="prev" href={ "/ui/schedules?outbox=" (outbox_page - 1) } { "← newer" } " " }
                span { "page " (outbox_page) } " "
                @if older { a #outbox-older rel="next" href={ "/ui/schedules?outbox=" (outbox_page + 1) } { "older →" } }
            }
        }
        table #outbox {
            (head(&["created", "kind", "about", "status", "#attempts", "last error"]))
            tbody {
                @for r in &outbox {
                    tr {
                        td { (r.created_at.format("%Y-%m-%d %H:%M:%S")) }
                        td { (r.kind) }
                        td { (r.template.as_deref().unwrap_or("")) ":" (r.step.as_deref().unwrap_or("")) " " (r.object_id.as_deref().unwrap_or("")) }
                        td class=(if r.last_error.is_some() && r.status == "pending" { "error" } else { "" }) { (r.status) }
                        td.n { (r.attempts) }
                        td { (r.last_error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
        @if !lost.is_empty() {
            h2 { "Queued in Sidekiq over 12 hours" }
            p { "Handed off and not started since: the job was lost in Redis or no robot takes its queue. The runtime pushes each again (event handoff_pushed_again)." }
            table #handoff-lost {
                (head(&["pushed", "object", "step", "queue", "#pushes"]))
                tbody {
                    @for h in &lost {
                        tr {
                            td.error { (h.pushed_at.map(|p| p.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_default()) }
                            td { a href=(object_url(&h.object_id)) { (h.object_id) } }
                            td { (h.template) ":" (h.step) }
                            td { (h.queue.as_deref().unwrap_or("")) }
                            td.n { (h.attempts) }
                        }
                    }
                }
            }
        }
        @if !handoff.is_empty() {
            h2 { "Handed off to Sidekiq" }
            table #handoff {
                (head(&["ready", "object", "step", "queue", "pushed", "#attempts", "last error"]))
                tbody {
                    @for h in &handoff {
                        tr {
                            td { (h.created_at.format("%Y-%m-%d %H:%M:%S")) }
                            td { a href=(object_url(&h.object_id)) { (h.object_id) } }
                            td { (h.template) ":" (h.step) }
                            td { (h.queue.as_deref().unwrap_or("")) }
                            td { (h.pushed_at.map(|p| p.format("%H:%M:%S").to_string()).unwrap_or_else(|| "waiting".into())) }
                            td.n { (h.attempts) }
                            td.error { (h.last_error.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
    };
    page("Schedules and alerts", Some(&v), body).into_response()
}

/// Enable, disable or fire a schedule from the schedules page.
pub(super) async fn schedule_act(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let pairs = super::form_pairs(&body);
    // A schedule starts workflows or sends signals as itself, past a machine's access rules:
    // only an admin changes or fires one (the CLI needs the database itself).
    let need = "changing or firing a schedule needs the admin role";
    if let Err(r) = super::actor_for(&s, &headers, &pairs, Role::Admin, need).await {
        return r;
    }
    let Some(name) = super::field(&pairs, "name") else {
        return failure("the form names no schedule");
    };
    // What was done, said on the page it comes back to (a fire: how many workflows started or
    // jobs signalled).
    let done = match super::field(&pairs, "action") {
        Some("enable") => s
            .store
            .schedule_enable(name, true)
            .await
            .map(|()| format!("Schedule {name} enabled.")),
        Some("disable") => s
            .store
            .schedule_enable(name, false)
            .await
            .map(|()| format!("Schedule {name} disabled.")),
        Some("fire") => s.store.schedule_fire_now(name).await.map(|fired| {
            let (started, signalled) = fired
                .iter()
                .fold((0, 0), |(a, b), f| (a + f.started, b + f.signalled));
            if signalled > 0 {
                format!(
                    "Fired {name}: sent its signal to {}.",
                    crate::output::plural(signalled, "job", "jobs")
                )
            } else {
                format!(
                    "Fired {name}: started its workflow on {}.",
                    crate::output::plural(started, "object", "objects")
                )
            }
        }),
        other => return failure(&format!("unknown schedule action {other:?}")),
    };
    match done {
        Ok(said) => {
            axum::response::Redirect::to(&format!("/ui/schedules?done={}", super::enc(&said)))
                .into_response()
        }
        Err(e) => failure(&e.to_string()),
    }
}
