//! The scenarios: each sets up its own rows, runs, and checks itself (every yardstick job
//! processed, every workdo step completed exactly once) so that a fast wrong answer fails.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tokio_util::sync::CancellationToken;

use crate::model::template;
use crate::runtime;
use crate::store::{StartRequest, Store};

pub(super) const DAG: &str = r#"
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

pub(super) async fn load(store: &Store, name: &str, source: &str) -> Result<()> {
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

/// The yardstick: `conns` connections each claiming `batch` rows and committing, then marking
/// them done and committing, until the queue is empty.
pub(super) async fn yardstick(store: &Store, jobs: i64, batch: i64, conns: usize) -> Result<f64> {
    store.bench_queue_fill(jobs).await?;
    let began = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0i64;
            loop {
                let ids = store.bench_queue_claim(batch).await?;
                if ids.is_empty() {
                    return Ok::<i64, crate::store::StoreError>(done);
                }
                store.bench_queue_complete(&ids).await?;
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

/// `steps` one-step workflows through the real runtime: its worker claims `batch` steps at a
/// time with `batch × conns` calls in flight, an in-process no-op function answers, and
/// `conns` completers commit at most `batch` results a transaction through the one commit
/// path the runtime always takes.
pub(super) async fn claim_complete(
    store: &Store,
    steps: usize,
    batch: i64,
    conns: usize,
) -> Result<f64> {
    store.bench_reset().await?;
    let source = format!(
        "name: benchOneWF\nsteps:\n  - {{ name: work, batch-limit: {batch}, function: {{ builtin: noop, concurrency: {} }} }}\n",
        batch as usize * conns
    );
    load(store, "bench-one.yaml", &source).await?;
    start_bulk(store, "benchOneWF", &objects("one", steps)).await?;
    store.bench_analyze().await?;
    let bindings: Vec<_> = runtime::bindings(store, &["benchOneWF:work".to_string()]).await?;
    let config = runtime::Config {
        schedules: false,
        completers: conns,
        commit_batch: batch as usize,
        ..runtime::Config::default()
    };
    let token = CancellationToken::new();
    let began = Instant::now();
    let run = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
    wait_completed(store, "benchOneWF", steps).await?;
    let rate = steps as f64 / began.elapsed().as_secs_f64();
    token.cancel();
    run.await??;
    store.bench_check_exactly_once(steps as i64).await?;
    Ok(rate)
}

/// Wait until `n` workflows of `template` are completed (checked every 20 ms).
async fn wait_completed(store: &Store, template: &str, n: usize) -> Result<()> {
    let began = Instant::now();
    loop {
        let done = store.bench_workflows_completed(template).await?;
        if done as usize == n {
            return Ok(());
        }
        if began.elapsed() > Duration::from_secs(900) {
            bail!("{template} did not finish: {done} of {n} workflows");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What one DAG run measured.
pub(super) struct DagRun {
    pub(super) steps_per_sec: f64,
    pub(super) workflows_per_sec: f64,
    /// With `probe`: wake latencies (ms) of chain workflows run one at a time, 20 ms apart,
    /// by the same runtime while the DAG load runs.
    pub(super) wake_ms: Vec<f64>,
}

pub(super) async fn dag(
    store: &Store,
    function: &str,
    workflows: usize,
    (probe, within): (bool, Option<Duration>),
) -> Result<DagRun> {
    store.bench_reset().await?;
    load(store, "bench-dag.yaml", &DAG.replace("FN", function)).await?;
    load(store, "bench-chain.yaml", CHAIN).await?;
    start_bulk(store, "benchDagWF", &objects("dag", workflows)).await?;
    let bindings = runtime::bindings(store, &[]).await?;
    let bindings: Vec<_> = bindings
        .into_iter()
        .filter(|b| b.template == "benchDagWF" || (probe && b.template == "benchChainWF"))
        .collect();
    let token = CancellationToken::new();
    // With no polling to speak of, only NOTIFY wakes the probes' second steps.
    let config = runtime::Config {
        schedules: false,
        poll_interval: if probe {
            Duration::from_secs(5)
        } else {
            runtime::Config::default().poll_interval
        },
        commit_within: within,
        ..runtime::Config::default()
    };
    let began = Instant::now();
    let runtime = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
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
    wait_completed(store, "benchDagWF", workflows).await?;
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
    store
        .bench_check_exactly_once(ran + 2 * probes as i64)
        .await?;
    let wake_ms = store.bench_chain_wake_ms("benchChainWF").await?;
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
pub(super) async fn call_rate(spec: &template::FunctionSpec, n: usize) -> Result<f64> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let invoker = Arc::new(
        crate::invoke::Invoker::new(spec, &Default::default())
            .map_err(|e| anyhow::anyhow!("bench function: {e}"))?,
    );
    let event = Arc::new(crate::invoke::probe_event("bench:calls"));
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

pub(super) async fn start_rate(store: &Store, n: usize, bulk: bool) -> Result<f64> {
    store.bench_reset().await?;
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
pub(super) const CHAIN: &str = "name: benchChainWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n  - { name: b, prereqs: [a], function: { builtin: noop } }\n";

/// Start one chain workflow for `id` and wait until it completes.
async fn run_chain(store: &Store, id: &str) -> Result<()> {
    store
        .workflow_start(&StartRequest::new("benchChainWF", &[id]))
        .await?;
    let began = Instant::now();
    loop {
        let done = store.bench_object_completed(id).await?;
        if done {
            return Ok(());
        }
        if began.elapsed() > Duration::from_secs(30) {
            bail!("wake latency: {id} did not finish");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub(super) async fn wake_latency(store: &Store, n: usize) -> Result<(f64, f64)> {
    store.bench_reset().await?;
    load(store, "bench-chain.yaml", CHAIN).await?;
    let bindings: Vec<_> = runtime::bindings(store, &[])
        .await?
        .into_iter()
        .filter(|b| b.template == "benchChainWF")
        .collect();
    let token = CancellationToken::new();
    let config = runtime::Config {
        schedules: false,
        poll_interval: Duration::from_secs(5),
        ..runtime::Config::default()
    };
    let runtime = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
    for id in objects("wake", n) {
        run_chain(store, &id).await?;
    }
    token.cancel();
    runtime.await??;
    let mut ms = store.bench_chain_wake_ms("benchChainWF").await?;
    Ok((
        super::percentile(&mut ms, 0.5),
        super::percentile(&mut ms, 0.99),
    ))
}

/// p50 latency (ms) of claiming one step, `claims` times, with `waiting` steps waiting.
pub(super) async fn scale(store: &Store, waiting: i64, claims: usize) -> Result<f64> {
    store.bench_reset().await?;
    load(store, "bench-scale.yaml", SCALE).await?;
    store
        .bench_fill_waiting("benchScaleWF", waiting, claims as i64 * 2)
        .await?;
    store.bench_analyze().await?;
    let mut ms = Vec::with_capacity(claims);
    for _ in 0..claims {
        let began = Instant::now();
        let c = store
            .step_claim(
                "benchScaleWF",
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
    Ok(super::percentile(&mut ms, 0.5))
}

/// The scale figure's template: one step, which the claims take.
const SCALE: &str = "name: benchScaleWF\nsteps:\n  - { name: work, function: { builtin: noop } }\n";

/// Generated steps against ordinary ones of the same shape: each workflow is two steps, then
/// `width` steps side by side after them. Generated (`slots`: the bricklet's step's
/// concurrency): an observer finds `width` fragments in the object's document and a generator
/// composes `width` parallel instances of a one-step bricklet. Ordinary (`None`): the same
/// twelve steps, fixed in the template, each of concurrency 100. Returns steps per second
/// (all of them, claimed and completed through the runtime; every one checked to have
/// completed exactly once) over the run, and over the workflows' start and the run.
pub(super) async fn fanout(
    store: &Store,
    workflows: usize,
    width: usize,
    slots: Option<usize>,
) -> Result<(f64, f64)> {
    store.bench_reset().await?;
    let noop = "{ builtin: noop, concurrency: 100 }";
    let template = if let Some(slots) = slots {
        load(
            store,
            "bench-gen.yaml",
            &format!(
                "name: benchGenWF\nsteps:\n  - {{ name: look, observe: {{ document: d, rules: [{{ match: '//f', op: add, generator: gen, bricklets: [w] }}] }} }}\n  - {{ name: gen, prereqs: [look], generate: {{ refset: [w], rules: [{{ parallel: w }}] }} }}\nbricklets:\n  - {{ name: w, steps: [{{ name: work, function: {{ builtin: noop, concurrency: {slots} }} }}] }}\n"
            ),
        )
        .await?;
        "benchGenWF"
    } else {
        let mut source = format!(
            "name: benchFanWF\nsteps:\n  - {{ name: look, function: {noop} }}\n  - {{ name: gen, prereqs: [look], function: {noop} }}\n"
        );
        for i in 1..=width {
            source.push_str(&format!(
                "  - {{ name: w{i}, prereqs: [gen], function: {noop} }}\n"
            ));
        }
        load(store, "bench-fan.yaml", &source).await?;
        "benchFanWF"
    };
    let ids = objects("fan", workflows);
    let document = format!("<d>{}</d>", "<f/>".repeat(width));
    store.bench_documents(&ids, "d", &document).await?;
    let starting = Instant::now();
    start_bulk(store, template, &ids).await?;
    let start_secs = starting.elapsed().as_secs_f64();
    store.bench_analyze().await?;
    let bindings: Vec<_> = runtime::bindings(store, &[])
        .await?
        .into_iter()
        .filter(|b| b.template == template)
        .collect();
    let config = runtime::Config {
        schedules: false,
        ..runtime::Config::default()
    };
    let token = CancellationToken::new();
    let began = Instant::now();
    let run = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
    wait_completed(store, template, workflows).await?;
    let steps = workflows * (2 + width);
    let run_secs = began.elapsed().as_secs_f64();
    token.cancel();
    run.await??;
    store.bench_check_exactly_once(steps as i64).await?;
    Ok((
        steps as f64 / run_secs,
        steps as f64 / (start_secs + run_secs),
    ))
}

const COUNTER_MACHINE: &str = "name: benchMachineWF\nkind: machine\nvariables: { count: 0 }\ninitial: Idle\nstates:\n  Idle:\n    on:\n      bump: { to: Idle, actions: [ { set: { count: \"${count + 1}\" } } ] }\n      arm: Armed\n  Armed:\n    enter:\n      - alarm: { signal: ring, in: \"${grace}\" }\n    on:\n      ring: Rung\n  Rung: { final: true }\n";

/// Signals per second: `jobs` machine jobs each signalled `per_job` times, `parallel` jobs at a
/// time (each job's signals one after another: a job's transitions are serialised anyway).
/// Every signal is checked to have counted.
pub(super) async fn machine_signals(
    store: &Store,
    jobs: usize,
    per_job: usize,
    parallel: usize,
) -> Result<f64> {
    use std::sync::Arc;
    store.bench_reset().await?;
    load(store, "bench-machine.yaml", COUNTER_MACHINE).await?;
    let ids = objects("job", jobs);
    start_bulk(store, "benchMachineWF", &ids).await?;
    let jobs_ids: Vec<i64> = {
        let mut out = Vec::with_capacity(jobs);
        for o in &ids {
            out.push(store.machine_job(o, "benchMachineWF").await?);
        }
        out
    };
    let gate = Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for id in jobs_ids {
        let (store, gate) = (store.clone(), Arc::clone(&gate));
        tasks.spawn(async move {
            let _slot = gate.acquire_owned().await?;
            for _ in 0..per_job {
                store
                    .machine_signal(id, "bump", &serde_json::json!({}), "bench")
                    .await?;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let rate = (jobs * per_job) as f64 / began.elapsed().as_secs_f64();
    let (total, _) = store.bench_machine_totals("Idle").await?;
    if total != (jobs * per_job) as i64 {
        bail!(
            "bench check failed: {total} of {} signals counted",
            jobs * per_job
        );
    }
    Ok(rate)
}

/// How late alarms fire (ms) under the runtime: `jobs` jobs armed with alarms due 200 ms to
/// 1.2 s ahead, fired by one runtime; every job must ring once.
pub(super) async fn alarm_delays(store: &Store, jobs: usize) -> Result<Vec<f64>> {
    store.bench_reset().await?;
    load(store, "bench-machine.yaml", COUNTER_MACHINE).await?;
    // The runtime runs while the jobs are armed, as it would: an alarm's delay is from its due
    // time to its firing, not from the start of the run.
    let config = runtime::Config {
        schedules: false,
        ..runtime::Config::default()
    };
    let token = CancellationToken::new();
    let run = tokio::spawn(runtime::run(
        store.clone(),
        config,
        Vec::new(),
        token.clone(),
    ));
    for i in 0..jobs {
        let mut req = StartRequest::new("benchMachineWF", &[]);
        req.objects = vec![format!("alarm:{i:07}")];
        req.context = serde_json::json!({"grace": format!("{}ms", 200 + (i * 1000) / jobs.max(1))});
        store.workflow_start(&req).await?;
        let id = store
            .machine_job(&format!("alarm:{i:07}"), "benchMachineWF")
            .await?;
        store
            .machine_signal(id, "arm", &serde_json::json!({}), "bench")
            .await?;
    }
    let began = Instant::now();
    loop {
        let (_, rung) = store.bench_machine_totals("Rung").await?;
        if rung as usize == jobs {
            break;
        }
        if began.elapsed() > Duration::from_secs(120) {
            bail!("alarms did not fire: {rung} of {jobs} jobs rang");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    token.cancel();
    run.await??;
    let late = store.bench_alarm_late_ms().await?;
    if late.len() != jobs {
        bail!(
            "bench check failed: {} alarms fired for {jobs} jobs",
            late.len()
        );
    }
    Ok(late)
}

/// Archive `workflows` finished workflows (filled directly, four events each) in batches of
/// 1,000, as `workdo archive` does; checks every one moved with its steps and events. Returns
/// workflows per second and the events there were.
pub(super) async fn archive_rate(store: &Store, workflows: i64) -> Result<(f64, i64)> {
    load(store, "bench-chain.yaml", CHAIN).await?;
    let events = store.bench_fill_finished("benchChainWF", workflows).await?;
    let before = chrono::Utc::now() - chrono::Duration::days(1);
    let began = Instant::now();
    let done = store.archive(before, 1000, false).await?;
    let secs = began.elapsed().as_secs_f64();
    anyhow::ensure!(
        done.workflows == u64::try_from(workflows).unwrap_or(0)
            && done.steps == 2 * done.workflows
            && done.events == 4 * done.workflows,
        "archive moved {done:?} of {workflows} workflows"
    );
    store.bench_archive_clear().await?;
    Ok((workflows as f64 / secs.max(1e-9), events))
}
