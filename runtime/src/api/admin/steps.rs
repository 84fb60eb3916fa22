//! A facet's list (`/ui/steps?template=…&step=…&status=…&page=N`): the true count, 500 steps a
//! page, retry, skip and prioritize for the chosen rows or for all N matching (the server finds
//! them again from the facet when the form arrives). Its `data-live` regions follow the work.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::overview::{Filters, count, given, url};
use super::{failure, head, object_url, page, unusable, viewer};
use crate::api::AppState;
use crate::store::Role;

#[derive(Deserialize)]
pub(super) struct FacetQuery {
    /// Empty or absent: every template (one status across them all).
    #[serde(default)]
    template: String,
    #[serde(default)]
    step: String,
    status: String,
    lane: Option<String>,
    milestone: Option<String>,
    property: Option<String>,
    /// Which page of [`PAGE`] rows, from 1.
    page: Option<i64>,
    /// What the last action did (set by its redirect).
    done: Option<String>,
}

impl FacetQuery {
    /// What the list holds: `T:S`, `T (every step)`, or every template's steps.
    fn label(&self) -> String {
        match (self.template.is_empty(), self.step.is_empty()) {
            (false, false) => format!("{}:{}", self.template, self.step),
            (false, true) => format!("{} (every step)", self.template),
            (true, false) => format!("every template's {}", self.step),
            (true, true) => "every template".to_string(),
        }
    }
}

/// Rows on one page of a facet's steps.
pub(super) const PAGE: i64 = 500;

/// The most steps "all matching" acts on in one go.
pub(super) const ALL_MAX: i64 = 100_000;

pub(super) async fn steps(
    State(s): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<FacetQuery>, QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return unusable(&e),
    };
    let f = Filters {
        lane: q.lane.clone(),
        milestone: q.milestone.clone(),
        property: q.property.clone(),
        ..Default::default()
    };
    let filter = match f.to_store() {
        Ok(filter) => filter,
        Err(e) => return super::bad_address(&e),
    };
    let page_no = q.page.unwrap_or(1).clamp(1, i64::MAX / PAGE);
    let (rows, total) = match tokio::try_join!(
        s.store.steps_in(
            &q.template,
            &q.step,
            &q.status,
            &filter,
            PAGE,
            (page_no - 1) * PAGE
        ),
        s.store
            .steps_in_all(&q.template, &q.step, &q.status, &filter, 0)
    ) {
        Ok((r, (total, _))) => (r, total),
        Err(e) => return failure(&e.to_string()),
    };
    let acts = v.role >= Role::Robot;
    let mut pairs = vec![
        ("template", q.template.clone()),
        ("step", q.step.clone()),
        ("status", q.status.clone()),
    ];
    pairs.extend(f.carried());
    let base = pairs.clone();
    if page_no > 1 {
        pairs.push(("page", page_no.to_string()));
    }
    let here = url("/ui/steps", &pairs);
    let pages = ((total + PAGE - 1) / PAGE).max(1);
    let first = (page_no - 1) * PAGE + 1;
    let pager = pager(&base, page_no, pages);
    let now = chrono::Utc::now();
    let body = html! {
        p #summary data-live data-total=(total) {
            (count(total)) (if total == 1 { " step of " } else { " steps of " }) b { (q.label()) } " in " b { (q.status) }
            @if let Some(l) = &filter.lane { ", lane " b { (l) } }
            @if let Some(m) = &filter.milestone { ", reached " b { (m) } }
            @if let Some((k, val)) = &filter.property { ", " b { (k) } " = " b { (val) } }
            @if !rows.is_empty() {
                "; showing " (count(first)) "–" (count(first + rows.len() as i64 - 1))
            }
            " (most recently changed first)."
        }
        @if page_no > pages {
            p.error role="status" data-past-end {
                "There is no page " (count(page_no)) ": these steps fill " (count(pages))
                @if pages == 1 { " page" } @else { " pages" }
                " now. "
                a href=(url("/ui/steps", &{ let mut p = base.clone(); p.push(("page", pages.to_string())); p })) { "The last page" }
            }
        }
        @if let Some(done) = given(&q.done) { p.done role="status" { (done) } }
        // Acting on everything that matches, at the top with the page's own actions.
        @if acts && total > 0 { (act_on_all(&v.csrf, &here, &q, &f, total)) }
        @if acts {
            form #act method="post" action="/ui/steps/act" data-chosen {
                input type="hidden" name="csrf" value=(v.csrf);
                input type="hidden" name="back" value=(here);
                p {
                    label { input #all type="checkbox"; " all on this page" }
                    " " button #retry name="action" value="retry" data-verb="Retry" { "Retry chosen" }
                    " " label title="Retried steps run the deployed functions' current versions, not those their workflows pinned" { input #current-functions name="current_functions" type="checkbox"; " on today's functions" }
                    " " button #skip name="action" value="skip" data-verb="Skip" { "Skip chosen" }
                    " " label { "priority " input #priority .narrow name="priority" type="number" value="100"; }
                    " " button #prioritize name="action" value="prioritize" data-verb="Prioritize" { "Prioritize chosen" }
                }
                (pager)
                (table(&rows, (acts, q.template.is_empty()), now))
            }
        } @else {
            (pager)
            (table(&rows, (acts, q.template.is_empty()), now))
        }
        (pager)
    };
    page(&format!("{} {}", q.label(), q.status), Some(&v), body).into_response()
}

fn table(
    rows: &[crate::store::StepRow],
    (acts, across): (bool, bool),
    now: chrono::DateTime<chrono::Utc>,
) -> Markup {
    html! {
        table #rows data-live {
            (head(&["", "object", "#workflow", "step", "lane", "#attempts", "message", "changed"]))
            tbody {
                @for r in rows {
                    tr {
                        td { @if acts { input type="checkbox" name="id" value=(r.id) aria-label={ "choose " (r.object_id) }; } }
                        td { a href=(object_url(&r.object_id)) { (r.object_id) } }
                        td.n { (r.workflow_id) }
                        // Across templates, each step says whose it is.
                        td { @if across { (r.template) ":" } (r.name) }
                        td { (r.lane) }
                        td.n { (r.attempts) "/" (r.max_attempts) }
                        td { (crate::output::step_remark(&r.status, r.error_message.as_deref(), r.note.as_deref(), r.run_at, now)) }
                        td { (r.updated_at.format("%Y-%m-%d %H:%M:%S")) }
                    }
                }
            }
        }
    }
}

/// Links to the previous and next pages, and where this one is.
fn pager(base: &[(&'static str, String)], page_no: i64, pages: i64) -> Markup {
    let link = |n: i64| {
        let mut pairs = base.to_vec();
        pairs.push(("page", n.to_string()));
        url("/ui/steps", &pairs)
    };
    html! {
        @if pages > 1 || page_no > 1 {
            nav.pager aria-label="pages" {
                // Past the end (the steps moved on): back to the last page there is.
                @if page_no > 1 { a #page-prev rel="prev" href=(link((page_no - 1).min(pages))) { "← newer" } }
                " " span { "page " (count(page_no)) " of " (count(pages)) } " "
                @if page_no < pages { a #page-next rel="next" href=(link(page_no + 1)) { "older →" } }
                // Numbers to jump by: the first, the last, and those next to this one.
                @if pages > 2 {
                    " · "
                    @for n in super::overview::page_numbers(page_no, pages) {
                        @if n == page_no { b { (count(n)) } } @else { a.page href=(link(n)) { (count(n)) } }
                        " "
                    }
                }
            }
        }
    }
}

/// Forms that act on every step the facet matches, not just the page shown: the server finds
/// them again when the form arrives, and the browser first asks, naming how many.
fn act_on_all(csrf: &str, back: &str, q: &FacetQuery, f: &Filters, total: i64) -> Markup {
    let n = count(total);
    // The question names every filter the steps are chosen by, the property's included.
    let mut what = format!("{} in {}", q.label(), q.status);
    let narrowed: Vec<String> = f
        .carried()
        .into_iter()
        .map(|(name, v)| match (name, v.split_once('=')) {
            ("property", Some((k, val))) => format!("{} = {}", k.trim(), val.trim()),
            ("milestone", _) => format!("milestone {v} reached"),
            _ => format!("{name} {v}"),
        })
        .collect();
    if !narrowed.is_empty() {
        what = format!("{what} where {}", narrowed.join(" and "));
    }
    let more = if total > ALL_MAX {
        format!(" (the first {} of them)", count(ALL_MAX))
    } else {
        String::new()
    };
    let hidden = html! {
        input type="hidden" name="csrf" value=(csrf);
        input type="hidden" name="back" value=(back);
        input type="hidden" name="scope" value="all";
        input type="hidden" name="template" value=(q.template);
        input type="hidden" name="step" value=(q.step);
        input type="hidden" name="status" value=(q.status);
        @for (name, v) in f.carried() { input type="hidden" name=(name) value=(v); }
        input type="hidden" name="expected" value=(total);
    };
    html! {
        div.all-matching {
            @for (action, verb) in [("retry", "Retry"), ("skip", "Skip"), ("prioritize", "Prioritize")] {
                form.inline id={ "all-" (action) } method="post" action="/ui/steps/act" data-confirm={ (verb) " all " (n) (if total == 1 { " step of " } else { " steps of " }) (what) (more) "?" } {
                    (hidden)
                    input type="hidden" name="action" value=(action);
                    @if action == "prioritize" {
                        input.narrow name="priority" type="number" value="100" aria-label="priority";
                        " "
                    }
                    @if action == "retry" {
                        label { input name="current_functions" type="checkbox"; " on today's functions" }
                        " "
                    }
                    button { (verb) " all " (n) " matching" }
                }
            }
        }
    }
}
