//! `workdo bench`: what the runtime exists for, measured next to a yardstick in the same run.
//!
//! Runs in a database of its own (`workdo_bench`, dropped and created afresh) on the same server
//! the other commands use. Every figure is the median of `--runs` runs, with min and max.
//!
//! - **yardstick**: a minimal SQL queue (a table with a partial index on ready rows ordered by
//!   priority then run_at): claim N with `FOR UPDATE SKIP LOCKED` and commit, mark them done with
//!   `= ANY($1)` and commit; N = 1 and 100; 2 and 4 connections.
//! - **claim+complete**: single-step workflows run by the real runtime (`runtime::run`: its
//!   workers claim, an in-process no-op function answers, its completers commit through the
//!   one commit path), claims of N and commits of at most N, with as many completers as the
//!   yardstick has connections; dependants, workflow counters and events included.
//! - **DAG**: googleScannedBookWF-shaped workflows (9 steps, fan-out, fan-in) run by the real
//!   runtime with in-process, warm and exec no-op functions.
//! - **start rate**: workflows started one by one and in one call.
//! - **wake latency**: from a prerequisite's completion to its dependant's claim, one workflow at
//!   a time (LISTEN/NOTIFY), at low load and while the in-process DAG load runs.
//! - **scale**: latency of claiming one step with 10,000 and with 1,000,000 waiting steps.
//! - **calls**: what calling a no-op function costs without the database: warm processes one call
//!   at a time, warm processes with calls pipelined, and a process per call.

use std::io::Write;

use anyhow::{Context, Result, bail};
use serde::Serialize;

mod calls;
mod chain;
mod deployed;
mod scenarios;

use crate::store::Store;
use crate::store::db::{self, with_database};
use scenarios::{
    DAG, DagRun, alarm_delays, claim_complete, dag, fanout, load, machine_signals, scale,
    start_rate, wake_latency, yardstick,
};

#[derive(Debug, Clone)]
pub struct Options {
    pub runs: usize,
    pub quick: bool,
    /// Scenarios to run; empty means all.
    pub only: Vec<Scenario>,
    /// The `workdo` executable whose `__noop-function` serves as the warm and exec no-op
    /// function; by default the running one.
    pub noop_function: Option<std::path::PathBuf>,
    /// A small no-op function binary (the SDK's `noop`) for the exec figures; by default the
    /// `noop` next to the workdo executable, where `cargo build --release` leaves it.
    pub exec_function: Option<std::path::PathBuf>,
}

/// A group of figures, for `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// The yardstick and claim+complete side by side.
    Queue,
    Dag,
    Start,
    Wake,
    Scale,
    /// Function calls alone, no database: warm (one at a time and pipelined) and exec.
    Calls,
    /// Generated steps (dynamic dispatch) against ordinary ones of the same shape.
    Dispatch,
    /// State machines: signals per second (one job; many in parallel) and alarm delays.
    Machines,
    /// `workdo archive` over finished history (`WORKDO_BENCH_ARCHIVE` workflows, four events
    /// each).
    Archive,
    /// Deployed functions: a deploy, a worker's first fetch, a cached call.
    Deployed,
    /// Step-to-step latency: a workflow of 40 sequential trivial steps, per kind of function.
    Chain,
}

impl Options {
    fn runs(&self, s: Scenario) -> bool {
        self.only.is_empty() || self.only.contains(&s)
    }
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    pub unit: &'static str,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// median ÷ the yardstick's median at the same batch size and connections
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

fn row(name: String, unit: &'static str, mut v: Vec<f64>) -> Row {
    v.sort_by(|a, b| a.total_cmp(b));
    Row {
        name,
        unit,
        median: v.get(v.len() / 2).copied().unwrap_or(0.0),
        min: v.first().copied().unwrap_or(0.0),
        max: v.last().copied().unwrap_or(0.0),
        ratio: None,
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Sizes of one run: quick (seconds) or full.
struct Sizes {
    jobs1: i64,
    jobs100: i64,
    dag: usize,
    exec: usize,
    starts: usize,
    wakes: usize,
    small: i64,
    large: i64,
    claims: usize,
    /// Workflows of the dispatch scenario (12 steps each).
    fanout: usize,
    /// Signals to one job; jobs signalled in parallel; alarms set.
    signals: usize,
    jobs: usize,
    alarms: usize,
    /// Finished workflows the archive scenario archives (four events each).
    archive: i64,
}

impl Sizes {
    fn new(quick: bool) -> Self {
        if quick {
            Sizes {
                jobs1: 200,
                jobs100: 2_000,
                dag: 20,
                exec: 4,
                starts: 100,
                wakes: 10,
                small: 2_000,
                large: 10_000,
                claims: 50,
                fanout: 20,
                signals: 50,
                jobs: 20,
                alarms: 20,
                archive: 2_000,
            }
        } else {
            // 5,000 DAG workflows: a run of several seconds, so the figure is the steady rate
            // and not the start-up and the critical path's tail (six group-committed waits in
            // a row), which made up a quarter to a third of a 1,000-workflow run
            // (BENCHMARKS.md item 27).
            Sizes {
                jobs1: 4_000,
                jobs100: 40_000,
                dag: 5_000,
                exec: 500,
                starts: 2_000,
                wakes: 100,
                small: 10_000,
                large: 1_000_000,
                claims: 200,
                fanout: 2_000,
                signals: 2_000,
                jobs: 1_000,
                alarms: 500,
                archive: std::env::var("WORKDO_BENCH_ARCHIVE")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(250_000),
            }
        }
    }
}

/// Run the benchmark and print the table (or JSON).
///
/// # Errors
/// When the bench database cannot be made, or a scenario's own check fails.
pub async fn run(
    target_url: &str,
    opts: &Options,
    json: bool,
    out: &mut impl Write,
) -> Result<Vec<Row>> {
    // A database of its own on the same server.
    let admin = with_database(target_url, "postgres");
    db::drop_database(&admin, "workdo_bench").await?;
    db::create_database(&admin, "workdo_bench").await?;
    let pool = db::connect(&with_database(target_url, "workdo_bench"), 16).await?;
    db::migrate(&pool).await?;
    let store = Store::new(pool.clone());
    store.bench_queue_create().await?;
    // The start scenario starts this template whether or not the DAG scenario ran.
    load(
        &store,
        "bench-dag.yaml",
        &DAG.replace("FN", "{ builtin: noop }"),
    )
    .await?;
    let exe = match &opts.noop_function {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the workdo executable")?,
    };
    // Anything else would be started with `__noop-function` as its argument: refuse.
    if !exe
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("workdo"))
    {
        bail!(
            "the no-op function must be a workdo executable, not {}",
            exe.display()
        );
    }
    let exec_fn = calls::exec_function(&exe, opts.exec_function.as_deref())?;
    let sizes = Sizes::new(opts.quick);
    let runs = opts.runs.max(1);
    let mut rows = Vec::new();
    if opts.runs(Scenario::Queue) {
        queue_rows(&store, &sizes, runs, &mut rows).await?;
    }
    let mut loaded = (Vec::new(), Vec::new());
    if opts.runs(Scenario::Dag) {
        let exes = (exe.as_path(), exec_fn.as_deref());
        dag_rows(&store, exes, &sizes, runs, &mut rows, &mut loaded).await?;
    }
    if opts.runs(Scenario::Start) {
        start_rows(&store, &sizes, runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Wake) {
        wake_rows(&store, &sizes, runs, &mut rows).await?;
    }
    let (loaded50, loaded99) = loaded;
    if !loaded50.is_empty() {
        rows.push(row(
            "wake latency, under the in-process DAG load: p50".into(),
            "ms",
            loaded50,
        ));
        rows.push(row(
            "wake latency, under the in-process DAG load: p99".into(),
            "ms",
            loaded99,
        ));
    }
    if opts.runs(Scenario::Scale) {
        scale_rows(&store, &sizes, runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Calls) {
        calls::rows(&exe, exec_fn.as_deref(), opts.quick, runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Dispatch) {
        dispatch_rows(&store, &sizes, runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Machines) {
        machine_rows(&store, &sizes, runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Chain) {
        chain::rows(&store, exec_fn.as_deref(), runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Deployed) {
        let f = exec_fn.as_deref().unwrap_or(exe.as_path());
        deployed::rows(&store, f, opts.quick, runs, &mut rows).await?;
    }
    if opts.runs(Scenario::Archive) {
        let mut rates = Vec::new();
        let mut events = 0;
        for _ in 0..runs {
            let (rate, e) = scenarios::archive_rate(&store, sizes.archive).await?;
            rates.push(rate);
            events = e;
        }
        rows.push(row(
            format!(
                "archive: {} finished workflows, {events} events, batches of 1000",
                sizes.archive
            ),
            "workflows/s",
            rates,
        ));
    }
    pool.close().await;
    print(out, &rows, runs, opts.quick, json)?;
    Ok(rows)
}

/// The yardstick and claim+complete side by side, at batch 1 and 100, 2 and 4 connections.
async fn queue_rows(store: &Store, sizes: &Sizes, runs: usize, rows: &mut Vec<Row>) -> Result<()> {
    for (batch, jobs) in [(1i64, sizes.jobs1), (100, sizes.jobs100)] {
        for conns in [2usize, 4] {
            let mut yard = Vec::new();
            let mut ours = Vec::new();
            let mut fast = Vec::new();
            let unflushed = store.clone().with_async_claims(true);
            for _ in 0..runs {
                yard.push(yardstick(store, jobs, batch, conns).await?);
                ours.push(claim_complete(store, jobs as usize, batch, conns).await?);
                fast.push(claim_complete(&unflushed, jobs as usize, batch, conns).await?);
            }
            let y = row(
                format!("yardstick: SQL queue, batch {batch}, {conns} conns"),
                "rows/s",
                yard,
            );
            let mut o = row(
                format!("claim+complete: 1-step workflows, batch {batch}, {conns} conns"),
                "steps/s",
                ours,
            );
            o.ratio = Some(o.median / y.median.max(1e-9));
            let mut a = row(
                format!("claim+complete, --async-claims, batch {batch}, {conns} conns"),
                "steps/s",
                fast,
            );
            a.ratio = Some(a.median / y.median.max(1e-9));
            rows.push(y);
            rows.push(o);
            rows.push(a);
        }
    }
    Ok(())
}

/// The DAG with in-process, warm and exec no-op functions; the wake-up under load is probed
/// during the in-process runs and returned in `loaded` (p50s, p99s).
async fn dag_rows(
    store: &Store,
    (exe, exec_fn): (&std::path::Path, Option<&std::path::Path>),
    sizes: &Sizes,
    runs: usize,
    rows: &mut Vec<Row>,
    loaded: &mut (Vec<f64>, Vec<f64>),
) -> Result<()> {
    let noop = format!("[{:?}, __noop-function]", exe.display().to_string());
    let within = Some(std::time::Duration::from_millis(5));
    let in_process = "{ builtin: noop, concurrency: 100 }".to_string();
    let mut dags = vec![
        ("in-process functions", in_process.clone(), sizes.dag, None),
        (
            "warm functions",
            // Calls queue per process (16 each), so a process never waits for a claim.
            format!("{{ warm: {noop}, pool: 2, pipeline: 16, concurrency: 32 }}"),
            sizes.dag,
            None,
        ),
    ];
    // Exec: the user's shape, a small function binary per step (the SDK's `noop`), and the
    // 37 MB workdo executable as the function, which costs the loader several times more.
    if let Some(small) = exec_fn {
        let small = format!("[{:?}]", small.display().to_string());
        dags.push((
            "exec functions (noop binary)",
            format!("{{ exec: {small}, concurrency: 2 }}"),
            sizes.exec,
            None,
        ));
    }
    dags.push((
        "exec functions (workdo binary)",
        format!("{{ exec: {noop}, concurrency: 2 }}"),
        sizes.exec,
        None,
    ));
    // The in-process run with commits sized to 5 ms: the wake-up under load it buys, and its
    // price. Last, so that the runs before it are the runs earlier versions made, in order.
    dags.push((
        "in-process functions, --commit-within 5ms",
        in_process,
        sizes.dag,
        within,
    ));
    for (label, function, n, within) in dags {
        let (mut s, mut w, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // The wake-up under load is probed during the in-process runs.
        let probe = label.starts_with("in-process");
        for _ in 0..runs {
            let mut run: DagRun = dag(store, &function, n, (probe, within)).await?;
            s.push(run.steps_per_sec);
            w.push(run.workflows_per_sec);
            if probe {
                p50.push(percentile(&mut run.wake_ms, 0.5));
                p99.push(percentile(&mut run.wake_ms, 0.99));
            }
        }
        rows.push(row(format!("DAG (9 steps), {label}: steps"), "steps/s", s));
        rows.push(row(
            format!("DAG (9 steps), {label}: workflows"),
            "workflows/s",
            w,
        ));
        if let Some(within) = within {
            for (q, v) in [("p50", p50), ("p99", p99)] {
                let name = format!(
                    "wake latency, under the in-process DAG load, --commit-within {}ms: {q}",
                    within.as_millis()
                );
                rows.push(row(name, "ms", v));
            }
        } else if probe {
            *loaded = (p50, p99);
        }
    }
    Ok(())
}

/// Generated steps against ordinary steps of the same shape, runs alternating so that all
/// see the same machine; each generated row's ratio is against the ordinary median. The ten
/// ordinary steps side by side are ten workers of 100 slots each, where one worker (the
/// bricklet's step) runs all ten generated instances: it is measured with 100 slots, as the
/// figure always was, and with the ten's 1,000, the same slots for the same work.
async fn dispatch_rows(
    store: &Store,
    sizes: &Sizes,
    runs: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    const WIDTH: usize = 10;
    // Ordinary, then generated with 100 slots, then with the ten's 1,000: run, and start + run.
    let shapes = [None, Some(100), Some(100 * WIDTH)];
    let mut figures: [[Vec<f64>; 3]; 2] = Default::default();
    for _ in 0..runs {
        for (i, slots) in shapes.into_iter().enumerate() {
            let (run, all) = fanout(store, sizes.fanout, WIDTH, slots).await?;
            figures[0][i].push(run);
            figures[1][i].push(all);
        }
    }
    // The run alone: an ordinary workflow's 12 step rows were written at its start, before the
    // clock, a generated one's 10 by its generator while it runs. Timing the starts too
    // compares the whole work per step.
    let names = [
        [
            "claim+complete, 2 steps then 10 side by side, ordinary steps",
            "claim+complete, the same composed at run time (observer, generator, 10 generated)",
            "claim+complete, the same composed at run time, the bricklet's step with the ten steps' 1,000 slots",
        ],
        [
            "start and run, ordinary steps (12 step rows written at the start)",
            "start and run, composed at run time (10 of 12 step rows written by the generator)",
            "start and run, composed at run time, the bricklet's step with the ten steps' 1,000 slots",
        ],
    ];
    for (names, figures) in names.into_iter().zip(figures) {
        let mut median = None;
        for (name, runs) in names.into_iter().zip(figures) {
            let mut r = row(name.into(), "steps/s", runs);
            r.ratio = median.map(|m| r.median / m);
            median = median.or(Some(r.median));
            rows.push(r);
        }
    }
    Ok(())
}

/// Signals per second to one job and to many jobs in parallel; alarm firing delay.
async fn machine_rows(
    store: &Store,
    sizes: &Sizes,
    runs: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let (mut one, mut many, mut p50, mut p99) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        one.push(machine_signals(store, 1, sizes.signals, 1).await?);
        many.push(machine_signals(store, sizes.jobs, 5, 16).await?);
        let mut late = alarm_delays(store, sizes.alarms).await?;
        p50.push(percentile(&mut late, 0.5));
        p99.push(percentile(&mut late, 0.99));
    }
    let one_row = row(
        "machine signals, one job, one after another".into(),
        "signals/s",
        one,
    );
    let mut many_row = row(
        format!(
            "machine signals, {} jobs, 16 in parallel (5 signals each)",
            sizes.jobs
        ),
        "signals/s",
        many,
    );
    many_row.ratio = Some(many_row.median / one_row.median);
    rows.push(one_row);
    rows.push(many_row);
    rows.push(row("alarm firing delay: p50".into(), "ms", p50));
    rows.push(row("alarm firing delay: p99".into(), "ms", p99));
    Ok(())
}

/// Workflows started one by one and in one call.
async fn start_rows(store: &Store, sizes: &Sizes, runs: usize, rows: &mut Vec<Row>) -> Result<()> {
    for bulk in [false, true] {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(start_rate(store, sizes.starts, bulk).await?);
        }
        let name = if bulk {
            "start: in one call"
        } else {
            "start: one by one"
        };
        let mut r = row(
            format!("{name} (9-step workflows)"),
            "workflows/s",
            v.clone(),
        );
        rows.push(r.clone());
        r.name = format!("{name}: steps created");
        r.unit = "steps/s";
        for x in [&mut r.median, &mut r.min, &mut r.max] {
            *x *= 9.0;
        }
        rows.push(r);
    }
    Ok(())
}

/// Wake latency at low load.
async fn wake_rows(store: &Store, sizes: &Sizes, runs: usize, rows: &mut Vec<Row>) -> Result<()> {
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let (a, b) = wake_latency(store, sizes.wakes).await?;
        p50.push(a);
        p99.push(b);
    }
    rows.push(row("wake latency, low load: p50".into(), "ms", p50));
    rows.push(row("wake latency, low load: p99".into(), "ms", p99));
    Ok(())
}

/// Claim latency with a shallow and a deep queue.
async fn scale_rows(store: &Store, sizes: &Sizes, runs: usize, rows: &mut Vec<Row>) -> Result<()> {
    let mut at = Vec::new();
    for depth in [sizes.small, sizes.large] {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(scale(store, depth, sizes.claims).await?);
        }
        let r = row(
            format!("claim latency with {depth} waiting steps (p50)"),
            "ms",
            v,
        );
        at.push(r.median);
        rows.push(r);
    }
    if let (Some(a), Some(b)) = (at.first(), at.get(1)) {
        let last = rows.len() - 1;
        rows[last].ratio = Some(b / a.max(1e-9));
    }
    Ok(())
}

/// The table (or JSON) of `rows`.
fn print(out: &mut impl Write, rows: &[Row], runs: usize, q: bool, json: bool) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, rows)?;
        writeln!(out)?;
    } else {
        crate::output::table(
            out,
            &["measure", "median", "min", "max", "unit", "ratio"],
            rows.iter().map(|r| {
                let f = |v: f64| {
                    if v >= 100.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.2}")
                    }
                };
                vec![
                    r.name.clone(),
                    f(r.median),
                    f(r.min),
                    f(r.max),
                    r.unit.to_string(),
                    r.ratio.map(|x| format!("{x:.2}x")).unwrap_or_default(),
                ]
            }),
        )?;
        writeln!(
            out,
            "\nmedians of {runs} run(s){}; ratios: ours ÷ the yardstick with the same batch and connections, the deepest ÷ the shallowest queue, the second warm call figure ÷ the first, and each exec call figure ÷ starting /bin/true",
            if q { ", quick sizes" } else { "" }
        )?;
    }
    Ok(())
}
