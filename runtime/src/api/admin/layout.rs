//! A layered (Sugiyama-style) layout for the page's graphs, pure and unit-tested: layers (the
//! longest path for a DAG, breadth-first from the initial state for a machine), a dummy node
//! wherever an edge spans more than one layer so that no edge crosses a box, crossing reduction
//! by barycenters swept down and up, boxes as wide as their labels, and edge labels placed so
//! that they do not cover each other. Edges that go back up (a machine's loops) run round the
//! right of the drawing, each in a lane of its own.

/// Box height, the gaps between boxes and between layers, and the narrowest box.
pub const H: f64 = 42.0;
const GAP_X: f64 = 28.0;
const GAP_Y: f64 = 56.0;
const MIN_W: f64 = 120.0;
const MARGIN: f64 = 12.0;
/// Room above the first layer for a self-loop and its label.
const TOP: f64 = 30.0;
/// Average advance of a character at the label's font size (13 px system sans), generous.
const CHAR_13: f64 = 7.6;
/// And at the edge labels' 11 px.
const CHAR_11: f64 = 6.4;

/// What to lay out: each node's label width in characters (its longest line), edges as
/// (from, to, label), and for a machine its initial nodes.
pub struct Input<'a> {
    pub widths: Vec<usize>,
    pub edges: &'a [(usize, usize, Option<&'a str>)],
    pub roots: &'a [usize],
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
    for (l, row) in order.iter().enumerate() {
        let mut at = MARGIN + (widest - row_width(row)) / 2.0;
        for &v in row {
            x[v] = at;
            y[v] = TOP + l as f64 * (H + GAP_Y);
            at += width[v] + GAP_X;
        }
    }
    let boxes: Vec<(f64, f64, f64)> = (0..n).map(|v| (x[v], y[v], width[v])).collect();
    let right = MARGIN + widest;
    // Edges: down a chain through its dummies; up (offset, so that a pair of opposite edges
    // stays two lines); along a layer through the gap below it; a self-loop over the box's
    // top. Every segment runs in a gap between layers or down a dummy's place: none crosses
    // a box.
    let mut paths = Vec::with_capacity(input.edges.len());
    let mut sideways = 0.0;
    for (e, &(a, b, _)) in input.edges.iter().enumerate() {
        let chain = &chains[e];
        let (ax, ay, aw) = (x[a], y[a], width[a]);
        let (bx, by, bw) = (x[b], y[b], width[b]);
        if a == b {
            paths.push(vec![
                (ax + aw - 40.0, ay),
                (ax + aw - 40.0, ay - 16.0),
                (ax + aw - 14.0, ay - 16.0),
                (ax + aw - 14.0, ay),
            ]);
        } else if chain.is_empty() {
            sideways += 1.0;
            let below = ay + H + 8.0 + 5.0 * (sideways % 6.0);
            paths.push(vec![
                (ax + aw / 2.0 - 10.0, ay + H),
                (ax + aw / 2.0 - 10.0, below),
                (bx + bw / 2.0 - 10.0, below),
                (bx + bw / 2.0 - 10.0, by + H),
            ]);
        } else if layer[a] < layer[b] {
            let mut p = vec![(ax + aw / 2.0, ay + H)];
            for &d in &chain[1..chain.len() - 1] {
                p.push((x[d], y[d]));
                p.push((x[d], y[d] + H));
            }
            p.push((bx + bw / 2.0, by));
            paths.push(p);
        } else {
            const OFF: f64 = 14.0;
            let mut p = vec![(ax + aw / 2.0 + OFF, ay)];
            for &d in chain[1..chain.len() - 1].iter().rev() {
                p.push((x[d] + OFF, y[d] + H));
                p.push((x[d] + OFF, y[d]));
            }
            p.push((bx + bw / 2.0 + OFF, by + H));
            paths.push(p);
        }
    }
    // Labels: on the edge's first segment in a gap (a loop's or a sideways edge's middle one),
    // at the first fraction along it where the label covers no label placed before.
    let mut placed: Vec<(f64, f64, f64, f64)> = Vec::new();
    let mut labels = Vec::with_capacity(input.edges.len());
    for (e, &(_, _, label)) in input.edges.iter().enumerate() {
        let Some(text) = label else {
            labels.push(None);
            continue;
        };
        let w = text.chars().count() as f64 * CHAR_11;
        let p = &paths[e];
        let k = if p.len() == 4 && chains[e].is_empty() {
            1
        } else {
            0
        };
        let (s, t) = (p[k], p[k + 1]);
        let mut chosen = None;
        for f in [0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.1, 0.9] {
            let lx = s.0 + (t.0 - s.0) * f + 4.0;
            let ly = s.1 + (t.1 - s.1) * f + 4.0;
            let rect = (lx, ly - 10.0, lx + w, ly + 2.0);
            let clear = placed
                .iter()
                .all(|r| rect.2 <= r.0 || r.2 <= rect.0 || rect.3 <= r.1 || r.3 <= rect.1);
            if clear {
                chosen = Some((lx, ly, rect));
                break;
            }
        }
        let (lx, ly, rect) = chosen.unwrap_or_else(|| {
            let lx = (s.0 + t.0) / 2.0 + 4.0;
            let ly = (s.1 + t.1) / 2.0 + 4.0;
            (lx, ly, (lx, ly - 10.0, lx + w, ly + 2.0))
        });
        placed.push(rect);
        labels.push(Some((lx, ly)));
    }
    let label_right = placed.iter().map(|r| r.2).fold(0.0, f64::max);
    Layout {
        boxes,
        paths,
        labels,
        width: right.max(label_right) + MARGIN,
        height: TOP + MARGIN + depth as f64 * (H + GAP_Y) - GAP_Y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether segment p–q crosses the rectangle's inside.
    fn crosses(p: (f64, f64), q: (f64, f64), r: (f64, f64, f64, f64)) -> bool {
        (0..=100).any(|i| {
            let f = f64::from(i) / 100.0;
            let (x, y) = (p.0 + (q.0 - p.0) * f, p.1 + (q.1 - p.1) * f);
            x > r.0 + 1.0 && x < r.2 - 1.0 && y > r.1 + 1.0 && y < r.3 - 1.0
        })
    }

    #[test]
    fn no_edge_runs_through_a_box_and_labels_do_not_cover_each_other() {
        // loanReviewWF's shape: Start → Review; Review → four finals and Notified; Notified →
        // the same finals; loops on Review and Notified; a long edge Start → Cancelled.
        let names = [
            "Start",
            "Review",
            "Notified",
            "Approved",
            "Rejected",
            "Expired",
            "Cancelled",
        ];
        let e = |a: usize, b: usize, l: &'static str| (a, b, Some(l));
        let edges = vec![
            e(0, 1, "open"),
            e(1, 3, "approve"),
            e(1, 4, "reject"),
            e(1, 5, "expire"),
            e(1, 2, "notified"),
            e(1, 1, "remind"),
            e(2, 3, "approve"),
            e(2, 4, "reject"),
            e(2, 5, "expire"),
            e(2, 2, "notified"),
            e(2, 1, "back"),
            e(0, 6, "cancel"),
        ];
        let input = Input {
            widths: names.iter().map(|n| n.len()).collect(),
            edges: &edges,
            roots: &[0],
        };
        let l = layout(&input);
        let rects: Vec<(f64, f64, f64, f64)> = l
            .boxes
            .iter()
            .map(|&(x, y, w)| (x, y, x + w, y + H))
            .collect();
        for (i, path) in l.paths.iter().enumerate() {
            let (a, b, _) = edges[i];
            for seg in path.windows(2) {
                for (k, r) in rects.iter().enumerate() {
                    if k == a || k == b {
                        continue;
                    }
                    assert!(
                        !crosses(seg[0], seg[1], *r),
                        "edge {} → {} runs through {}",
                        names[a],
                        names[b],
                        names[k]
                    );
                }
            }
        }
        let mut label_rects = Vec::new();
        for (i, at) in l.labels.iter().enumerate() {
            let (x, y) = at.expect("every edge here has a label");
            let w = edges[i].2.unwrap_or("").len() as f64 * CHAR_11;
            label_rects.push((x, y - 10.0, x + w, y + 2.0));
        }
        for i in 0..label_rects.len() {
            for j in i + 1..label_rects.len() {
                let (a, b) = (label_rects[i], label_rects[j]);
                let overlap = a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3;
                assert!(!overlap, "labels {i} and {j} overlap: {a:?} {b:?}");
            }
        }
        // Boxes in a layer never overlap, and every box fits its label.
        for i in 0..rects.len() {
            assert!(rects[i].2 - rects[i].0 >= box_width(names[i].len()) - 0.01);
            for j in i + 1..rects.len() {
                let (a, b) = (rects[i], rects[j]);
                assert!(!(a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3));
            }
        }
    }

    #[test]
    fn crossing_reduction_untangles_a_crossed_pair() {
        // a→d, b→c drawn in input order would cross; the sweep swaps one layer.
        let edges = vec![(0, 3, None), (1, 2, None)];
        let input = Input {
            widths: vec![1; 4],
            edges: &edges,
            roots: &[],
        };
        let l = layout(&input);
        let (a, b, c, d) = (l.boxes[0].0, l.boxes[1].0, l.boxes[2].0, l.boxes[3].0);
        assert_eq!(a < b, d < c, "a→d and b→c keep their order: no crossing");
    }
}
