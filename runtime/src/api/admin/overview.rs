//! The overview: template × step × status counts, the age of each queue's head, a sparkline of
//! each step's completions over the last hour, Pause/Resume per step, and throughput per
//! template. It narrows to a template, step, status, lane, milestone or property given in the
//! URL, and refreshes its `data-live` regions in place: the page fetches itself and swaps those
//! regions, so a half-typed filter and the scroll position stay put.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Duration, DurationRound, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::{draw, failure, page, unusable, viewer};
use crate::api::AppState;
use crate::store::{FacetFilter, Role, StepThroughput, queue_key};

/// The statuses as columns, in the order a step goes through them.
pub(super) const COLUMNS: [&str; 9] = [
    "waiting",
    "scheduled",
    "ready",
    "started",
    "retrying",
    "error",
    "exception",
    "completed",
    "skipped",
];

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

pub(super) fn given(v: &Option<String>) -> Option<String> {
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

    /// The filters but the template as query pairs, to carry into a facet's link (which names
    /// its template).
    pub(super) fn carried(&self) -> Vec<(&'static str, String)> {
        [
            ("lane", &self.lane),
            ("milestone", &self.milestone),
            ("property", &self.property),
        ]
        .into_iter()
        .filter_map(|(name, v)| given(v).map(|v| (name, v)))
        .collect()
    }

    fn form(&self) -> Markup {
        let fields = [
            ("template", "template", &self.template, "any"),
            ("step", "step", &self.step, "any"),
            ("status", "status", &self.status, "any"),
            ("lane", "lane", &self.lane, "any"),
            ("milestone", "reached milestone", &self.milestone, "any"),
            ("property", "property", &self.property, "key=value"),
        ];
        // The known names as suggestions (`Known::datalists`), so a typo is hard to make.
        let list = |name: &str| match name {
            "template" | "step" | "status" | "milestone" => Some(format!("known-{name}")),
            _ => None,
        };
        html! {
            form.filters method="get" action="/" aria-label="filters" {
                @for (name, label, v, hint) in fields {
                    label {
                        (label)
                        input name=(name) id={ "filter-" (name) } list=[list(name)] value=(given(v).unwrap_or_default()) placeholder=(hint);
                    }
                }
                button { "Filter" }
                " "
                a href="/" { "clear" }
            }
        }
    }
}

/// A URL with its query, each value percent-encoded.
pub(super) fn url(path: &str, pairs: &[(&str, String)]) -> String {
    match serde_urlencoded::to_string(pairs) {
        Ok(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
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
        Err(e) => return super::bad_address(&e),
    };
    let mut facets = match s.store.facets_where(&filter).await {
        Ok(f) => f,
        Err(e) => return failure(&e.to_string()),
    };
    // A name no template, step or count knows is said, not answered with an empty table an
    // operator checking for errors would read as "none".
    let templates = s.store.template_list().await.unwrap_or_default();
    let known = super::known::Known::of(&templates, &facets);
    let unknown = known.unknown(
        given(&f.template).as_deref(),
        given(&f.step).as_deref(),
        given(&f.status).as_deref(),
        given(&f.milestone).as_deref(),
    );
    // Step and status are what the counts are kept by: narrowed here.
    let (step, status) = (given(&f.step), given(&f.status));
    facets.retain(|x| {
        step.as_ref().is_none_or(|s| s == &x.step) && status.as_ref().is_none_or(|s| s == &x.status)
    });

    let paused = s.store.paused_list().await.unwrap_or_default();
    let by_step = s.store.throughput_by_step(60).await.unwrap_or_default();
    let acts = v.role >= Role::Robot;
    let mut rows: Vec<(String, String)> = Vec::new();
    for f in &facets {
        let key = (f.template.clone(), f.step.clone());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    // In the templates' order and each template's step order, whatever the counts' order
    // (an archive used to reorder the rows); generated steps after their template's own.
    let place = |t: &str, st: &str| -> (usize, usize) {
        let ti = templates
            .iter()
            .position(|x| x.name == t)
            .unwrap_or(usize::MAX);
        let si = templates
            .get(ti)
            .and_then(|x| x.spec.steps.iter().position(|s| s.name == st))
            .unwrap_or(usize::MAX);
        (ti, si)
    };
    rows.sort_by(|a, b| place(&a.0, &a.1).cmp(&place(&b.0, &b.1)).then(a.cmp(b)));
    // Every loaded workflow template the filters do not rule out, said when it has nothing
    // unfinished rather than dropped without a note.
    let narrowed = step.is_some()
        || status.is_some()
        || filter.lane.is_some()
        || filter.milestone.is_some()
        || filter.property.is_some();
    let idle: Vec<&str> = templates
        .iter()
        .filter(|x| x.kind == "steps") // a machine's jobs are not steps: its own page counts them
        .filter(|x| filter.template.as_ref().is_none_or(|t| t == &x.name))
        .filter(|x| !rows.iter().any(|(t, _)| t == &x.name))
        .map(|x| x.name.as_str())
        .collect();
    // The head of each queue with ready steps: how long the next step to run has waited.
    let ready_rows: Vec<(String, String)> = rows
        .iter()
        .filter(|(t, st)| {
            facets
                .iter()
                .any(|f| &f.template == t && &f.step == st && f.status == "ready")
        })
        .cloned()
        .collect();
    let heads = s
        .store
        .queue_heads(&ready_rows, filter.lane.as_deref())
        .await
        .unwrap_or_default();
    let head = |t: &str, st: &str| heads.get(&(t.to_string(), st.to_string())).copied();
    // Steps no worker of this runtime takes: skip-queue ones (never), and ones without a
    // function here (a person's, or an outside robot's through the API).
    let kind_of = |t: &str, st: &str| -> &'static str {
        match templates
            .iter()
            .find(|x| x.name == t)
            .and_then(|x| x.spec.step(st))
        {
            Some(spec) if spec.skip_queue => "skip-queue",
            Some(spec) if !spec.is_run() => "outside",
            _ => "",
        }
    };
    let now = Utc::now();
    let carry = f.carried();
    let count_of = |t: &str, st: &str, c: &str| -> i64 {
        facets
            .iter()
            .filter(|f| f.template == t && f.step == st && f.status == c)
            .map(|f| f.count)
            .sum()
    };
    let throughput = s.store.throughput(60).await.unwrap_or_default();
    let throughput: Vec<_> = throughput
        .into_iter()
        .filter(|r| filter.template.as_ref().is_none_or(|t| t == &r.template))
        .collect();
    let body = html! {
        p { "Steps of every template by status; a count lists its steps. The counts and the chart follow the work as it happens." }
        (f.form())
        (known.datalists())
        @for u in &unknown {
            p.error role="alert" data-unknown { (u) }
        }
        div #counts data-live {
            p.asof { "as of " (now.format("%H:%M:%S")) }
            table #facets {
                thead { tr {
                    th scope="col" { "template" }
                    th scope="col" { "step" }
                    @for c in COLUMNS { th scope="col" class="n" { (c) } }
                    th scope="col" class="n" { "other" }
                    th scope="col" class="n" title="how long the step a worker takes next has waited" { "head waiting" }
                    th scope="col" { "last hour" }
                } }
                tbody {
                    @for (t, st) in &rows {
                        @let pause = paused.iter().find(|p| &p.template == t && p.step == queue_key(st));
                        tr {
                            td { (t) }
                            td {
                                // A step's name stays on one line (it broke at its hyphen).
                                span.name { (st) }
                                @if let Some(p) = pause {
                                    " "
                                    span.paused data-paused={ (t) ":" (st) } title={ "paused " (p.paused_at.format("%Y-%m-%d %H:%M")) " by " (p.paused_by) (p.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()) } { "paused" }
                                }
                                @if acts {
                                    " "
                                    form.inline method="post" action="/ui/pause" {
                                        input type="hidden" name="csrf" value=(v.csrf);
                                        input type="hidden" name="template" value=(t);
                                        input type="hidden" name="step" value=(st);
                                        @if pause.is_some() {
                                            button.small name="action" value="resume" title="workers claim again" { "Resume" }
                                        } @else {
                                            button.small name="action" value="pause" title="no worker claims until resumed" { "Pause" }
                                        }
                                    }
                                }
                            }
                            @for c in COLUMNS {
                                @let n = count_of(t, st, c);
                                @if n == 0 {
                                    td.n {}
                                } @else {
                                    td class={ "n " (c) } {
                                        a data-facet={ (t) ":" (st) ":" (c) } href=(facet_url(t, st, c, &carry)) { (count(n)) }
                                    }
                                }
                            }
                            @let other: i64 = facets.iter().filter(|f| &f.template == t && &f.step == st && !COLUMNS.contains(&f.status.as_str())).map(|f| f.count).sum();
                            td.n { @if other > 0 { (count(other)) } }
                            @match (kind_of(t, st), head(t, st)) {
                                ("skip-queue", Some(_)) => { td.n.mute title="skip-queue: no worker takes it; it is set through the API, CLI or page" { "not queued" } }
                                ("outside", Some(a)) => { td.n title="no function here: a person or an outside robot completes it" { (age(a)) " (outside)" } }
                                (_, Some(a)) => { td.n { (age(a)) } }
                                (_, None) => { td.n {} }
                            }
                            td { (sparkline(&by_step, t, st, now)) }
                        }
                    }
                    @if !narrowed {
                        @for t in &idle {
                            tr.mute data-idle=(t) {
                                td { (t) }
                                td colspan=(COLUMNS.len() + 4) { "no unfinished work" }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Completed and failed per minute, last hour" }
        div #chart data-live { (draw::throughput(&throughput, now, 60)) }
    };
    page("Overview", Some(&v), body).into_response()
}

/// A facet's list, its filters carried.
fn facet_url(t: &str, st: &str, c: &str, carry: &[(&'static str, String)]) -> String {
    let mut pairs = vec![
        ("template", t.to_string()),
        ("step", st.to_string()),
        ("status", c.to_string()),
    ];
    pairs.extend(carry.iter().cloned());
    url("/ui/steps", &pairs)
}

/// A step's completions per minute over the last hour as a small line (failed attempts as
/// red ticks under it); empty when nothing happened.
fn sparkline(rows: &[StepThroughput], t: &str, st: &str, now: DateTime<Utc>) -> Markup {
    let end = now.duration_trunc(Duration::minutes(1)).unwrap_or(now);
    let start = end - Duration::minutes(59);
    let mut done = [0i64; 60];
    let mut failed = [0i64; 60];
    for r in rows.iter().filter(|r| r.template == t && r.step == st) {
        let slot = (r.minute - start).num_minutes();
        if (0..60).contains(&slot) {
            done[slot as usize] += r.completed;
            failed[slot as usize] += r.failed;
        }
    }
    let (total, fails): (i64, i64) = (done.iter().sum(), failed.iter().sum());
    if total == 0 && fails == 0 {
        return html! {};
    }
    let peak = done.iter().copied().max().unwrap_or(0).max(1) as f64;
    let points: Vec<String> = done
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{},{:.1}", i * 2, 16.0 - 14.0 * (*d as f64) / peak))
        .collect();
    html! {
        svg.spark role="img" viewBox="0 0 120 20" width="120" height="20" xmlns="http://www.w3.org/2000/svg" {
            title { (t) ":" (st) ": " (total) " completed, " (fails) " failed in the last hour" }
            polyline points=(points.join(" ")) fill="none" stroke="currentColor" {}
            @for (i, f) in failed.iter().enumerate() {
                @if *f > 0 { rect.bar-failed x=(i * 2) y="17" width="2" height="3" {} }
            }
        }
    }
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

/// The page numbers a pager shows: the first, the last, and those next to the current one.
pub(super) fn page_numbers(current: i64, pages: i64) -> Vec<i64> {
    let mut out: Vec<i64> = [1, current - 1, current, current + 1, pages]
        .into_iter()
        .filter(|n| (1..=pages).contains(n))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod pager_tests {
    #[test]
    fn a_pager_shows_the_ends_and_the_neighbours() {
        assert_eq!(super::page_numbers(1, 1), vec![1]);
        assert_eq!(super::page_numbers(5, 40), vec![1, 4, 5, 6, 40]);
        assert_eq!(super::page_numbers(40, 40), vec![1, 39, 40]);
    }
}
