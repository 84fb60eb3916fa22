//! Where a drawing's words go: each label (an edge's signal, a subnet's name) at the first of
//! its candidate places that covers no line, no arrowhead, no box and no label placed before
//! it. The geometry is exact (a segment clipped against a rectangle), so the layout's test and
//! the browser's test agree on what touching means.

/// A point, and a rectangle as (left, top, right, bottom).
pub type Point = (f64, f64);
pub type Rect = (f64, f64, f64, f64);

/// Room kept round a label, so that two labels or a label and a line never touch.
const PAD: f64 = 2.0;
/// How far round an edge's end its arrowhead reaches (the marker is 7 px at stroke 1).
const ARROW: f64 = 8.0;

pub fn overlaps(a: Rect, b: Rect) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// Whether segment p–q passes through the inside of `r` (Liang–Barsky clipping).
pub fn segment_hits(p: Point, q: Point, r: Rect) -> bool {
    let (dx, dy) = (q.0 - p.0, q.1 - p.1);
    let (mut t0, mut t1) = (0.0f64, 1.0f64);
    for (den, num) in [
        (-dx, p.0 - r.0),
        (dx, r.2 - p.0),
        (-dy, p.1 - r.1),
        (dy, r.3 - p.1),
    ] {
        if den == 0.0 {
            if num <= 0.0 {
                return false;
            }
        } else {
            let t = num / den;
            if den < 0.0 {
                t0 = t0.max(t);
            } else {
                t1 = t1.min(t);
            }
            if t0 >= t1 {
                return false;
            }
        }
    }
    true
}

/// Everything a label must keep clear of.
#[derive(Default)]
pub struct Obstacles {
    rects: Vec<Rect>,
    segments: Vec<(Point, Point)>,
}

impl Obstacles {
    pub fn rect(&mut self, r: Rect) {
        self.rects.push(r);
    }

    /// A line drawn through these points; with `arrow`, the head at its last point too.
    pub fn path(&mut self, points: &[Point], arrow: bool) {
        for w in points.windows(2) {
            self.segments.push((w[0], w[1]));
        }
        if let (true, Some(&(x, y))) = (arrow, points.last()) {
            self.rects
                .push((x - ARROW, y - ARROW, x + ARROW, y + ARROW));
        }
    }

    /// How many things `r` (padded) would cover.
    pub fn hits(&self, r: Rect) -> usize {
        let r = (r.0 - PAD, r.1 - PAD, r.2 + PAD, r.3 + PAD);
        self.rects.iter().filter(|o| overlaps(r, **o)).count()
            + self
                .segments
                .iter()
                .filter(|(p, q)| segment_hits(*p, *q, r))
                .count()
    }

    /// The first candidate inside the drawing (left and top of `min`) that covers nothing,
    /// else the one covering least; it becomes an obstacle for the labels placed after it.
    pub fn place(&mut self, candidates: impl IntoIterator<Item = Rect>, min: f64) -> Option<Rect> {
        let mut best: Option<(usize, Rect)> = None;
        for r in candidates {
            if r.0 < min || r.1 < min {
                continue;
            }
            let n = self.hits(r);
            if best.is_none_or(|(b, _)| n < b) {
                best = Some((n, r));
            }
            if n == 0 {
                break;
            }
        }
        let (_, r) = best?;
        self.rects.push(r);
        Some(r)
    }
}

/// Places for a `w`×`h` label near point `p`, `gap` away: beside it right and left, above and
/// below it, then the four corners.
pub fn around(p: Point, w: f64, h: f64, gap: f64) -> [Rect; 8] {
    let (x, y) = p;
    [
        (x + gap, y - h / 2.0, x + gap + w, y + h / 2.0),
        (x - gap - w, y - h / 2.0, x - gap, y + h / 2.0),
        (x - w / 2.0, y - gap - h, x + w / 2.0, y - gap),
        (x - w / 2.0, y + gap, x + w / 2.0, y + gap + h),
        (x + gap, y - gap - h, x + gap + w, y - gap),
        (x - gap - w, y - gap - h, x - gap, y - gap),
        (x + gap, y + gap, x + gap + w, y + gap + h),
        (x - gap - w, y + gap, x - gap, y + gap + h),
    ]
}

/// Places along a polyline: its segments in the order given (`first` first), at fractions
/// from the middle outwards, each with the places `around` it, near before far.
pub fn along(path: &[Point], first: usize, w: f64, h: f64) -> Vec<Rect> {
    let n = path.len().saturating_sub(1);
    let mut out = Vec::new();
    for gap in [5.0, 14.0] {
        for k in (0..n).map(|k| (first + k) % n.max(1)) {
            let (s, t) = (path[k], path[k + 1]);
            for f in [0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.1, 0.9, 0.05, 0.95] {
                let p = (s.0 + (t.0 - s.0) * f, s.1 + (t.1 - s.1) * f);
                out.extend(around(p, w, h, gap));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_hits_a_rectangle_only_through_its_inside() {
        let r = (10.0, 10.0, 20.0, 20.0);
        assert!(segment_hits((0.0, 15.0), (30.0, 15.0), r));
        assert!(segment_hits((0.0, 0.0), (30.0, 30.0), r));
        assert!(segment_hits((15.0, 15.0), (16.0, 16.0), r), "wholly inside");
        assert!(!segment_hits((0.0, 25.0), (30.0, 25.0), r), "passes below");
        assert!(!segment_hits((0.0, 0.0), (9.0, 30.0), r), "passes left");
        assert!(
            !segment_hits((10.0, 0.0), (10.0, 30.0), r),
            "runs along its edge"
        );
        assert!(!segment_hits((0.0, 12.0), (8.0, 12.0), r), "stops short");
    }

    #[test]
    fn a_label_goes_where_it_covers_nothing() {
        let mut o = Obstacles::default();
        o.path(&[(50.0, 0.0), (50.0, 100.0)], true);
        // Right of the line's middle is free: taken first.
        let a = o
            .place(along(&[(50.0, 0.0), (50.0, 100.0)], 0, 30.0, 12.0), 0.0)
            .expect("a place");
        assert_eq!(o.hits(a), 1, "covers only itself");
        assert!(a.0 > 50.0);
        // A second label on the same line goes elsewhere, clear of the first.
        let b = o
            .place(along(&[(50.0, 0.0), (50.0, 100.0)], 0, 30.0, 12.0), 0.0)
            .expect("a place");
        assert!(!overlaps(a, b));
        assert!(!segment_hits((50.0, 0.0), (50.0, 100.0), b));
    }
}
