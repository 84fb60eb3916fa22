//! A layered (Sugiyama-style) layout for the page's graphs, pure and unit-tested: layers (the
//! longest path for a DAG, breadth-first from the initial state for a machine), a dummy node
//! wherever an edge spans more than one layer so that no edge crosses a box, crossing reduction
//! by barycenters swept down and up, boxes as wide as their labels, and edge labels placed so
//! that they cover no line, arrowhead, box or other label (`place.rs`). Edges that go back up
//! (a machine's loops) run through dummies of their own; the ends meeting a box spread along
//! its side; self-loops sit side by side over a box's top right.

use super::place;

/// Box height, the gaps between boxes and between layers, and the narrowest box.
pub const H: f64 = 42.0;
const GAP_X: f64 = 28.0;
const GAP_Y: f64 = 56.0;
const MIN_W: f64 = 120.0;
const MARGIN: f64 = 12.0;
/// Room above the first layer for a self-loop and its label.
const TOP: f64 = 36.0;
/// More room above a layer with self-loops.
const LOOP_ROOM: f64 = 28.0;
/// Average advance of a character at the label's font size (13 px system sans), generous.
const CHAR_13: f64 = 7.6;
/// And at the edge labels' 11 px.
const CHAR_11: f64 = 6.4;
/// And at a subnet's name's 10 px.
pub const CHAR_10: f64 = 5.9;

/// What to lay out: each node's label width in characters (its longest line), edges as
/// (from, to, label), for a machine its initial nodes, and the subnets framed round their
/// members with a name of so many characters.
pub struct Input<'a> {
    pub widths: Vec<usize>,
    pub edges: &'a [(usize, usize, Option<&'a str>)],
    pub roots: &'a [usize],
    pub groups: &'a [(Vec<usize>, usize)],
}

/// Where everything goes.
#[derive(Debug)]
pub struct Layout {
    /// Each node's top-left corner and width.
    pub boxes: Vec<(f64, f64, f64)>,
    /// Each edge (in the input's order) as a polyline, from the source box's edge to the
    /// target's; self-loops and edges going up are routed round the right.
    pub paths: Vec<Vec<(f64, f64)>>,
    /// Each edge's label position (left baseline), when it has a label.
    pub labels: Vec<Option<(f64, f64)>>,
    /// Each group's frame, and its name's position (left baseline).
    pub frames: Vec<(place::Rect, (f64, f64))>,
    pub width: f64,
    pub height: f64,
}

/// The box width a label of `chars` characters needs.
pub fn box_width(chars: usize) -> f64 {
    (chars as f64 * CHAR_13 + 20.0).max(MIN_W)
}

fn layers(n: usize, edges: &[(usize, usize, Option<&str>)], roots: &[usize]) -> Vec<usize> {
    let mut layer = vec![usize::MAX; n];
    if roots.is_empty() {
        for (i, l) in layer.iter_mut().enumerate() {
            if !edges.iter().any(|e| e.1 == i && e.0 != i) {
                *l = 0;
            }
        }
        // Longest paths settle within n passes in a DAG; the bound keeps a cycle finite.
        for _ in 0..n {
            let mut changed = false;
            for &(a, b, _) in edges {
                if a == b || layer[a] == usize::MAX {
                    continue;
                }
                let want = layer[a] + 1;
                if want < n && (layer[b] == usize::MAX || layer[b] < want) {
                    layer[b] = want;
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
            for &(_, b, _) in edges.iter().filter(|e| e.0 == a) {
                if layer[b] == usize::MAX {
                    layer[b] = layer[a] + 1;
                    queue.push_back(b);
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

/// Lay the graph out.
pub fn layout(input: &Input) -> Layout {
    let n = input.widths.len();
    let layer = layers(n, input.edges, input.roots);
    let depth = layer.iter().max().map_or(0, |l| l + 1);
    // Nodes, then a dummy per layer an edge skips; chains[e] is edge e's nodes, top to bottom
    // (an edge going up, a machine's loop back, is laid out reversed and drawn the right way).
    let mut node_layer = layer.clone();
    let mut width: Vec<f64> = input.widths.iter().map(|&c| box_width(c)).collect();
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(input.edges.len());
    for &(a, b, _) in input.edges {
        if layer[a] == layer[b] {
            chains.push(Vec::new());
            continue;
        }
        let (top, bottom) = if layer[a] < layer[b] { (a, b) } else { (b, a) };
        let mut chain = vec![top];
        for l in layer[top] + 1..layer[bottom] {
            node_layer.push(l);
            width.push(0.0);
            chain.push(node_layer.len() - 1);
        }
        chain.push(bottom);
        chains.push(chain);
    }
    let total = node_layer.len();
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (v, &l) in node_layer.iter().enumerate() {
        order[l].push(v);
    }
    // Neighbours between adjacent layers, from the chains.
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); total];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); total];
    for chain in &chains {
        for w in chain.windows(2) {
            down[w[0]].push(w[1]);
            up[w[1]].push(w[0]);
        }
    }
    let mut pos = vec![0usize; total];
    let place = |order: &Vec<Vec<usize>>, pos: &mut Vec<usize>| {
        for row in order {
            for (i, &v) in row.iter().enumerate() {
                pos[v] = i;
            }
        }
    };
    place(&order, &mut pos);
    let crossings = |order: &Vec<Vec<usize>>, pos: &Vec<usize>| -> usize {
        let mut c = 0;
        for row in order {
            let mut pairs: Vec<(usize, usize)> = Vec::new();
            for &v in row {
                for &w in &down[v] {
                    pairs.push((pos[v], pos[w]));
                }
            }
            for i in 0..pairs.len() {
                for j in i + 1..pairs.len() {
                    let (a, b) = (pairs[i], pairs[j]);
                    if (a.0 < b.0 && a.1 > b.1) || (a.0 > b.0 && a.1 < b.1) {
                        c += 1;
                    }
                }
            }
        }
        c
    };
    // Counting crossings is quadratic in a layer's edges: a big subnet (thousands of
    // instances) gets one barycenter sweep, uncounted, so the page stays fast.
    let small = total <= 300;
    let mut best = (
        if small { crossings(&order, &pos) } else { 0 },
        order.clone(),
    );
    for sweep in 0..(if small { 8 } else { 1 }) {
        let downward = sweep % 2 == 0;
        let rows: Vec<usize> = if downward {
            (1..depth).collect()
        } else {
            (0..depth.saturating_sub(1)).rev().collect()
        };
        for l in rows {
            let mut keyed: Vec<(f64, usize, usize)> = order[l]
                .iter()
                .map(|&v| {
                    let near = if downward { &up[v] } else { &down[v] };
                    let key = if near.is_empty() {
                        pos[v] as f64
                    } else {
                        near.iter().map(|&u| pos[u] as f64).sum::<f64>() / near.len() as f64
                    };
                    (key, pos[v], v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            order[l] = keyed.into_iter().map(|k| k.2).collect();
            place(&order, &mut pos);
        }
        if !small {
            best.1 = order.clone();
            continue;
        }
        let c = crossings(&order, &pos);
        if c < best.0 {
            best = (c, order.clone());
        }
    }
    let order = best.1;
    // x: each layer's boxes side by side, the layer centred on the widest.
    let row_width = |row: &Vec<usize>| -> f64 {
        row.iter().map(|&v| width[v]).sum::<f64>() + GAP_X * row.len().saturating_sub(1) as f64
    };
    let widest = order.iter().map(row_width).fold(0.0, f64::max);
    let mut x = vec![0.0; total];
    let mut y = vec![0.0; total];
    // A layer with self-loops gets more room above it, for the loops and their labels among
    // the edges coming down into it.
    let looped: Vec<bool> = (0..depth)
        .map(|l| input.edges.iter().any(|&(a, b, _)| a == b && layer[a] == l))
        .collect();
    let mut top = TOP;
    for (l, row) in order.iter().enumerate() {
        if l > 0 {
            top += H + GAP_Y + if looped[l] { LOOP_ROOM } else { 0.0 };
        }
        let mut at = MARGIN + (widest - row_width(row)) / 2.0;
        for &v in row {
            x[v] = at;
            y[v] = top;
            at += width[v] + GAP_X;
        }
    }
    let boxes: Vec<(f64, f64, f64)> = (0..n).map(|v| (x[v], y[v], width[v])).collect();
    let centre = |v: usize| x[v] + width[v] / 2.0;
    // Self-loops: side by side over the box's top right, each as far from the next as the
    // longest of their labels, so that each label fits over its own loop.
    let mut loops: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (e, &(a, b, _)) in input.edges.iter().enumerate() {
        if a == b {
            loops[a].push(e);
        }
    }
    let label_w = |e: usize| {
        input.edges[e]
            .2
            .map_or(0.0, |t| t.chars().count() as f64 * CHAR_11)
    };
    let mut loop_at: Vec<Option<(f64, f64)>> = vec![None; input.edges.len()];
    let mut loops_left: Vec<f64> = (0..n).map(|v| x[v] + width[v]).collect();
    for (v, es) in loops.iter().enumerate() {
        let step = es.iter().map(|&e| label_w(e)).fold(26.0, f64::max) + 10.0;
        for (j, &e) in es.iter().enumerate() {
            let right = x[v] + width[v] - 14.0 - j as f64 * step;
            loop_at[e] = Some((right - 26.0, right));
            loops_left[v] = right - 26.0;
        }
    }
    // Ports: the ends of the edges meeting a box's top or bottom spread along it, ordered by
    // where the other end lies, so that edges fanning out of one box do not start as one line.
    // Each entry: (side's node, on top, the other end's x, edge, is the edge's start).
    let mut ends: Vec<(usize, bool, f64, usize, bool)> = Vec::new();
    for (e, &(a, b, _)) in input.edges.iter().enumerate() {
        let chain = &chains[e];
        if a == b {
            continue;
        }
        if chain.is_empty() {
            ends.push((a, false, centre(b), e, true));
            ends.push((b, false, centre(a), e, false));
        } else if layer[a] < layer[b] {
            ends.push((a, false, centre(chain[1]), e, true));
            ends.push((b, true, centre(chain[chain.len() - 2]), e, false));
        } else {
            ends.push((a, true, centre(chain[chain.len() - 2]), e, true));
            ends.push((b, false, centre(chain[1]), e, false));
        }
    }
    let mut port = vec![(0.0, 0.0); input.edges.len()];
    // Per (node, top side): (the other end's x, edge, is its start).
    type Ends = Vec<(f64, usize, bool)>;
    let mut sides: std::collections::BTreeMap<(usize, bool), Ends> =
        std::collections::BTreeMap::new();
    for (v, top, other, e, start) in ends {
        sides.entry((v, top)).or_default().push((other, e, start));
    }
    for ((v, top), mut list) in sides {
        list.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let lo = x[v] + 16.0;
        let hi = if top {
            loops_left[v] - 10.0
        } else {
            x[v] + width[v] - 16.0
        }
        .max(lo + 10.0);
        let k = list.len() as f64;
        for (i, (_, e, start)) in list.into_iter().enumerate() {
            let at = lo + (hi - lo) * (i as f64 + 1.0) / (k + 1.0);
            if start {
                port[e].0 = at;
            } else {
                port[e].1 = at;
            }
        }
    }
    // Edges: down a chain through its dummies; up the same way drawn reversed; along a layer
    // through the gap below it; a self-loop over the box's top. Every segment runs in a gap
    // between layers or down a dummy's place: none crosses a box.
    let mut paths = Vec::with_capacity(input.edges.len());
    let mut sideways = 0.0;
    for (e, &(a, b, _)) in input.edges.iter().enumerate() {
        let chain = &chains[e];
        let (ay, by) = (y[a], y[b]);
        let (sx, ex) = port[e];
        if let Some((left, right)) = loop_at[e] {
            paths.push(vec![
                (left, ay),
                (left, ay - 16.0),
                (right, ay - 16.0),
                (right, ay),
            ]);
        } else if chain.is_empty() {
            sideways += 1.0;
            let below = ay + H + 8.0 + 5.0 * (sideways % 6.0);
            paths.push(vec![(sx, ay + H), (sx, below), (ex, below), (ex, by + H)]);
        } else if layer[a] < layer[b] {
            let mut p = vec![(sx, ay + H)];
            for &d in &chain[1..chain.len() - 1] {
                p.push((x[d], y[d]));
                p.push((x[d], y[d] + H));
            }
            p.push((ex, by));
            paths.push(p);
        } else {
            let mut p = vec![(sx, ay)];
            for &d in chain[1..chain.len() - 1].iter().rev() {
                p.push((x[d], y[d] + H));
                p.push((x[d], y[d]));
            }
            p.push((ex, by + H));
            paths.push(p);
        }
    }
    // What labels keep clear of: boxes, lines, arrowheads; then the subnets' frames, whose
    // names go along their top (or under them) where no edge crosses.
    let mut clear = place::Obstacles::default();
    for &(bx, by, bw) in &boxes {
        clear.rect((bx, by, bx + bw, by + H));
    }
    for p in &paths {
        clear.path(p, true);
    }
    let mut frames = Vec::with_capacity(input.groups.len());
    // The frames' names, for the drawing's size.
    let mut named: Vec<place::Rect> = Vec::new();
    for (members, chars) in input.groups {
        let Some(r) =
            members
                .iter()
                .filter(|&&v| v < n)
                .fold(None, |r: Option<place::Rect>, &v| {
                    let b = (
                        x[v] - 6.0,
                        y[v] - 16.0,
                        x[v] + width[v] + 6.0,
                        y[v] + H + 6.0,
                    );
                    Some(r.map_or(b, |r| {
                        (r.0.min(b.0), r.1.min(b.1), r.2.max(b.2), r.3.max(b.3))
                    }))
                })
        else {
            continue;
        };
        let (w, h) = (*chars as f64 * CHAR_10, 12.0);
        let mut candidates = Vec::new();
        for (top, inside) in [
            (r.1 + 1.0, true),
            (r.3 + 2.0, false),
            (r.1 - h - 2.0, false),
        ] {
            // Along the row, at most 64 places (a wide subnet's row steps further).
            let room = (r.2 - 4.0 - w) - (r.0 + 4.0);
            let step = (room / 64.0).max(8.0);
            let mut at = r.0 + 4.0;
            while at + w <= r.2 - 4.0 || (!inside && at == r.0 + 4.0) {
                candidates.push((at, top, at + w, top + h));
                at += step;
            }
        }
        let label =
            clear
                .place(candidates, 2.0)
                .unwrap_or((r.0 + 4.0, r.1, r.0 + 4.0 + w, r.1 + h));
        clear.path(
            &[(r.0, r.1), (r.2, r.1), (r.2, r.3), (r.0, r.3), (r.0, r.1)],
            false,
        );
        frames.push((r, (label.0, label.3 - 3.0)));
        named.push(label);
    }
    // Edge labels: along their own edge, the loop's top or the sideways run first.
    let mut labels = Vec::with_capacity(input.edges.len());
    let mut drawn: Vec<place::Rect> = frames.iter().map(|f| f.0).chain(named).collect();
    for (e, &(_, _, label)) in input.edges.iter().enumerate() {
        let Some(text) = label else {
            labels.push(None);
            continue;
        };
        let w = text.chars().count() as f64 * CHAR_11;
        let p = &paths[e];
        let first = usize::from(p.len() == 4 && chains[e].is_empty());
        let Some(r) = clear.place(place::along(p, first, w, 13.0), 2.0) else {
            labels.push(None);
            continue;
        };
        drawn.push(r);
        labels.push(Some((r.0, r.3 - 3.0)));
    }
    // The drawing's size: everything drawn, and a margin.
    let mut right = MARGIN + widest;
    let mut bottom = top + H;
    for r in &drawn {
        right = right.max(r.2);
        bottom = bottom.max(r.3);
    }
    for p in &paths {
        for &(px, py) in p {
            right = right.max(px);
            bottom = bottom.max(py);
        }
    }
    Layout {
        boxes,
        paths,
        labels,
        frames,
        width: right + MARGIN,
        height: bottom + MARGIN,
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
