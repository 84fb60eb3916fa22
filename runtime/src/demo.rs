//! `workdo up --demo N`: register N sample books, run googleScannedBookWF (and the accessionWF it
//! starts) on them with the demo functions, show progress per step, and summarise when drained.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

use crate::store::{DemoTotals, StartRequest, Store, StoreError};

const CONSONANTS: &[u8] = b"bcdfghjkmnpqrstvwxz";

/// A druid-shaped id (`druid:bb123cd4567`) for object `i` of demo run `run`.
pub fn druid(run: u32, i: u32) -> String {
    let c = |n: u32| CONSONANTS[(n as usize) % CONSONANTS.len()] as char;
    format!(
        "druid:{}{}{:03}{}{}{:04}",
        c(run),
        c(run / 19),
        (run / 361) % 1000,
        c(i / 10_000),
        c(i / 190_000),
        i % 10_000
    )
}

/// The sample catalogue record and the demo's deliberate trouble for object `i`: every 3rd
/// scan is not ready on the first try (defer), every 7th download fails once (retry), every 25th
/// barcode is unknown to the scanning service (error at the attempt limit).
pub fn properties(run: u32, i: u32) -> BTreeMap<String, Value> {
    const TITLES: [&str; 6] = [
        "On the Origin of Species",
        "Leaves of Grass",
        "The Wealth of Nations",
        "Principia Mathematica",
        "Walden",
        "Middlemarch",
    ];
    const AUTHORS: [&str; 6] = [
        "Darwin, Charles",
        "Whitman, Walt",
        "Smith, Adam",
        "Newton, Isaac",
        "Thoreau, Henry David",
        "Eliot, George",
    ];
    let k = (i as usize) % TITLES.len();
    let mut p = BTreeMap::new();
    p.insert("demo_run".into(), json!(run));
    p.insert(
        "title".into(),
        json!(format!("{} (copy {})", TITLES[k], i + 1)),
    );
    p.insert("author".into(), json!(AUTHORS[k]));
    p.insert("catkey".into(), json!(format!("{}", 1_000_000 + i)));
    p.insert("barcode".into(), json!(format!("36105{:09}", i)));
    p.insert("pages".into(), json!(3 + i % 10));
    p.insert("slow_scan".into(), json!(i % 3 == 1));
    p.insert("flaky_download".into(), json!(i % 7 == 2));
    p.insert("barcode_missing".into(), json!(i % 25 == 24));
    p
}

/// Register `n` sample objects and start googleScannedBookWF on them.
pub async fn seed(store: &Store, run: u32, n: u32) -> Result<Vec<String>, StoreError> {
    let mut ids = Vec::with_capacity(n as usize);
    for i in 0..n {
        let id = druid(run, i);
        store
            .object_put(&id, &properties(run, i), &BTreeMap::new(), "demo")
            .await?;
        ids.push(id);
    }
    for chunk in ids.chunks(1000) {
        let mut req = StartRequest::new("googleScannedBookWF", &[]);
        req.objects = chunk.to_vec();
        req.actor = "demo".into();
        store.workflow_start(&req).await?;
    }
    Ok(ids)
}

/// Follow the run with a progress bar per step until nothing of it is ready, running, scheduled
/// or retrying any more. Draws only when `draw` (a terminal).
pub async fn watch(store: &Store, run: u32, draw: bool) -> Result<(), StoreError> {
    let multi = MultiProgress::with_draw_target(if draw {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let style = ProgressStyle::with_template("{prefix:>40} {bar:30} {pos:>5}/{len:5} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let mut bars: BTreeMap<(String, String), ProgressBar> = BTreeMap::new();
    loop {
        let rows = store.demo_progress(run).await?;
        for r in &rows {
            let bar = bars
                .entry((r.template.clone(), r.name.clone()))
                .or_insert_with(|| {
                    let b = multi.add(ProgressBar::new(0));
                    b.set_style(style.clone());
                    b.set_prefix(format!("{}:{}", r.template, r.name));
                    b
                });
            bar.set_length(r.total as u64);
            bar.set_position(r.finished as u64);
            bar.set_message(progress_message(r));
        }
        if rows.iter().all(|r| r.running == 0) {
            // `abandon`, not `finish`: finish would move every bar to its end, showing
            // 100/100 for a step whose objects partly ended in error or never ran.
            for b in bars.values() {
                b.abandon();
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a step's bar says beside its count of finished objects: those in error, and those
/// still held back by an unfinished prerequisite.
pub fn progress_message(r: &crate::store::DemoProgress) -> String {
    let waiting = r.total - r.finished - r.errors - r.running;
    let mut parts = Vec::new();
    if r.errors > 0 {
        parts.push(format!("{} errors", r.errors));
    }
    if waiting > 0 {
        parts.push(format!("{waiting} waiting"));
    }
    parts.join(", ")
}

/// Print the per-step summary of the run; returns (steps completed, workflows completed,
/// workflows in error).
pub async fn summary(
    store: &Store,
    run: u32,
    started: Instant,
    out: &mut dyn Write,
) -> anyhow::Result<(i64, i64, i64)> {
    let rows = store.demo_summary(run).await?;
    let ms = |v: Option<f64>| {
        v.map(|s| format!("{:.1} ms", s * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    crate::output::table(
        out,
        &[
            "step",
            "completed",
            "skipped",
            "errors",
            "retries",
            "deferred",
            "p50 elapsed",
            "p95 elapsed",
        ],
        rows.iter().map(|r| {
            vec![
                format!("{}:{}", r.template, r.name),
                r.completed.to_string(),
                r.skipped.to_string(),
                r.errors.to_string(),
                r.retries.to_string(),
                r.deferrals.to_string(),
                ms(r.p50),
                ms(r.p95),
            ]
        }),
    )?;
    let completed: i64 = rows.iter().map(|r| r.completed).sum();
    let DemoTotals {
        ran,
        workflows_completed: done,
        workflows_failed: failed,
    } = store.demo_totals(run).await?;
    let secs = started.elapsed().as_secs_f64();
    writeln!(
        out,
        "\n{ran} steps run to completion by functions in {secs:.1} s ({:.0} steps/s, registration included); \
         {done} workflows completed, {failed} stopped at an error",
        ran as f64 / secs.max(1e-9)
    )?;
    Ok((completed, done, failed))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bar_says_what_did_not_finish() {
        let row = |finished, errors, running| crate::store::DemoProgress {
            template: "t".into(),
            name: "s".into(),
            total: 100,
            finished,
            errors,
            running,
        };
        assert_eq!(
            super::progress_message(&row(96, 1, 0)),
            "1 errors, 3 waiting"
        );
        assert_eq!(super::progress_message(&row(90, 0, 10)), "");
        assert_eq!(super::progress_message(&row(100, 0, 0)), "");
    }

    #[test]
    fn druids_are_well_formed_and_distinct() {
        let a = super::druid(7, 0);
        let b = super::druid(7, 1);
        assert_ne!(a, b);
        assert_eq!(a.len(), "druid:bb123cd4567".len());
        assert!(a.starts_with("druid:"));
    }
}
