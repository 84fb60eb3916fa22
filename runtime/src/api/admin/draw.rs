//! Pictures for the admin page, drawn on the server as inline SVG (no script, no CDN): a
//! workflow's steps (generated subnets dashed), a template's steps, a machine's states, and
//! the throughput of each template over the last hour; maud escapes every label.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, DurationRound, Utc};

use maud::{Markup, html};

use super::layout;
use crate::model::machine::Machine;
use crate::model::template::StepSpec;
use crate::store::{StepRow, Throughput};

/// A node: its label (also its tooltip, with the second line), a second line, a CSS class, and
/// the subnet it belongs to (its generator), drawn as a dashed frame round its members.
struct Node {
    label: String,
    sub: String,
    class: String,
    group: Option<String>,
}

/// An edge: from, to, a label, dashed, on the path a machine took.
struct Edge {
    from: usize,
    to: usize,
    label: Option<String>,
    dashed: bool,
    taken: bool,
}

/// The longest label drawn whole; a longer one keeps its start and its end (where instance
/// numbers are) around an ellipsis, the whole of it in the tooltip.
const LABEL_MAX: usize = 48;

fn fit(label: &str) -> String {
    let n = label.chars().count();
    if n <= LABEL_MAX {
        return label.to_string();
    }
    let head: String = label.chars().take(LABEL_MAX / 2 - 1).collect();
    let tail: String = label.chars().skip(n - LABEL_MAX / 2).collect();
    format!("{head}…{tail}")
}

/// Lay the nodes out (`layout.rs`) and draw them.
fn svg(id: &str, title: &str, nodes: &[Node], edges: &[Edge], roots: &[usize]) -> Markup {
    if nodes.is_empty() {
        return html! {};
    }
    // The id names the arrow marker in `url(#…)`: keep it to characters that need no quoting.
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let shown: Vec<String> = nodes.iter().map(|n| fit(&n.label)).collect();
    let spec: Vec<(usize, usize, Option<&str>)> = edges
        .iter()
        .map(|e| (e.from, e.to, e.label.as_deref()))
        .collect();
    // Subnets: a dashed frame round each generator's steps, behind them, named.
    let mut members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(g) = &n.group {
            members.entry(g).or_default().push(i);
        }
    }
    let frame_names: Vec<String> = members.keys().map(|g| format!("subnet of {g}")).collect();
    let groups: Vec<(Vec<usize>, usize)> = members
        .values()
        .zip(&frame_names)
        .map(|(m, name)| (m.clone(), name.chars().count()))
        .collect();
    let l = layout::layout(&layout::Input {
        // The second line is smaller (11 px against 13).
        widths: nodes
            .iter()
            .zip(&shown)
            .map(|(n, label)| label.chars().count().max(n.sub.chars().count() * 6 / 7))
            .collect(),
        edges: &spec,
        roots,
        groups: &groups,
    });
    let (width, height) = (l.width.ceil(), l.height.ceil());
    let arrow = format!("url(#{id}-arrow)");
    let d = |path: &[(f64, f64)]| -> String {
        path.iter()
            .enumerate()
            .map(|(k, (x, y))| format!("{}{x:.1},{y:.1}", if k == 0 { 'M' } else { 'L' }))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let h = layout::H;
    // Pan and zoom (app.js): the buttons or Ctrl and the wheel zoom, dragging or scrolling pans;
    // until then the drawing fits the page's width.
    html! {
        div.graph-frame data-graph=(id) {
        div.zoom role="group" aria-label={ "zoom " (title) } {
            button.small type="button" data-zoom="out" title="Zoom out" { "−" }
            button.small type="button" data-zoom="fit" title="Fit the width" { "Fit" }
            button.small type="button" data-zoom="in" title="Zoom in" { "+" }
        }
        div.graph-view {
        svg.graph id=(id) role="img" viewBox={ "0 0 " (width) " " (height) } width=(width) height=(height) xmlns="http://www.w3.org/2000/svg" {
            title { (title) }
            defs {
                marker id={ (id) "-arrow" } viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                    path d="M0,0L10,5L0,10z" fill="currentColor" {}
                }
            }
            @for ((g, name), ((x0, y0, x1, y1), (tx, ty))) in members.keys().zip(&frame_names).zip(&l.frames) {
                g.subnet data-subnet=(g) {
                    rect x=(format!("{x0:.1}")) y=(format!("{y0:.1}")) width=(format!("{:.1}", x1 - x0)) height=(format!("{:.1}", y1 - y0)) rx="8" {}
                    text.sub x=(format!("{tx:.1}")) y=(format!("{ty:.1}")) font-size="10" { (name) }
                }
            }
            @for (e, path) in edges.iter().zip(&l.paths) {
                path class=(if e.taken { "edge taken" } else { "edge" }) d=(d(path)) fill="none" stroke="currentColor" stroke-dasharray=[e.dashed.then_some("5 4")] marker-end=(arrow) {}
            }
            @for (e, at) in edges.iter().zip(&l.labels) {
                @if let (Some(label), Some((x, y))) = (&e.label, at) {
                    text.label x=(format!("{x:.1}")) y=(format!("{y:.1}")) font-size="11" { (label) }
                }
            }
            @for (i, n) in nodes.iter().enumerate() {
                @let (x, y, w) = l.boxes[i];
                g class={ "node " (n.class) } data-node=(n.label) {
                    title { (n.label) " — " (n.sub) }
                    rect x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(format!("{w:.1}")) height=(h) rx="6" {}
                    text x=(format!("{:.1}", x + w / 2.0)) y=(format!("{:.1}", if n.sub.is_empty() { y + 26.0 } else { y + 17.0 })) font-size="13" text-anchor="middle" { (shown[i]) }
                    text.sub x=(format!("{:.1}", x + w / 2.0)) y=(format!("{:.1}", y + 33.0)) font-size="11" text-anchor="middle" { (n.sub) }
                }
            }
        }
        }
        }
    }
}

/// A workflow's steps with their statuses; a generator's composed steps hang from it, dashed.
pub(super) fn workflow(id: &str, steps: &[StepRow]) -> Markup {
    let nodes: Vec<Node> = steps
        .iter()
        .map(|st| {
            // A generated step reads as its bricklet instance (`b4#2/keywords`), framed with
            // its generator's subnet; a machine's call step as what it calls.
            let generator = st
                .generated
                .as_ref()
                .and_then(|g| g["generator"].as_str())
                .map(String::from);
            let label = match &generator {
                Some(g) => st
                    .name
                    .strip_prefix(&format!("{g}/"))
                    .unwrap_or(&st.name)
                    .to_string(),
                None => st.name.clone(),
            };
            let sub = if st.name.starts_with("call/") {
                format!("{} · a machine's call", st.status)
            } else {
                st.status.clone()
            };
            Node {
                label,
                sub,
                class: st.status.clone(),
                group: generator,
            }
        })
        .collect();
    let edges: Vec<Edge> = crate::graph::edges(steps)
        .into_iter()
        .map(|(from, to, dashed)| Edge {
            from,
            to,
            label: None,
            dashed,
            taken: false,
        })
        .collect();
    svg(id, "workflow steps", &nodes, &edges, &[])
}

/// A template's steps and their prerequisites.
pub(super) fn template(id: &str, steps: &[StepSpec]) -> Markup {
    let index: BTreeMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let nodes: Vec<Node> = steps
        .iter()
        .map(|st| Node {
            label: st.name.clone(),
            sub: st.lifecycle.clone().unwrap_or_default(),
            class: "spec".into(),
            group: None,
        })
        .collect();
    let mut edges = Vec::new();
    for (i, st) in steps.iter().enumerate() {
        for p in &st.prereqs {
            if let Some(&j) = index.get(p.as_str()) {
                edges.push(Edge {
                    from: j,
                    to: i,
                    label: None,
                    dashed: false,
                    taken: false,
                });
            }
        }
    }
    svg(id, "template steps", &nodes, &edges, &[])
}

/// A machine's states and transitions (labelled by signal), `current` marked and the
/// transitions a job took (`taken`, from → to) drawn heavier; global signals are listed under
/// the drawing rather than drawn from every state.
pub(super) fn machine(
    id: &str,
    m: &Machine,
    current: Option<&str>,
    taken: &[(String, String)],
) -> Markup {
    let names: Vec<&String> = m.states.keys().collect();
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let nodes: Vec<Node> = m
        .states
        .iter()
        .map(|(name, st)| Node {
            label: name.clone(),
            sub: match (Some(name.as_str()) == current, st.is_final) {
                (true, _) => "current".into(),
                (false, true) => "final".into(),
                _ => String::new(),
            },
            class: if Some(name.as_str()) == current {
                "current".into()
            } else if st.is_final {
                "final".into()
            } else {
                "state".into()
            },
            group: None,
        })
        .collect();
    let mut edges = Vec::new();
    for (name, st) in &m.states {
        for (signal, t) in &st.on {
            if let (Some(&a), Some(&b)) = (index.get(name.as_str()), index.get(t.target())) {
                edges.push(Edge {
                    from: a,
                    to: b,
                    label: Some(signal.clone()),
                    dashed: false,
                    taken: taken.iter().any(|(f, t2)| f == name && t2 == t.target()),
                });
            }
        }
    }
    let roots: Vec<usize> = index.get(m.initial.as_str()).copied().into_iter().collect();
    html! {
        (svg(id, "machine states", &nodes, &edges, &roots))
        @if !m.global.is_empty() {
            p.globals {
                "from any state: "
                @for (i, (signal, t)) in m.global.iter().enumerate() {
                    @if i > 0 { ", " }
                    b { (signal) } " → " (t.target())
                }
            }
        }
    }
}

/// Per template, completed steps (up) and failed attempts (down) per minute over the last
/// `minutes` minutes ending at `now`, as one small bar chart each.
pub(super) fn throughput(rows: &[Throughput], now: DateTime<Utc>, minutes: i64) -> Markup {
    let end = now.duration_trunc(Duration::minutes(1)).unwrap_or(now);
    let start = end - Duration::minutes(minutes - 1);
    let mut per: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for r in rows {
        let slot = (r.minute - start).num_minutes();
        if !(0..minutes).contains(&slot) {
            continue;
        }
        let v = per
            .entry(r.template.as_str())
            .or_insert_with(|| vec![(0, 0); minutes as usize]);
        v[slot as usize].0 += r.completed;
        v[slot as usize].1 += r.failed;
    }
    if per.is_empty() {
        return html! { p { "Nothing completed or failed in the last " (minutes) " minutes." } };
    }
    let (bw, half) = (8i64, 36i64);
    let width = bw * minutes + 2;
    html! {
        table #throughput { tbody {
            @for (template, slots) in &per {
                @let peak = slots.iter().map(|(c, f)| (*c).max(*f)).max().unwrap_or(0).max(1);
                @let (done, failed) = slots.iter().fold((0, 0), |(a, b), (c, f)| (a + c, b + f));
                tr data-template=(template) {
                    td {
                        (template) br;
                        small { span.completed { (done) " completed" } ", " span.error { (failed) " failed" } }
                    }
                    td {
                        svg role="img" viewBox={ "0 0 " (width) " " (2 * half) } width=(width) height=(2 * half) xmlns="http://www.w3.org/2000/svg" {
                            title { (template) ": completed and failed per minute, last " (minutes) " minutes" }
                            line x1="0" x2=(width) y1=(half) y2=(half) stroke="currentColor" stroke-opacity=".3" {}
                            @for (i, (c, f)) in slots.iter().enumerate() {
                                @let x = 1 + i as i64 * bw;
                                @let at = (start + Duration::minutes(i as i64)).format("%H:%M");
                                @if *c > 0 {
                                    @let h = (c * (half - 2) / peak).max(1);
                                    rect.bar-completed x=(x) y=(half - h) width=(bw - 1) height=(h) { title { (at) ": " (c) " completed" } }
                                }
                                @if *f > 0 {
                                    @let h = (f * (half - 2) / peak).max(1);
                                    rect.bar-failed x=(x) y=(half) width=(bw - 1) height=(h) { title { (at) ": " (f) " failed" } }
                                }
                            }
                        }
                    }
                }
            }
        } }
    }
}
