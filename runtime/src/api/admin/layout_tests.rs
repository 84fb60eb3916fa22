//! Tests of the layout (layout.rs): drawings legible on the shapes that crowded them.

use super::place::{Rect, overlaps, segment_hits};
use super::*;

/// Lays a shape out and checks the drawing is legible: no edge through a box it does not
/// join; no label over a line, an arrowhead, a box, a frame's name or another label; no
/// frame's name over a line or a box; boxes apart and as wide as their labels.
fn legible(
    names: &[&str],
    edges: &[(usize, usize, Option<&str>)],
    roots: &[usize],
    groups: &[(Vec<usize>, usize)],
) -> Layout {
    let input = Input {
        widths: names.iter().map(|n| n.chars().count()).collect(),
        edges,
        roots,
        groups,
    };
    let l = layout(&input);
    let rects: Vec<Rect> = l
        .boxes
        .iter()
        .map(|&(x, y, w)| (x, y, x + w, y + H))
        .collect();
    let name = |e: usize| format!("{} → {}", names[edges[e].0], names[edges[e].1]);
    for (i, path) in l.paths.iter().enumerate() {
        let (a, b, _) = edges[i];
        for seg in path.windows(2) {
            for (k, r) in rects.iter().enumerate() {
                let inner = (r.0 + 1.0, r.1 + 1.0, r.2 - 1.0, r.3 - 1.0);
                assert!(
                    k == a || k == b || !segment_hits(seg[0], seg[1], inner),
                    "edge {} runs through {}",
                    name(i),
                    names[k]
                );
            }
        }
    }
    // Every word drawn, as (what, rect): edge labels 13 px high, frame names 12.
    let mut words: Vec<(String, Rect)> = Vec::new();
    for (i, at) in l.labels.iter().enumerate() {
        if let (Some(text), Some((x, y))) = (edges[i].2, at) {
            let w = text.chars().count() as f64 * CHAR_11;
            words.push((
                format!("label {text} of {}", name(i)),
                (*x, y - 10.0, x + w, y + 3.0),
            ));
        } else {
            assert!(edges[i].2.is_none(), "edge {} lost its label", name(i));
        }
    }
    for (g, (_, (x, y))) in l.frames.iter().enumerate() {
        let w = groups[g].1 as f64 * CHAR_10;
        words.push((format!("frame {g}'s name"), (*x, y - 9.0, x + w, y + 3.0)));
    }
    for (i, (what, r)) in words.iter().enumerate() {
        assert!(
            r.0 >= 0.0 && r.1 >= 0.0 && r.2 <= l.width && r.3 <= l.height,
            "{what} outside the drawing: {r:?}"
        );
        for (j, (other, o)) in words.iter().enumerate().skip(i + 1) {
            assert!(!overlaps(*r, *o), "{what} covers {other}");
            let _ = j;
        }
        for (k, b) in rects.iter().enumerate() {
            assert!(!overlaps(*r, *b), "{what} covers box {}", names[k]);
        }
        for (e, path) in l.paths.iter().enumerate() {
            for seg in path.windows(2) {
                assert!(
                    !segment_hits(seg[0], seg[1], *r),
                    "{what} lies across edge {}",
                    name(e)
                );
            }
            let (x, y) = *path.last().expect("a path has points");
            assert!(
                !overlaps(*r, (x - 7.0, y - 7.0, x + 7.0, y + 7.0)),
                "{what} lies on the arrowhead of {}",
                name(e)
            );
        }
    }
    for i in 0..rects.len() {
        assert!(rects[i].2 - rects[i].0 >= box_width(names[i].chars().count()) - 0.01);
        for j in i + 1..rects.len() {
            assert!(
                !overlaps(rects[i], rects[j]),
                "{} and {} overlap",
                names[i],
                names[j]
            );
        }
    }
    l
}

#[test]
fn load_review_is_drawn_legibly() {
    // workflows/loanReviewWF.yaml, transitions in its states' order (global signals are
    // listed under the drawing, not drawn).
    let names = [
        "Approved",
        "Cancelled",
        "Expired",
        "Notified",
        "Rejected",
        "Review",
        "Start",
    ];
    let e = |a: usize, b: usize, l: &'static str| (a, b, Some(l));
    let edges = vec![
        e(3, 0, "approve"),
        e(3, 4, "reject"),
        e(3, 2, "expire"),
        e(3, 3, "notified"),
        e(3, 3, "remind"),
        e(5, 0, "approve"),
        e(5, 4, "reject"),
        e(5, 2, "expire"),
        e(5, 3, "notified"),
        e(5, 5, "remind"),
        e(6, 5, "open"),
    ];
    let l = legible(&names, &edges, &[6], &[]);
    // Review's edges fan out from points of their own.
    let starts: Vec<f64> = l.paths[5..9].iter().map(|p| p[0].0).collect();
    for i in 0..starts.len() {
        for j in i + 1..starts.len() {
            assert!((starts[i] - starts[j]).abs() >= 10.0, "{starts:?}");
        }
    }
    // Notified's two loops are two loops.
    assert_ne!(l.paths[3], l.paths[4]);
}

#[test]
fn articles_for_deletion_and_a_loop_back_are_drawn_legibly() {
    let names = [
        "Delete",
        "Discussion",
        "Endorsed",
        "Keep",
        "Reversed",
        "Review",
        "Start",
    ];
    let e = |a: usize, b: usize, l: &'static str| (a, b, Some(l));
    let edges = vec![
        e(0, 5, "review"),
        e(1, 1, "extend"),
        e(1, 3, "keep"),
        e(1, 0, "delete"),
        e(3, 5, "review"),
        e(5, 2, "endorse"),
        e(5, 4, "reverse"),
        e(6, 1, "open"),
        // Not in the template: a loop back up two layers, and one within a layer.
        e(5, 1, "reopen"),
        e(0, 3, "reconsider"),
    ];
    legible(&names, &edges, &[6], &[]);
}

#[test]
fn a_subnet_is_drawn_legibly() {
    // lectureWF composed: a generator, its subnet of three instances in sequence and two in
    // parallel, and a step after it.
    let names = [
        "start",
        "feature-extraction",
        "b1#1/ocr",
        "b1#2/ocr",
        "b1#3/ocr",
        "b2#1/keywords",
        "b2#2/keywords",
        "publish",
    ];
    let edges: Vec<(usize, usize, Option<&str>)> = vec![
        (0, 1, None),
        (1, 2, None),
        (2, 3, None),
        (3, 4, None),
        (1, 5, None),
        (1, 6, None),
        (4, 7, None),
        (5, 7, None),
        (6, 7, None),
    ];
    let frame = "subnet of feature-extraction".chars().count();
    legible(&names, &edges, &[], &[(vec![2, 3, 4, 5, 6], frame)]);
}

#[test]
fn crossing_reduction_untangles_a_crossed_pair() {
    // a→d, b→c drawn in input order would cross; the sweep swaps one layer.
    let edges = vec![(0, 3, None), (1, 2, None)];
    let input = Input {
        widths: vec![1; 4],
        edges: &edges,
        roots: &[],
        groups: &[],
    };
    let l = layout(&input);
    let (a, b, c, d) = (l.boxes[0].0, l.boxes[1].0, l.boxes[2].0, l.boxes[3].0);
    assert_eq!(a < b, d < c, "a→d and b→c keep their order: no crossing");
}

#[test]
fn a_subnet_name_longer_than_its_frame_stays_inside_the_drawing() {
    // One member, a long generator's name: the name goes under the frame, and the drawing is
    // wide enough for it.
    let names = ["generate_invoices", "i#1"];
    let edges: Vec<(usize, usize, Option<&str>)> = vec![(0, 1, None)];
    let frame = "subnet of generate_invoices_for_every_customer"
        .chars()
        .count();
    legible(&names, &edges, &[], &[(vec![1], frame)]);
}
