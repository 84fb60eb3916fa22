//! Pictures for the admin page, drawn on the server as inline SVG (no script, no CDN): a
//! workflow's steps (generated subnets dashed), a template's steps, a machine's states, and
//! the throughput of each template over the last hour. Every label goes through `esc`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Duration, DurationRound, Utc};

use super::esc;
use crate::model::machine::Machine;
use crate::model::template::StepSpec;
use crate::store::{StepRow, Throughput};

/// A node: its label (also its tooltip, with the second line), a second line, a CSS class.
struct Node {
    label: String,
    sub: String,
    class: String,
}

/// An edge: from, to, a label, dashed.
struct Edge {
    from: usize,
    to: usize,
    label: Option<String>,
    dashed: bool,
}

const W: i64 = 170;
const H: i64 = 42;
const GAP_X: i64 = 26;
const GAP_Y: i64 = 44;

/// Layers: without `roots` (a DAG), each node one below its deepest prerequisite; with
/// `roots` (a machine, whose transitions may loop), breadth-first distance from them. Nodes
/// nothing reaches go on a last layer of their own.
fn layers(n: usize, edges: &[Edge], roots: &[usize]) -> Vec<usize> {
    let mut layer = vec![usize::MAX; n];
    if roots.is_empty() {
        for (i, l) in layer.iter_mut().enumerate() {
            if !edges.iter().any(|e| e.to == i && e.from != i) {
                *l = 0;
            }
        }
        // Longest paths settle within n passes in a DAG; the bound keeps a cycle finite.
        for _ in 0..n {
            let mut changed = false;
            for e in edges {
                if e.from == e.to || layer[e.from] == usize::MAX {
                    continue;
                }
                let want = layer[e.from] + 1;
                if want < n && (layer[e.to] == usize::MAX || layer[e.to] < want) {
                    layer[e.to] = want;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
    } else {
        let mut queue: std::collections::VecDeque<usize> = roots.iter().copied().collect();
        for &r in roots {
            layer[r] = 0;
        }
        while let Some(a) = queue.pop_front() {
            for e in edges.iter().filter(|e| e.from == a) {
                if layer[e.to] == usize::MAX {
                    layer[e.to] = layer[a] + 1;
                    queue.push_back(e.to);
                }
            }
        }
    }
    let last = layer
        .iter()
        .filter(|&&l| l != usize::MAX)
        .max()
        .map_or(0, |l| l + 1);
    layer
        .into_iter()
        .map(|l| if l == usize::MAX { last } else { l })
        .collect()
}

/// Lay the nodes out in layers, top to bottom, and draw them.
fn svg(id: &str, title: &str, nodes: &[Node], edges: &[Edge], roots: &[usize]) -> String {
    if nodes.is_empty() {
        return String::new();
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
    let id = id.as_str();
    let layer = layers(nodes.len(), edges, roots);
    let mut at = vec![(0i64, 0i64); nodes.len()];
    let mut per_layer: BTreeMap<usize, i64> = BTreeMap::new();
    for (i, &l) in layer.iter().enumerate() {
        let k = per_layer.entry(l).or_insert(0);
        at[i] = (10 + *k * (W + GAP_X), 10 + l as i64 * (H + GAP_Y));
        *k += 1;
    }
    let width = per_layer.values().max().copied().unwrap_or(1) * (W + GAP_X) + 20;
    let height = (per_layer.keys().max().copied().unwrap_or(0) as i64 + 1) * (H + GAP_Y) + 10;
    let mut s = format!(
        "<svg class=graph id=\"{}\" role=img viewBox=\"0 0 {width} {height}\" width={width} height={height} xmlns=\"http://www.w3.org/2000/svg\"><title>{}</title><defs><marker id=\"{}-arrow\" viewBox=\"0 0 10 10\" refX=9 refY=5 markerWidth=7 markerHeight=7 orient=auto-start-reverse><path d=\"M0,0L10,5L0,10z\" fill=currentColor /></marker></defs>",
        esc(id),
        esc(title),
        esc(id)
    );
    for e in edges {
        let (ax, ay) = at[e.from];
        let (bx, by) = at[e.to];
        let dash = if e.dashed {
            " stroke-dasharray=\"5 4\""
        } else {
            ""
        };
        let (x1, y1, x2, y2) = (ax + W / 2, ay + H, bx + W / 2, by);
        let path = if e.from == e.to {
            // A self-loop on the node's right side.
            format!("M{},{} c40,-20 40,{} 0,{}", ax + W, ay + 10, H, H - 20)
        } else if by > ay {
            format!("M{x1},{y1} L{x2},{y2}")
        } else {
            // Back or sideways (a machine's loop): curve round the right.
            format!(
                "M{},{} C{},{} {},{} {},{}",
                ax + W,
                ay + H / 2,
                ax + W + 60,
                ay + H / 2,
                bx + W + 60,
                by + H / 2,
                bx + W,
                by + H / 2
            )
        };
        let _ = write!(
            s,
            "<path class=edge d=\"{path}\" fill=none stroke=currentColor{dash} marker-end=\"url(#{}-arrow)\" />",
            esc(id)
        );
        if let Some(label) = &e.label {
            let (lx, ly) = if e.from == e.to {
                (ax + W + 34, ay + H / 2)
            } else if by > ay {
                ((x1 + x2) / 2 + 4, (y1 + y2) / 2)
            } else {
                (ax.max(bx) + W + 40, (ay + by) / 2 + H / 2)
            };
            let _ = write!(
                s,
                "<text class=label x={lx} y={ly} font-size=11>{}</text>",
                esc(label)
            );
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = at[i];
        let short: String = if n.label.chars().count() > 22 {
            n.label.chars().take(21).chain(['…']).collect()
        } else {
            n.label.clone()
        };
        let _ = write!(
            s,
            "<g class=\"node {}\" data-node=\"{}\"><title>{} — {}</title><rect x={x} y={y} width={W} height={H} rx=6 /><text x={} y={} font-size=13 text-anchor=middle>{}</text><text x={} y={} font-size=11 text-anchor=middle class=sub>{}</text></g>",
            esc(&n.class),
            esc(&n.label),
            esc(&n.label),
            esc(&n.sub),
            x + W / 2,
            y + 17,
            esc(&short),
            x + W / 2,
            y + 33,
            esc(&n.sub)
        );
    }
    s.push_str("</svg>");
    s
}

/// A workflow's steps with their statuses; a generator's composed steps hang from it, dashed.
pub(super) fn workflow(id: &str, steps: &[StepRow]) -> String {
    let nodes: Vec<Node> = steps
        .iter()
        .map(|st| Node {
            label: st.name.clone(),
            sub: match &st.generated {
                Some(g) => format!(
                    "{} · from {}",
                    st.status,
                    g["generator"].as_str().unwrap_or("?")
                ),
                None => st.status.clone(),
            },
            class: st.status.clone(),
        })
        .collect();
    let edges: Vec<Edge> = crate::graph::edges(steps)
        .into_iter()
        .map(|(from, to, dashed)| Edge {
            from,
            to,
            label: None,
            dashed,
        })
        .collect();
    svg(id, "workflow steps", &nodes, &edges, &[])
}

/// A template's steps and their prerequisites.
pub(super) fn template(id: &str, steps: &[StepSpec]) -> String {
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
                });
            }
        }
    }
    svg(id, "template steps", &nodes, &edges, &[])
}

/// A machine's states and transitions (labelled by signal), `current` marked; global signals
/// are listed under the drawing rather than drawn from every state.
pub(super) fn machine(id: &str, m: &Machine, current: Option<&str>) -> String {
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
                });
            }
        }
    }
    let roots: Vec<usize> = index.get(m.initial.as_str()).copied().into_iter().collect();
    let mut s = svg(id, "machine states", &nodes, &edges, &roots);
    if !m.global.is_empty() {
        s.push_str("<p class=globals>from any state: ");
        let list: Vec<String> = m
            .global
            .iter()
            .map(|(signal, t)| format!("<b>{}</b> → {}", esc(signal), esc(t.target())))
            .collect();
        s.push_str(&list.join(", "));
        s.push_str("</p>");
    }
    s
}

/// Per template, completed steps (up) and failed attempts (down) per minute over the last
/// `minutes` minutes ending at `now`, as one small bar chart each.
pub(super) fn throughput(rows: &[Throughput], now: DateTime<Utc>, minutes: i64) -> String {
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
        return format!("<p>Nothing completed or failed in the last {minutes} minutes.</p>");
    }
    let (bw, half) = (8i64, 36i64);
    let width = bw * minutes + 2;
    let mut s = String::from("<table id=throughput><tbody>");
    for (template, slots) in &per {
        let peak = slots
            .iter()
            .map(|(c, f)| (*c).max(*f))
            .max()
            .unwrap_or(0)
            .max(1);
        let (done, failed): (i64, i64) = slots.iter().fold((0, 0), |(a, b), (c, f)| (a + c, b + f));
        let _ = write!(
            s,
            "<tr data-template=\"{}\"><td>{}<br><small><span class=completed>{done} completed</span>, <span class=error>{failed} failed</span></small></td><td><svg role=img viewBox=\"0 0 {width} {}\" width={width} height={} xmlns=\"http://www.w3.org/2000/svg\"><title>{}: completed and failed per minute, last {minutes} minutes</title><line x1=0 x2={width} y1={half} y2={half} stroke=currentColor stroke-opacity=.3 />",
            esc(template),
            esc(template),
            2 * half,
            2 * half,
            esc(template)
        );
        for (i, (c, f)) in slots.iter().enumerate() {
            let x = 1 + i as i64 * bw;
            let at = (start + Duration::minutes(i as i64)).format("%H:%M");
            if *c > 0 {
                let h = (c * (half - 2) / peak).max(1);
                let _ = write!(
                    s,
                    "<rect class=bar-completed x={x} y={} width={} height={h}><title>{at}: {c} completed</title></rect>",
                    half - h,
                    bw - 1
                );
            }
            if *f > 0 {
                let h = (f * (half - 2) / peak).max(1);
                let _ = write!(
                    s,
                    "<rect class=bar-failed x={x} y={half} width={} height={h}><title>{at}: {f} failed</title></rect>",
                    bw - 1
                );
            }
        }
        s.push_str("</svg></td></tr>");
    }
    s.push_str("</tbody></table>");
    s
}
