//! The page's drawings, measured in headless Chromium with its real fonts: no label over a
//! line, an arrowhead, a box or another label, on the shapes that crowded them (loanReviewWF,
//! articlesForDeletion's `extend` loop, a composed subnet's frame); and a large graph's pan
//! and zoom, kept when its live region refreshes.

use std::time::{Duration, Instant};

use crate::support;

use fantoccini::actions::InputSource;

use support::browser::{admin_session, click, eval, shot};
use support::{db, load};

/// Every problem found in the page's drawings, as sentences (none when legible).
const CHECK: &str = r#"
const out = [];
const hit = (p, q, r) => {
  let t0 = 0, t1 = 1;
  const dx = q[0] - p[0], dy = q[1] - p[1];
  for (const [den, num] of [[-dx, p[0] - r[0]], [dx, r[2] - p[0]], [-dy, p[1] - r[1]], [dy, r[3] - p[1]]]) {
    if (den === 0) { if (num <= 0) return false; continue; }
    const t = num / den;
    if (den < 0) t0 = Math.max(t0, t); else t1 = Math.min(t1, t);
    if (t0 >= t1) return false;
  }
  return true;
};
const over = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
const rect = (el) => { const b = el.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
let drawings = 0;
for (const svg of document.querySelectorAll('svg.graph')) {
  drawings++;
  const name = svg.id;
  const lines = [];
  const heads = [];
  for (const p of svg.querySelectorAll('path.edge')) {
    const pts = [...p.getAttribute('d').matchAll(/[ML](-?[\d.]+),(-?[\d.]+)/g)].map(m => [+m[1], +m[2]]);
    for (let i = 1; i < pts.length; i++) lines.push([pts[i - 1], pts[i]]);
    const [x, y] = pts[pts.length - 1];
    heads.push([x - 6, y - 6, x + 6, y + 6]);
  }
  const boxes = [...svg.querySelectorAll('g.node rect')].map(rect);
  const words = [...svg.querySelectorAll('text.label, g.subnet text')].map(t => [t.textContent, rect(t)]);
  words.forEach(([w, r], i) => {
    if (lines.some(([p, q]) => hit(p, q, r))) out.push(name + ': ' + w + ' lies across a line');
    if (heads.some(h => over(h, r))) out.push(name + ': ' + w + ' lies on an arrowhead');
    if (boxes.some(b => over(b, r))) out.push(name + ': ' + w + ' covers a box');
    words.slice(i + 1).forEach(([v, s]) => { if (over(r, s)) out.push(name + ': ' + w + ' covers ' + v); });
  });
}
out.push('drawings: ' + drawings);
return out;
"#;

/// Whether the page's drawings are legible: `drawings` of them, none with a problem.
async fn assert_legible(c: &fantoccini::Client, drawings: usize, page: &str) {
    let found: Vec<String> = serde_json::from_value(eval(c, CHECK).await).expect("strings");
    assert_eq!(found, vec![format!("drawings: {drawings}")], "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_never_crowd_and_large_graphs_pan_and_zoom() {
    workdo::install_crypto();
    let t = db().await;
    for file in [
        "loanReviewWF.yaml",
        "proposedDeletion.yaml",
        "articlesForDeletion.yaml",
    ] {
        let loaded = workdo::cli::files::parse_file(&support::workflows_dir().join(file))
            .expect("a shipped template");
        t.store.template_save(&loaded).await.expect("saved");
    }
    load(
        &t.store,
        "esc.yaml",
        "name: escWF\nkind: machine\ninitial: Review\nstates:\n  Review:\n    on:\n      remind: Escalated\n      expire: Expired\n      extend: Review\n  Escalated:\n    on:\n      expire: Expired\n      extend: Review\n  Expired: { final: true }\n",
    )
    .await;
    let druid = "druid:bb123cd4567";
    support::lecture_composed(&t, druid).await;
    let (c, _driver, base) = admin_session(&t).await;

    // The templates, each drawn: three machines and two step graphs (lectureWF's and
    // proposedDeletion's table of steps is drawn when it has steps).
    c.goto(&format!("{base}/ui/templates"))
        .await
        .expect("templates");
    let drawn: usize = serde_json::from_value(
        eval(&c, "return document.querySelectorAll('svg.graph').length;").await,
    )
    .expect("a count");
    assert!(drawn >= 4, "{drawn} drawings");
    assert_legible(&c, drawn, "the templates").await;
    for id in ["template-loanReviewWF", "template-articlesForDeletion"] {
        eval(
            &c,
            &format!("document.getElementById('{id}').scrollIntoView(); return 0;"),
        )
        .await;
        shot(&c, id).await;
    }

    // The composed lecture: its subnet's frame named where no edge crosses it.
    c.goto(&format!("{base}/ui/objects/{druid}"))
        .await
        .expect("the lecture");
    assert_legible(&c, 1, "the lecture").await;
    let frame = "document.querySelector('.graph-frame')";
    let view = format!("{frame}.querySelector('.graph-view')");
    let svg = format!("{frame}.querySelector('svg.graph')");
    let shown_width = format!("return {svg}.getBoundingClientRect().width;");
    let fitted: f64 = serde_json::from_value(eval(&c, &shown_width).await).expect("a width");
    eval(&c, &format!("{view}.scrollIntoView(); return 0;")).await;
    shot(&c, "subnet").await;

    // Zoom in four times: the drawing grows by 1.25 each time and the view scrolls to pan.
    let zoom_in = fantoccini::Locator::Css(".graph-frame button[data-zoom=in]");
    for _ in 0..4 {
        click(&c, zoom_in, "zoom in").await;
    }
    let zoomed: f64 = serde_json::from_value(eval(&c, &shown_width).await).expect("a width");
    assert!(
        (zoomed / fitted - 1.25f64.powi(4)).abs() < 0.02,
        "{fitted} → {zoomed}"
    );
    let scrolls: bool = serde_json::from_value(
        eval(
            &c,
            &format!("const v = {view}; return v.scrollWidth > v.clientWidth;"),
        )
        .await,
    )
    .expect("a bool");
    assert!(
        scrolls,
        "the zoomed drawing is wider than its view, which scrolls"
    );

    // Drag to pan: the pointer moves left by 120 px, the view scrolls right by as much.
    let (x, y): (f64, f64) = serde_json::from_value(
        eval(&c, &format!("{view}.scrollIntoView({{block: 'center'}}); const r = {view}.getBoundingClientRect(); return [r.x + r.width / 2, r.y + 20];")).await,
    )
    .expect("a point");
    let drag = fantoccini::actions::MouseActions::new("mouse".into())
        .then(fantoccini::actions::PointerAction::MoveTo {
            duration: None,
            x,
            y,
        })
        .then(fantoccini::actions::PointerAction::Down {
            button: fantoccini::actions::MOUSE_BUTTON_LEFT,
        })
        .then(fantoccini::actions::PointerAction::MoveTo {
            duration: Some(Duration::from_millis(100)),
            x: x - 120.0,
            y,
        })
        .then(fantoccini::actions::PointerAction::Up {
            button: fantoccini::actions::MOUSE_BUTTON_LEFT,
        });
    c.perform_actions(drag).await.expect("drag");
    let left: f64 = serde_json::from_value(eval(&c, &format!("return {view}.scrollLeft;")).await)
        .expect("scrollLeft");
    assert!((left - 120.0).abs() <= 2.0, "panned to {left}");
    shot(&c, "subnet-zoomed").await;

    // The live region refreshes when a step changes: the zoom and the place are kept.
    let step: String = sqlx::query_scalar(
        "select s.name from workdo.steps s join workdo.workflows w on w.id = s.workflow_id where w.object_id = $1 and s.status = 'waiting' order by s.name limit 1",
    )
    .bind(druid)
    .fetch_one(t.pool())
    .await
    .expect("a waiting step");
    t.store
        .step_set(&workdo::store::SetRequest::new(
            druid,
            "lectureWF",
            &step,
            "skipped",
        ))
        .await
        .expect("skip");
    let deadline = Instant::now() + Duration::from_secs(30);
    let refreshed = format!(
        "return [...document.querySelectorAll('section.workflow tr')].some(r => r.cells.length > 1 && r.cells[0].textContent === '{step}' && r.cells[1].textContent === 'skipped');"
    );
    while eval(&c, &refreshed).await != serde_json::json!(true) {
        assert!(Instant::now() < deadline, "the page shows {step} skipped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept: f64 = serde_json::from_value(eval(&c, &shown_width).await).expect("a width");
    let left: f64 = serde_json::from_value(eval(&c, &format!("return {view}.scrollLeft;")).await)
        .expect("scrollLeft");
    assert!(
        (kept - zoomed).abs() < 1.0 && (left - 120.0).abs() <= 2.0,
        "after the refresh: {kept} wide at {left}"
    );

    // Fit brings it back to the page's width.
    click(
        &c,
        fantoccini::Locator::Css(".graph-frame button[data-zoom=fit]"),
        "fit",
    )
    .await;
    let back: f64 = serde_json::from_value(eval(&c, &shown_width).await).expect("a width");
    assert!((back - fitted).abs() < 1.0, "{fitted} → {back}");
}
