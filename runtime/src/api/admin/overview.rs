//! The overview (template × step × status counts, the age of each queue's head, throughput per
//! minute) and a facet's list of steps with retry, skip and prioritize. Both narrow to a
//! template, lane, milestone or property given in the URL, and refresh their `data-live`
//! regions in place: the page fetches itself and swaps those regions, so a chosen checkbox,
//! a half-typed filter and the scroll position stay put.

use std::fmt::Write as _;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{draw, enc, esc, failure, page, unusable, viewer};
use crate::api::AppState;
use crate::store::{FacetFilter, Role};

/// The statuses as columns, in the order a step goes through them.
const COLUMNS: [&str; 8] = [
    "waiting",
    "scheduled",
    "ready",
    "started",
    "retrying",
    "error",
    "completed",
    "skipped",
];

/// Every few seconds, fetch this page again and swap each `data-live` element's content with
/// the same element's in the fresh page (by id), keeping the boxes the user ticked; a region
/// the user is typing in is left alone. A sign-in redirect or an error leaves the page as it
/// is; a hidden tab does not poll.
pub(super) const LIVE: &str = "";

/// Filters as the URL carries them; empty fields (a submitted form's) are absent.
#[derive(Deserialize, Default)]
pub(super) struct Filters {
    pub(super) template: Option<String>,
    pub(super) step: Option<String>,
    pub(super) status: Option<String>,
    pub(super) lane: Option<String>,
    pub(super) milestone: Option<String>,
    /// `key=value`
    pub(super) property: Option<String>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_ref()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

impl Filters {
    /// The store's filter, or what is wrong with the URL's.
    pub(super) fn to_store(&self) -> Result<FacetFilter, String> {
        let property = match given(&self.property) {
            None => None,
            Some(p) => match p.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    Some((k.trim().to_string(), v.trim().to_string()))
                }
                _ => return Err(format!("property filter {p:?} is not key=value")),
            },
        };
        Ok(FacetFilter {
            template: given(&self.template),
            lane: given(&self.lane),
            milestone: given(&self.milestone),
            property,
        })
    }

    /// The filters but the template as query parameters (`&name=value…`), to carry into a
    /// facet's link (which names its template).
    fn query(&self) -> String {
        let mut q = String::new();
        for (name, v) in [
            ("lane", &self.lane),
            ("milestone", &self.milestone),
            ("property", &self.property),
        ] {
            if let Some(v) = given(v) {
                let _ = write!(q, "&{name}={}", enc(&v));
            }
        }
        q
    }

    fn form(&self) -> String {
        let field = |name: &str, label: &str, v: &Option<String>, hint: &str| {
            format!(
                "<label>{label}<input name={name} id=filter-{name} value=\"{}\" placeholder=\"{hint}\"></label>",
                esc(&given(v).unwrap_or_default())
            )
        };
        format!(
            "<form class=filters method=get action=/ aria-label=filters>{}{}{}{}{}{}<button>Filter</button> <a href=/>clear</a></form>",
            field("template", "template", &self.template, "any"),
            field("step", "step", &self.step, "any"),
            field("status", "status", &self.status, "any"),
            field("lane", "lane", &self.lane, "any"),
            field("milestone", "reached milestone", &self.milestone, "any"),
            field("property", "property", &self.property, "key=value"),
        )
    }
}

pub(super) async fn overview(
    State(s): State<AppState>,
    headers: HeaderMap,
    f: Result<Query<Filters>, QueryRejection>,
) -> Response {
    let v = match viewer(&s, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let f = match f {
        Ok(Query(f)) => f,
        Err(e) => return unusable(&e),
    };
    let filter = match f.to_store() {
        Ok(filter) => filter,
        Err(e) => return failure(&e),
    };
    let mut facets = match s.store.facets_where(&filter).await {
        Ok(f) => f,
        Err(e) => return failure(&e.to_string()),
    };
    // Step and status are what the counts are kept by: narrowed here.
    let (step, status) = (given(&f.step), given(&f.status));
    facets.retain(|x| {
        step.as_ref().is_none_or(|s| s == &x.step) && status.as_ref().is_none_or(|s| s == &x.status)
    });
    let depths = s.store.queue_depths().await.unwrap_or_default();
    let paused = s.store.paused_list().await.unwrap_or_default();
    let acts = v.role >= Role::Robot;
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in &facets {
        let key = (f.template.clone(), f.step.clone());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    let now = chrono::Utc::now();
    let mut body = format!(
        "<p>Steps of every template by status; a count lists its steps. The counts and the chart follow the work as it happens.</p>{}<div id=counts data-live><p class=asof>as of {}</p><table id=facets><thead><tr><th scope=col>template</th><th scope=col>step</th>",
        f.form(),
        now.format("%H:%M:%S")
    );
    for c in COLUMNS {
        let _ = write!(body, "<th scope=col class=n>{c}</th>");
    }
    body.push_str("<th scope=col class=n>other</th><th scope=col class=n>oldest ready</th></tr></thead><tbody>");
    let carry = f.query();
    for (t, st) in &rows {
        let pause = paused.iter().find(|p| &p.template == t && &p.step == st);
        let switch = if acts {
            format!(
                "<form method=post action=/ui/pause class=inline><input type=hidden name=csrf value=\"{}\"><input type=hidden name=template value=\"{}\"><input type=hidden name=step value=\"{}\"><button class=small name=action value={} title=\"{}\">{}</button></form>",
                esc(&v.csrf),
                esc(t),
                esc(st),
                if pause.is_some() { "resume" } else { "pause" },
                if pause.is_some() {
                    "workers claim again"
                } else {
                    "no worker claims until resumed"
                },
                if pause.is_some() { "Resume" } else { "Pause" },
            )
        } else {
            String::new()
        };
        let badge = match pause {
            Some(p) => format!(
                " <span class=paused data-paused=\"{}:{}\" title=\"paused {} by {}{}\">paused</span>",
                esc(t),
                esc(st),
                p.paused_at.format("%Y-%m-%d %H:%M"),
                esc(&p.paused_by),
                esc(&p
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default())
            ),
            None => String::new(),
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}{badge} {switch}</td>",
            esc(t),
            esc(st)
        );
        for c in COLUMNS {
            let n: i64 = facets
                .iter()
                .filter(|f| &f.template == t && &f.step == st && f.status == c)
                .map(|f| f.count)
                .sum();
            if n == 0 {
                body.push_str("<td class=n></td>");
            } else {
                let _ = write!(
                    body,
                    "<td class=\"n {c}\"><a data-facet=\"{}:{}:{c}\" href=\"{}\">{n}</a></td>",
                    esc(t),
                    esc(st),
                    esc(&format!(
                        "/ui/steps?template={}&step={}&status={c}{carry}",
                        enc(t),
                        enc(st),
                    )),
                );
            }
        }
        let other: i64 = facets
            .iter()
            .filter(|f| &f.template == t && &f.step == st && !COLUMNS.contains(&f.status.as_str()))
            .map(|f| f.count)
            .sum();
        // How long the oldest ready step of this queue has waited (over its lanes).
        let oldest = depths
            .iter()
            .filter(|d| &d.0 == t && &d.1 == st && filter.lane.as_ref().is_none_or(|l| l == &d.2))
            .map(|d| d.4)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
        let _ = write!(
            body,
            "<td class=n>{}</td><td class=n>{}</td></tr>",
            if other > 0 {
                other.to_string()
            } else {
                String::new()
            },
            oldest.map(age).unwrap_or_default()
        );
    }
    body.push_str("</tbody></table></div>");
    let throughput = s.store.throughput(60).await.unwrap_or_default();
    let throughput: Vec<_> = throughput
        .into_iter()
        .filter(|r| filter.template.as_ref().is_none_or(|t| t == &r.template))
        .collect();
    let _ = write!(
        body,
        "<h2>Completed and failed per minute, last hour</h2><div id=chart data-live>{}</div>{LIVE}",
        draw::throughput(&throughput, now, 60)
    );
    page("Overview", Some(&v), &body).into_response()
}

/// Seconds as a short age: `42 s`, `7 min`, `3 h`, `2 d`.
fn age(secs: f64) -> String {
    match secs {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.0} h", s / 3600.0),
        s => format!("{:.0} d", s / 86_400.0),
    }
}

#[derive(Deserialize)]
pub(super) struct FacetQuery {
    template: String,
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
        template: None,
        step: None,
        status: None,
        lane: q.lane.clone(),
        milestone: q.milestone.clone(),
        property: q.property.clone(),
    };
    let filter = match f.to_store() {
        Ok(filter) => filter,
        Err(e) => return failure(&e),
    };
    let page_no = q.page.unwrap_or(1).max(1);
    let (rows, total) = match tokio::try_join!(
        s.store.steps_in(
            &q.template,
            &q.step,
            &q.status,
            &filter,
            PAGE,
            (page_no - 1).saturating_mul(PAGE)
        ),
        s.store
            .steps_in_all(&q.template, &q.step, &q.status, &filter, 0)
    ) {
        Ok((r, (total, _))) => (r, total),
        Err(e) => return failure(&e.to_string()),
    };
    let acts = v.role >= Role::Robot;
    let narrowed = if filter.narrows() {
        let mut parts = Vec::new();
        if let Some(l) = &filter.lane {
            parts.push(format!("lane <b>{}</b>", esc(l)));
        }
        if let Some(m) = &filter.milestone {
            parts.push(format!("reached <b>{}</b>", esc(m)));
        }
        if let Some((k, val)) = &filter.property {
            parts.push(format!("<b>{}</b> = <b>{}</b>", esc(k), esc(val)));
        }
        format!(", {}", parts.join(", "))
    } else {
        String::new()
    };
    let base = format!(
        "/ui/steps?template={}&step={}&status={}{}",
        enc(&q.template),
        enc(&q.step),
        enc(&q.status),
        f.query()
    );
    let here = if page_no > 1 {
        format!("{base}&page={page_no}")
    } else {
        base.clone()
    };
    let pages = ((total + PAGE - 1) / PAGE).max(1);
    let first = (page_no - 1) * PAGE + 1;
    let shown = if rows.is_empty() {
        String::new()
    } else {
        format!(
            "; showing {}–{}",
            count(first),
            count(first + rows.len() as i64 - 1)
        )
    };
    let mut body = format!(
        "<p id=summary data-live data-total={total}>{} steps of <b>{}:{}</b> in <b>{}</b>{narrowed}{shown} (most recently changed first).</p>",
        count(total),
        esc(&q.template),
        esc(&q.step),
        esc(&q.status)
    );
    let pager = pager(&base, page_no, pages);
    if let Some(done) = given(&q.done) {
        let _ = write!(body, "<p class=done role=status>{}</p>", esc(&done));
    }
    if acts {
        let _ = write!(
            body,
            "<form method=post action=/ui/steps/act id=act data-chosen><input type=hidden name=csrf value=\"{}\"><input type=hidden name=back value=\"{}\">",
            esc(&v.csrf),
            esc(&here)
        );
        body.push_str("<p><label><input type=checkbox id=all> all on this page</label> <button name=action value=retry id=retry data-verb=Retry>Retry chosen</button> <button name=action value=skip id=skip data-verb=Skip>Skip chosen</button> <label>priority <input name=priority id=priority type=number value=100 class=narrow></label> <button name=action value=prioritize id=prioritize data-verb=Prioritize>Prioritize chosen</button></p>");
    }
    body.push_str(&pager);
    body.push_str("<table id=rows data-live><thead><tr><th></th><th scope=col>object</th><th scope=col class=n>workflow</th><th scope=col>step</th><th scope=col>lane</th><th scope=col class=n>attempts</th><th scope=col>message</th><th scope=col>changed</th></tr></thead><tbody>");
    for r in &rows {
        let check = if acts {
            format!(
                "<input type=checkbox name=id value={} aria-label=\"choose {}\">",
                r.id,
                esc(&r.object_id)
            )
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr><td>{check}</td><td><a href=\"/ui/objects/{}\">{}</a></td><td class=n>{}</td><td>{}</td><td>{}</td><td class=n>{}/{}</td><td>{}</td><td>{}</td></tr>",
            esc(&enc(&r.object_id)),
            esc(&r.object_id),
            r.workflow_id,
            esc(&r.name),
            esc(&r.lane),
            r.attempts,
            r.max_attempts,
            esc(&crate::output::step_remark(
                &r.status,
                r.error_message.as_deref(),
                r.note.as_deref(),
                r.run_at,
                chrono::Utc::now()
            )),
            r.updated_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
    body.push_str("</tbody></table>");
    if acts {
        body.push_str("</form>");
    }
    body.push_str(&pager);
    if acts && total > 0 {
        body.push_str(&act_on_all(&v.csrf, &here, &q, &f, total));
    }
    body.push_str(LIVE);
    page(
        &format!("{}:{} {}", q.template, q.step, q.status),
        Some(&v),
        &body,
    )
    .into_response()
}

/// A count as people read it: `10,000`.
pub(super) fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Links to the previous and next pages, and where this one is.
fn pager(base: &str, page_no: i64, pages: i64) -> String {
    if pages <= 1 {
        return String::new();
    }
    let link = |n: i64, text: &str, rel: &str| {
        format!(
            "<a href=\"{}&page={n}\" rel={rel} id=page-{rel}>{text}</a>",
            esc(base)
        )
    };
    let prev = if page_no > 1 {
        link(page_no - 1, "← newer", "prev")
    } else {
        String::new()
    };
    let next = if page_no < pages {
        link(page_no + 1, "older →", "next")
    } else {
        String::new()
    };
    format!(
        "<nav class=pager aria-label=pages>{prev} <span>page {} of {}</span> {next}</nav>",
        count(page_no),
        count(pages)
    )
}

/// Forms that act on every step the facet matches, not just the page shown: the server finds
/// them again when the form arrives, and the browser first asks, naming how many.
fn act_on_all(csrf: &str, back: &str, q: &FacetQuery, f: &Filters, total: i64) -> String {
    let mut hidden = String::new();
    for (name, v) in [
        ("csrf", Some(csrf.to_string())),
        ("back", Some(back.to_string())),
        ("scope", Some("all".to_string())),
        ("template", Some(q.template.clone())),
        ("step", Some(q.step.clone())),
        ("status", Some(q.status.clone())),
        ("lane", given(&f.lane)),
        ("milestone", given(&f.milestone)),
        ("property", given(&f.property)),
        ("expected", Some(total.to_string())),
    ] {
        if let Some(v) = v {
            let _ = write!(
                hidden,
                "<input type=hidden name={name} value=\"{}\">",
                esc(&v)
            );
        }
    }
    let n = count(total);
    let what = format!("{}:{} in {}", q.template, q.step, q.status);
    let form = |action: &str, verb: &str, extra: &str| {
        format!(
            "<form method=post action=/ui/steps/act class=inline id=all-{action} data-confirm=\"{}\">{hidden}<input type=hidden name=action value={action}>{extra}<button>{verb} all {n} matching</button></form>",
            esc(&format!(
                "{verb} all {n} steps of {what}{}?",
                if total > ALL_MAX {
                    format!(" (the first {} of them)", count(ALL_MAX))
                } else {
                    String::new()
                }
            ))
        )
    };
    format!(
        "<div class=all-matching>{}{}{}</div>",
        form("retry", "Retry", ""),
        form("skip", "Skip", ""),
        form(
            "prioritize",
            "Prioritize",
            "<input name=priority type=number value=100 class=narrow aria-label=priority> "
        )
    )
}
