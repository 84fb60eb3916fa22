//! `workdo bench`: what the runtime exists for, measured next to a yardstick in the same run.
//!
//! Runs in a database of its own (`workdo_bench`, dropped and created afresh) on the same server
//! the other commands use. Every figure is the median of `--runs` runs, with min and max.
//!
//! - **yardstick**: a minimal SQL queue (a table with a partial index on ready rows ordered by
//!   priority then run_at): claim N with `FOR UPDATE SKIP LOCKED` and commit, mark them done with
//!   `= ANY($1)` and commit; N = 1 and 100; 2 and 4 connections.
//! - **claim+complete**: single-step workflows through the store's claim and lease-guarded
//!   completion (dependants, workflow counters, events included), same N and connections; each
//!   transaction commits one batch's results and claims the next (one commit per batch, where
//!   the yardstick makes two).
//! - **DAG**: googleScannedBookWF-shaped workflows (9 steps, fan-out, fan-in) run by the real
//!   runtime with in-process, warm and exec no-op functions.
//! - **start rate**: workflows started one by one and in one call.
//! - **wake latency**: from a prerequisite's completion to its dependant's claim, one workflow at
//!   a time (LISTEN/NOTIFY), at low load and while the in-process DAG load runs.
//! - **scale**: latency of claiming one step with 10,000 and with 1,000,000 waiting steps.
//! - **calls**: what calling a no-op function costs without the database: warm processes one call
//!   at a time, warm processes with calls pipelined, and a process per call.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use sqlx::{ConnectOptions, Connection, PgPool};
use tokio_util::sync::CancellationToken;

use crate::db::{self, with_database};
use crate::status::Status;
use crate::store::{Change, ClaimRequest, StartRequest, Store};
use crate::{template, worker};

#[derive(Debug, Clone)]
pub struct Options {
    pub runs: usize,
    pub quick: bool,
    /// Scenarios to run; empty means all.
    pub only: Vec<Scenario>,
    /// The `workdo` executable whose `__noop-function` serves as the warm and exec no-op
    /// function; by default the running one.
    pub noop_function: Option<std::path::PathBuf>,
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

const DAG: &str = r#"
name: benchDagWF
steps:
  - { name: register-object, status: completed }
  - { name: descriptive-metadata, prereqs: [register-object], function: FN }
  - { name: google-convert, prereqs: [descriptive-metadata], function: FN }
  - { name: google-download, prereqs: [descriptive-metadata], function: FN }
  - { name: process-content, prereqs: [google-convert, google-download], function: FN }
  - { name: shelve, prereqs: [process-content], lifecycle: released, function: FN }
  - { name: publish, prereqs: [process-content], function: FN }
  - { name: sdr-ingest-transfer, prereqs: [shelve, publish], lifecycle: archived, function: FN }
  - { name: cleanup, prereqs: [sdr-ingest-transfer], lifecycle: accessioned, function: FN }
"#;

async fn reset(pool: &PgPool) -> Result<()> {
    sqlx::query(
        "truncate workdo.steps, workdo.workflows, workdo.events, workdo.milestones, workdo.objects,
                  workdo.alert_outbox cascade",
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn load(store: &Store, name: &str, source: &str) -> Result<()> {
    let loaded = template::parse(name, template::Format::Yaml, source)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    store.template_save(&loaded).await?;
    Ok(())
}

fn objects(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i:07}")).collect()
}

async fn start_bulk(store: &Store, template: &str, ids: &[String]) -> Result<()> {
    for chunk in ids.chunks(2000) {
        let mut req = StartRequest::new(template, &[]);
        req.objects = chunk.to_vec();
        store.workflow_start(&req).await?;
    }
    Ok(())
}

/// Every step that ran completed exactly once (the bench's own correctness check).
async fn check_exactly_once(pool: &PgPool, expected: i64) -> Result<()> {
    let (events, distinct, unfinished): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from workdo.events where kind in ('completed', 'status_set') and status = 'completed'),
                (select count(distinct (workflow_id, step)) from workdo.events
                  where kind in ('completed', 'status_set') and status = 'completed'),
                (select count(*) from workdo.steps where status <> 'completed')",
    )
    .fetch_one(pool)
    .await?;
    if events != expected || distinct != expected || unfinished != 0 {
        bail!(
            "bench check failed: expected {expected} completions, saw {events} ({distinct} distinct), {unfinished} steps unfinished"
        );
    }
    Ok(())
}

async fn yardstick(pool: &PgPool, jobs: i64, batch: i64, conns: usize) -> Result<f64> {
    sqlx::query("truncate bench_queue").execute(pool).await?;
    sqlx::query("insert into bench_queue (priority) select (g % 3) from generate_series(1, $1) g")
        .bind(jobs)
        .execute(pool)
        .await?;
    sqlx::query("analyze bench_queue").execute(pool).await?;
    let began = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0i64;
            loop {
                let ids: Vec<i64> = sqlx::query_scalar(
                    "with c as (select id from bench_queue where status = 'ready'
                                 order by priority desc, run_at, id limit $1 for update skip locked)
                     update bench_queue q set status = 'running' from c where q.id = c.id returning q.id",
                )
                .bind(batch)
                .fetch_all(&pool)
                .await?;
                if ids.is_empty() {
                    return Ok::<i64, sqlx::Error>(done);
                }
                sqlx::query("update bench_queue set status = 'done' where id = any($1)")
                    .bind(&ids)
                    .execute(&pool)
                    .await?;
                done += ids.len() as i64;
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    if total != jobs {
        bail!("yardstick processed {total} of {jobs} jobs");
    }
    Ok(jobs as f64 / began.elapsed().as_secs_f64())
}

async fn claim_complete(store: &Store, steps: usize, batch: i64, conns: usize) -> Result<f64> {
    reset(store.pool()).await?;
    start_bulk(store, "benchOneWF", &objects("one", steps)).await?;
    sqlx::query("analyze workdo.steps")
        .execute(store.pool())
        .await?;
    let began = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..conns {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("bench-{w}");
            let next = ClaimRequest {
                template: "benchOneWF",
                step: "work",
                lane: None,
                limit: batch,
                owner: &owner,
                lease: Duration::from_secs(300),
            };
            // Each transaction commits the last batch's results and claims the next batch.
            let mut changes: Vec<Change> = Vec::new();
            loop {
                let (_, claimed) = store.steps_apply_and_claim(&changes, &owner, &next).await?;
                if claimed.is_empty() {
                    return Ok::<(), crate::store::StoreError>(());
                }
                changes = claimed
                    .iter()
                    .map(|c| {
                        let mut ch = Change::new(c.id, Status::Completed, "completed");
                        ch.lease = Some(c.lease_token);
                        ch
                    })
                    .collect();
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let rate = steps as f64 / began.elapsed().as_secs_f64();
    check_exactly_once(store.pool(), steps as i64).await?;
    Ok(rate)
}

/// What one DAG run measured.
struct DagRun {
    steps_per_sec: f64,
    workflows_per_sec: f64,
    /// With `probe`: wake latencies (ms) of chain workflows run one at a time, 20 ms apart,
    /// by the same runtime while the DAG load runs.
    wake_ms: Vec<f64>,
}

async fn dag(store: &Store, function: &str, workflows: usize, probe: bool) -> Result<DagRun> {
    reset(store.pool()).await?;
    load(store, "bench-dag.yaml", &DAG.replace("FN", function)).await?;
    load(store, "bench-chain.yaml", CHAIN).await?;
    start_bulk(store, "benchDagWF", &objects("dag", workflows)).await?;
    let bindings = worker::bindings(store, &[]).await?;
    let bindings: Vec<_> = bindings
        .into_iter()
        .filter(|b| b.template == "benchDagWF" || (probe && b.template == "benchChainWF"))
        .collect();
    let token = CancellationToken::new();
    // With no polling to speak of, only NOTIFY wakes the probes' second steps.
    let config = worker::Config {
        schedules: false,
        poll_interval: if probe {
            Duration::from_secs(5)
        } else {
            worker::Config::default().poll_interval
        },
        ..worker::Config::default()
    };
    let began = Instant::now();
    let runtime = tokio::spawn(worker::run(store.clone(), config, bindings, token.clone()));
    let loaded = CancellationToken::new();
    let prober = probe.then(|| {
        let (store, loaded) = (store.clone(), loaded.clone());
        tokio::spawn(async move {
            // At least one probe, however short the run.
            let mut n = 0usize;
            loop {
                run_chain(&store, &format!("probe:{n:05}")).await?;
                n += 1;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    () = loaded.cancelled() => break,
                }
            }
            Ok::<usize, anyhow::Error>(n)
        })
    });
    loop {
        let done: i64 = sqlx::query_scalar(
            "select count(*) from workdo.workflows where template = 'benchDagWF' and status = 'completed'",
        )
        .fetch_one(store.pool())
        .await?;
        if done as usize == workflows {
            break;
        }
        if began.elapsed() > Duration::from_secs(900) {
            bail!("DAG bench did not finish: {done} of {workflows} workflows");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let secs = began.elapsed().as_secs_f64();
    loaded.cancel();
    let probes = match prober {
        Some(p) => p.await??,
        None => 0,
    };
    token.cancel();
    runtime.await??;
    // 8 steps per workflow run; the bootstrap step starts completed and has no completion event.
    let ran = 8 * workflows as i64;
    check_exactly_once(store.pool(), ran + 2 * probes as i64).await?;
    let wake_ms = chain_wake_ms(store).await?;
    if wake_ms.len() != probes {
        bail!(
            "bench check failed: {} of {probes} probes have a wake latency",
            wake_ms.len()
        );
    }
    Ok(DagRun {
        steps_per_sec: ran as f64 / secs,
        workflows_per_sec: workflows as f64 / secs,
        wake_ms,
    })
}

/// Calls per second of `spec`'s no-op function, `n` calls with `spec.concurrency` in flight;
/// every call must complete.
async fn call_rate(spec: &template::FunctionSpec, n: usize) -> Result<f64> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let invoker = Arc::new(
        crate::function::Invoker::new(spec, &Default::default())
            .map_err(|e| anyhow::anyhow!("bench function: {e}"))?,
    );
    let event = Arc::new(crate::function::probe_event("bench:calls"));
    let next = Arc::new(AtomicUsize::new(0));
    let timeout = Duration::from_secs_f64(spec.timeout_secs);
    // One call to start the processes, outside the timing.
    invoker.invoke(&event, timeout).await?;
    let began = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..spec.concurrency.max(1) {
        let (invoker, event, next) = (Arc::clone(&invoker), Arc::clone(&event), Arc::clone(&next));
        callers.spawn(async move {
            let mut done = 0usize;
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let outcome = invoker.invoke(&event, timeout).await?;
                if outcome.status != "completed" {
                    bail!(
                        "bench check failed: a no-op call answered {}",
                        outcome.status
                    );
                }
                done += 1;
            }
            Ok::<usize, anyhow::Error>(done)
        });
    }
    let mut done = 0;
    while let Some(r) = callers.join_next().await {
        done += r??;
    }
    let secs = began.elapsed().as_secs_f64();
    invoker.shutdown().await;
    if done != n {
        bail!("bench check failed: {done} of {n} calls completed");
    }
    Ok(n as f64 / secs)
}

async fn start_rate(store: &Store, n: usize, bulk: bool) -> Result<f64> {
    reset(store.pool()).await?;
    let ids = objects(if bulk { "bulk" } else { "single" }, n);
    let began = Instant::now();
    if bulk {
        let mut req = StartRequest::new("benchDagWF", &[]);
        req.objects = ids;
        store.workflow_start(&req).await?;
    } else {
        for id in &ids {
            store
                .workflow_start(&StartRequest::new("benchDagWF", &[id]))
                .await?;
        }
    }
    Ok(n as f64 / began.elapsed().as_secs_f64())
}

/// Two-step workflows whose second step's wake-up is measured.
const CHAIN: &str = "name: benchChainWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n  - { name: b, prereqs: [a], function: { builtin: noop } }\n";

/// Start one chain workflow for `id` and wait until it completes.
async fn run_chain(store: &Store, id: &str) -> Result<()> {
    store
        .workflow_start(&StartRequest::new("benchChainWF", &[id]))
        .await?;
    let began = Instant::now();
    loop {
        let done: bool = sqlx::query_scalar(
            "select status = 'completed' from workdo.workflows where object_id = $1",
        )
        .bind(id)
        .fetch_one(store.pool())
        .await?;
        if done {
            return Ok(());
        }
        if began.elapsed() > Duration::from_secs(30) {
            bail!("wake latency: {id} did not finish");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Wake latencies of the chain workflows run, ms: from the first step's completion (its
/// transaction's time) to the second step's claim.
async fn chain_wake_ms(store: &Store) -> Result<Vec<f64>> {
    Ok(sqlx::query_scalar(
        "select extract(epoch from b.started_at - a.finished_at)::float8 * 1000
           from workdo.steps a join workdo.steps b on b.workflow_id = a.workflow_id
          where a.template = 'benchChainWF' and a.name = 'a' and b.name = 'b'",
    )
    .fetch_all(store.pool())
    .await?)
}

async fn wake_latency(store: &Store, n: usize) -> Result<(f64, f64)> {
    reset(store.pool()).await?;
    load(store, "bench-chain.yaml", CHAIN).await?;
    let bindings: Vec<_> = worker::bindings(store, &[])
        .await?
        .into_iter()
        .filter(|b| b.template == "benchChainWF")
        .collect();
    let token = CancellationToken::new();
    let config = worker::Config {
        schedules: false,
        poll_interval: Duration::from_secs(5),
        ..worker::Config::default()
    };
    let runtime = tokio::spawn(worker::run(store.clone(), config, bindings, token.clone()));
    for id in objects("wake", n) {
        run_chain(store, &id).await?;
    }
    token.cancel();
    runtime.await??;
    let mut ms = chain_wake_ms(store).await?;
    Ok((percentile(&mut ms, 0.5), percentile(&mut ms, 0.99)))
}

async fn scale(store: &Store, waiting: i64, claims: usize) -> Result<f64> {
    reset(store.pool()).await?;
    let tid: i64 = sqlx::query_scalar(
        "select id from workdo.templates where name = 'benchOneWF' and is_current",
    )
    .fetch_one(store.pool())
    .await?;
    // Waiting steps (and the ready ones to claim), written directly: one workflow each. A
    // million rows take tens of seconds by design: on a connection of its own that does not
    // warn about slow statements.
    let mut setup = store
        .pool()
        .connect_options()
        .as_ref()
        .clone()
        .disable_statement_logging()
        .connect()
        .await?;
    sqlx::query(
        "with o as (insert into workdo.objects (id) select 'scale:' || g from generate_series(1, $1 + $2) g returning id),
              w as (insert into workdo.workflows (object_id, template, template_id, version, unfinished)
                    select id, 'benchOneWF', $3, 1, 1 from o returning id, object_id)
         insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts, pending, run_at)
         select w.id, w.object_id, 'benchOneWF', 1, 'default', 'work',
                case when w.id % (($1 + $2) / $2) = 0 then 'ready' else 'waiting' end, 3,
                case when w.id % (($1 + $2) / $2) = 0 then 0 else 1 end, now()
           from w",
    )
    .bind(waiting)
    .bind(claims as i64 * 2)
    .bind(tid)
    .execute(&mut setup)
    .await?;
    setup.close().await?;
    sqlx::query("analyze workdo.steps")
        .execute(store.pool())
        .await?;
    let mut ms = Vec::with_capacity(claims);
    for _ in 0..claims {
        let began = Instant::now();
        let c = store
            .step_claim(
                "benchOneWF",
                "work",
                None,
                1,
                "bench",
                Duration::from_secs(300),
            )
            .await?;
        ms.push(began.elapsed().as_secs_f64() * 1000.0);
        if c.is_empty() {
            bail!("scale bench ran out of ready steps");
        }
    }
    Ok(percentile(&mut ms, 0.5))
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
    {
        let pool = db::connect(&admin, 1).await?;
        sqlx::query("drop database if exists workdo_bench with (force)")
            .execute(&pool)
            .await?;
        pool.close().await;
    }
    db::create_database(&admin, "workdo_bench").await?;
    let pool = db::connect(&with_database(target_url, "workdo_bench"), 16).await?;
    db::migrate(&pool).await?;
    let store = Store::new(pool.clone());
    sqlx::query(
        "create table bench_queue (id bigint generated always as identity primary key,
                                   priority integer not null default 0,
                                   run_at timestamptz not null default now(),
                                   status text not null default 'ready')",
    )
    .execute(&pool)
    .await?;
    sqlx::query("create index bench_queue_ready on bench_queue (priority desc, run_at, id) where status = 'ready'")
        .execute(&pool)
        .await?;
    load(
        &store,
        "bench-one.yaml",
        "name: benchOneWF\nsteps:\n  - { name: work, function: { builtin: noop } }\n",
    )
    .await?;
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
    let noop = format!("[{:?}, __noop-function]", exe.display().to_string());
    let q = opts.quick;
    let (jobs1, jobs100, dag_n, exec_n, starts, wakes, small, large, claims) = if q {
        (200, 2_000, 20, 4, 100, 10, 2_000, 10_000, 50)
    } else {
        // 5,000 DAG workflows: a run of several seconds, so the figure is the steady rate and
        // not the start-up and the critical path's tail (six group-committed waits in a row),
        // which made up a quarter to a third of a 1,000-workflow run (BENCHMARKS.md item 27).
        (4_000, 40_000, 5_000, 60, 2_000, 100, 10_000, 1_000_000, 200)
    };
    let runs = opts.runs.max(1);
    let mut rows = Vec::new();
    let queue = if opts.runs(Scenario::Queue) {
        vec![(1i64, jobs1), (100, jobs100)]
    } else {
        Vec::new()
    };
    for (batch, jobs) in queue {
        for conns in [2usize, 4] {
            let mut yard = Vec::new();
            let mut ours = Vec::new();
            for _ in 0..runs {
                yard.push(yardstick(&pool, jobs, batch, conns).await?);
                ours.push(claim_complete(&store, jobs as usize, batch, conns).await?);
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
            rows.push(y);
            rows.push(o);
        }
    }
    let dags = if opts.runs(Scenario::Dag) {
        vec![
            (
                "in-process",
                "{ builtin: noop, concurrency: 100 }".to_string(),
                dag_n,
            ),
            (
                "warm",
                // Calls queue per process (16 each), so a process never waits for a claim.
                format!("{{ warm: {noop}, pool: 2, pipeline: 16, concurrency: 32 }}"),
                dag_n,
            ),
            (
                "exec",
                format!("{{ exec: {noop}, concurrency: 2 }}"),
                exec_n,
            ),
        ]
    } else {
        Vec::new()
    };
    let (mut loaded50, mut loaded99) = (Vec::new(), Vec::new());
    for (label, function, n) in dags {
        let (mut s, mut w) = (Vec::new(), Vec::new());
        // The wake-up under load is probed during the in-process runs.
        let probe = label == "in-process";
        for _ in 0..runs {
            let mut run = dag(&store, &function, n, probe).await?;
            s.push(run.steps_per_sec);
            w.push(run.workflows_per_sec);
            if probe {
                loaded50.push(percentile(&mut run.wake_ms, 0.5));
                loaded99.push(percentile(&mut run.wake_ms, 0.99));
            }
        }
        rows.push(row(
            format!("DAG (9 steps), {label} functions: steps"),
            "steps/s",
            s,
        ));
        rows.push(row(
            format!("DAG (9 steps), {label} functions: workflows"),
            "workflows/s",
            w,
        ));
    }
    let starts_in = if opts.runs(Scenario::Start) {
        vec![false, true]
    } else {
        Vec::new()
    };
    for bulk in starts_in {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(start_rate(&store, starts, bulk).await?);
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
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    let wake_runs = if opts.runs(Scenario::Wake) { runs } else { 0 };
    for _ in 0..wake_runs {
        let (a, b) = wake_latency(&store, wakes).await?;
        p50.push(a);
        p99.push(b);
    }
    if wake_runs > 0 {
        rows.push(row("wake latency, low load: p50".into(), "ms", p50));
        rows.push(row("wake latency, low load: p99".into(), "ms", p99));
    }
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
    let mut at = Vec::new();
    let depths = if opts.runs(Scenario::Scale) {
        vec![small, large]
    } else {
        Vec::new()
    };
    for depth in depths {
        let mut v = Vec::new();
        for _ in 0..runs {
            v.push(scale(&store, depth, claims).await?);
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
    if opts.runs(Scenario::Calls) {
        let argv = vec![exe.display().to_string(), "__noop-function".to_string()];
        let warm = |pipeline: u32, concurrency: u32| template::FunctionSpec {
            runner: template::Runner::Warm {
                argv: argv.clone(),
                pool: 2,
                pipeline,
            },
            timeout_secs: 60.0,
            concurrency,
            env: Default::default(),
            documents: Vec::new(),
        };
        let exec = template::FunctionSpec {
            runner: template::Runner::Exec { argv: argv.clone() },
            concurrency: 2,
            ..warm(1, 2)
        };
        let (n_warm, n_exec) = if q { (200, 20) } else { (20_000, 400) };
        let mut base = None;
        for (label, spec, n) in [
            ("warm, pool 2, one call at a time each", warm(1, 8), n_warm),
            (
                "warm, pool 2, 16 calls pipelined each",
                warm(16, 32),
                n_warm,
            ),
            ("exec, 2 at a time", exec, n_exec),
        ] {
            let mut v = Vec::new();
            for _ in 0..runs {
                v.push(call_rate(&spec, n).await?);
            }
            let mut r = row(format!("function calls, {label}"), "calls/s", v);
            match base {
                None => base = Some(r.median),
                Some(b) => r.ratio = Some(r.median / f64::max(b, 1e-9)),
            }
            rows.push(r);
        }
    }
    pool.close().await;
    if json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
    } else {
        crate::cli::table(
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
            "\nmedians of {runs} run(s){}; ratios: ours ÷ the yardstick with the same batch and connections, the deepest ÷ the shallowest queue, and each function call figure ÷ the first",
            if q { ", quick sizes" } else { "" }
        )?;
    }
    Ok(rows)
}
