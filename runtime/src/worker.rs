//! The thin runtime: workers that claim ready steps, call their functions and commit results.
//!
//! One worker loop per bound template step claims up to `batch-limit` ready steps (never more
//! than it has free concurrency for), calls the function for each, and hands the result to the
//! **completers**, which commit the results of all workers in batches: one transaction for many
//! results (group commit). Results are sharded over the completers by object, so completers
//! commit in parallel without ever contending for the same rows: everything a result changes
//! (its steps, their dependants, its workflow, its object) belongs to one object. A worker sleeps
//! until a NOTIFY says its step has ready work, or the polling interval passes (the fallback if a
//! notification is lost). A **maintenance** loop promotes due `scheduled`/`retrying` steps and
//! returns expired leases to the queue. Every loop is safe to run in many processes at once:
//! claims and sweeps use `SKIP LOCKED`.
//!
//! Shutdown: stop claiming, give calls in flight `grace` to finish, then abort the rest and
//! release their steps (back to the queue, attempt given back), commit, and return.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::function::{Event, Invoker, PROTOCOL};
use crate::retry::{Backoff, decide};
use crate::status::Status;
use crate::store::{Change, Claimed, READY_CHANNEL, StepResult, Store, StoreError};
use crate::template::FunctionSpec;

/// How the runtime behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Names this process in leases and events.
    pub owner: String,
    /// Longest a worker sleeps without a notification before claiming again.
    pub poll_interval: Duration,
    /// A lease lasts the function's timeout plus this.
    pub lease_margin: Duration,
    /// On shutdown, how long calls in flight may take to finish.
    pub grace: Duration,
    pub backoff: Backoff,
    /// Environment for every exec and warm function.
    pub env: BTreeMap<String, String>,
    /// Claim size for steps with no `batch-limit`.
    pub default_batch: u32,
    /// How often due steps are promoted and leases swept.
    pub maintenance_interval: Duration,
    /// Most results committed in one transaction.
    pub commit_batch: usize,
    /// Completers committing results in parallel, each on its own connection (results are
    /// sharded by object, so they never wait for each other's row locks).
    pub completers: usize,
    /// Alert mail; `None` leaves alerts in the outbox.
    pub alerts: Option<crate::alerts::AlertConfig>,
    /// Fire cron schedules.
    pub schedules: bool,
    /// How often the stuck-step monitor looks.
    pub stuck_check_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            owner: default_owner(),
            poll_interval: Duration::from_secs(1),
            lease_margin: Duration::from_secs(30),
            grace: Duration::from_secs(30),
            backoff: Backoff::default(),
            env: BTreeMap::new(),
            default_batch: 100,
            maintenance_interval: Duration::from_millis(200),
            commit_batch: 500,
            completers: 2,
            alerts: None,
            schedules: true,
            stuck_check_interval: Duration::from_secs(30),
        }
    }
}

/// `host:pid`.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// A template step bound to the function that performs it.
#[derive(Debug, Clone)]
pub struct Binding {
    pub template: String,
    pub step: String,
    pub function: FunctionSpec,
    pub batch_limit: Option<u32>,
    /// Intermediate statuses the step may report.
    pub declared: Vec<String>,
}

impl Binding {
    pub fn key(&self) -> String {
        format!("{}:{}", self.template, self.step)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0} has no function to run (a human or skip-queue step)")]
    NotBound(String),
    #[error("{0}: {1}")]
    Function(String, String),
}

/// Steps of the current template versions that have a function; with `only`, just those
/// (`template:step`), each of which must exist and have a function.
///
/// # Errors
/// An unknown template or step in `only`, or one without a function.
pub async fn bindings(store: &Store, only: &[String]) -> Result<Vec<Binding>, WorkerError> {
    let mut out = Vec::new();
    for t in store.template_list().await? {
        for s in &t.spec.steps {
            let Some(f) = &s.function else { continue };
            if s.skip_queue {
                continue;
            }
            out.push(Binding {
                template: t.name.clone(),
                step: s.name.clone(),
                function: f.clone(),
                batch_limit: s.batch_limit,
                declared: s.statuses.clone(),
            });
        }
    }
    if only.is_empty() {
        return Ok(out);
    }
    let mut chosen = Vec::new();
    for key in only {
        match out.iter().find(|b| &b.key() == key) {
            Some(b) => chosen.push(b.clone()),
            None => {
                let (t, s) = key.split_once(':').unwrap_or((key.as_str(), ""));
                let template = store.template_current(t).await?;
                if template.spec.step(s).is_none() {
                    return Err(StoreError::UnknownStep {
                        template: t.into(),
                        step: s.into(),
                    }
                    .into());
                }
                return Err(WorkerError::NotBound(key.clone()));
            }
        }
    }
    Ok(chosen)
}

struct Completion {
    result: StepResult,
}

struct Shared {
    store: Store,
    config: Config,
    /// One channel per completer; a result goes to its object's.
    done: Vec<mpsc::Sender<Completion>>,
}

impl Shared {
    /// Hand a result to the completer that owns its object.
    async fn finish(&self, result: StepResult) {
        let i = shard(&result.object_id, self.done.len());
        if let Some(tx) = self.done.get(i) {
            let _ = tx.send(Completion { result }).await;
        }
    }
}

/// The completer (of `n`) that commits an object's results: stable for the life of the
/// process, so one object's results are always committed in the order they were handed over.
fn shard(object_id: &str, n: usize) -> usize {
    use std::hash::{Hash, Hasher};
    if n <= 1 {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    object_id.hash(&mut h);
    (h.finish() % n as u64) as usize
}

/// Run workers for `bindings` until `shutdown` is cancelled; returns once every claimed step has
/// been committed or released.
///
/// # Errors
/// When a function cannot be prepared (e.g. an unknown builtin).
pub async fn run(
    store: Store,
    config: Config,
    bindings: Vec<Binding>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    crate::install_crypto();
    let mut invokers = Vec::new();
    for b in &bindings {
        let inv = Invoker::new(&b.function, &config.env)
            .map_err(|e| WorkerError::Function(b.key(), e))?;
        invokers.push(Arc::new(inv));
    }
    let mut done = Vec::new();
    let mut completers = Vec::new();
    for _ in 0..config.completers.max(1) {
        let (tx, rx) = mpsc::channel::<Completion>(4096);
        done.push(tx);
        completers.push(tokio::spawn(complete(
            store.clone(),
            rx,
            config.commit_batch,
            config.owner.clone(),
        )));
    }
    let notifies: HashMap<String, Arc<Notify>> = bindings
        .iter()
        .map(|b| (b.key(), Arc::new(Notify::new())))
        .collect();
    let background = CancellationToken::new();
    let listener = tokio::spawn(listen(store.clone(), notifies.clone(), background.clone()));
    let maintenance = tokio::spawn(maintain(
        store.clone(),
        config.maintenance_interval,
        background.clone(),
    ));
    let scheduler = config
        .schedules
        .then(|| tokio::spawn(fire_schedules(store.clone(), background.clone())));
    let alerts = match &config.alerts {
        Some(a) => {
            let sender = crate::alerts::Sender::new(store.clone(), a.clone())
                .map_err(|e| WorkerError::Function("alerts".into(), e.to_string()))?;
            let bound: Vec<String> = bindings.iter().map(Binding::key).collect();
            Some(tokio::spawn(send_alerts(
                sender,
                bound,
                config.stuck_check_interval,
                background.clone(),
            )))
        }
        None => None,
    };
    let shared = Arc::new(Shared {
        store,
        config,
        done,
    });
    let mut workers = JoinSet::new();
    for (b, inv) in bindings.into_iter().zip(invokers) {
        let notify = notifies.get(&b.key()).cloned().unwrap_or_default();
        workers.spawn(work(Arc::clone(&shared), b, inv, notify, shutdown.clone()));
    }
    info!(workers = workers.len(), owner = %shared.config.owner, "runtime started");
    while workers.join_next().await.is_some() {}
    // With no steps to work on, this process still promotes, sweeps, fires schedules and sends
    // alerts until it is told to stop.
    shutdown.cancelled().await;
    drop(shared); // closes the completers' channels once every worker is done
    for c in completers {
        let _ = c.await;
    }
    background.cancel();
    let _ = listener.await;
    let _ = maintenance.await;
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    if let Some(a) = alerts {
        let _ = a.await;
    }
    info!("runtime stopped");
    Ok(())
}

/// One worker loop for one template step.
async fn work(
    shared: Arc<Shared>,
    binding: Binding,
    invoker: Arc<Invoker>,
    notify: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let cfg = &shared.config;
    let timeout = Duration::from_secs_f64(binding.function.timeout_secs);
    let lease = timeout + cfg.lease_margin;
    let batch = binding.batch_limit.unwrap_or(cfg.default_batch).max(1) as usize;
    let slots = Arc::new(Semaphore::new(binding.function.concurrency.max(1) as usize));
    let inflight: Arc<Mutex<HashMap<i64, Claimed>>> = Arc::default();
    let mut calls = JoinSet::new();
    let binding = Arc::new(binding);
    loop {
        while calls.try_join_next().is_some() {}
        let first = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            () = shutdown.cancelled() => break,
        };
        let mut permits = vec![first];
        while permits.len() < batch {
            match Arc::clone(&slots).try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let claim_span = tracing::info_span!(
            "claim",
            otel.name = %format!("claim {}", binding.key()),
            workdo.template = %binding.template,
            workdo.step = %binding.step,
            workdo.requested = permits.len(),
        );
        let began = std::time::Instant::now();
        let claim = {
            use tracing::Instrument;
            shared
                .store
                .step_claim(
                    &binding.template,
                    &binding.step,
                    None,
                    permits.len() as i64,
                    &cfg.owner,
                    lease,
                )
                .instrument(claim_span)
                .await
        };
        let mut claimed = match claim {
            Ok(c) => c,
            Err(e) => {
                warn!(step = %binding.key(), error = %e, "claim failed; retrying");
                drop(permits);
                tokio::select! {
                    () = tokio::time::sleep(cfg.poll_interval) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
        };
        crate::telemetry::metrics().claim.record(
            began.elapsed().as_secs_f64(),
            &[
                opentelemetry::KeyValue::new("template", binding.template.clone()),
                opentelemetry::KeyValue::new("step", binding.step.clone()),
            ],
        );
        debug!(step = %binding.key(), n = claimed.len(), "claimed");
        let mut inputs = match shared
            .store
            .step_inputs(&mut claimed, &binding.function.documents)
            .await
        {
            Ok(i) => i,
            Err(e) => {
                // Never call a function without what it asked for: give the steps back (their
                // attempts too) and try again after the poll interval.
                warn!(step = %binding.key(), error = %e, "reading step inputs failed; giving the steps back");
                let reason = format!("reading inputs failed: {e}");
                for c in claimed {
                    shared.finish(released(c, &cfg.owner, &reason)).await;
                }
                drop(permits);
                tokio::select! {
                    () = tokio::time::sleep(cfg.poll_interval) => continue,
                    () = shutdown.cancelled() => break,
                }
            }
        };
        if let Ok(mut f) = inflight.lock() {
            f.extend(claimed.iter().map(|c| (c.id, c.clone())));
        }
        // Fewer ready steps than free slots (none at all, often): the queue is empty now.
        let drained = claimed.len() < permits.len();
        for (c, permit) in claimed.into_iter().zip(permits) {
            let input = inputs.remove(&c.id).unwrap_or_default();
            let shared = Arc::clone(&shared);
            let invoker = Arc::clone(&invoker);
            let binding = Arc::clone(&binding);
            let inflight = Arc::clone(&inflight);
            calls.spawn(async move {
                let result = execute(&invoker, &binding, &shared.config, &c, input, timeout).await;
                shared.finish(result).await;
                if let Ok(mut f) = inflight.lock() {
                    f.remove(&c.id);
                }
                drop(permit);
            });
        }
        if drained {
            // Claim again once a commit makes steps of this step ready (its NOTIFY; one that
            // arrived during this claim is kept by `notify` and wakes us at once) or the poll
            // interval passes, not straight away: after a claim that got some steps, an
            // immediate second claim found nothing about as often as every other claim in the
            // DAG bench, at a round trip and an index scan each.
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(cfg.poll_interval) => {}
                () = shutdown.cancelled() => break,
            }
        }
    }
    // Shutdown: let calls in flight finish within the grace period, then give the rest back.
    let grace = tokio::time::sleep(cfg.grace);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = calls.join_next() => if next.is_none() { break },
            () = &mut grace => {
                calls.abort_all();
                while calls.join_next().await.is_some() {}
                break;
            }
        }
    }
    let left: Vec<Claimed> = inflight
        .lock()
        .map(|mut f| f.drain().map(|(_, c)| c).collect())
        .unwrap_or_default();
    for c in left {
        shared.finish(released(c, &cfg.owner, "shutdown")).await;
    }
    invoker.shutdown().await;
}

/// A claimed step given back to the queue uncalled, with its attempt.
fn released(c: Claimed, owner: &str, reason: &str) -> StepResult {
    let mut change = Change::new(c.id, Status::Waiting, "released");
    change.attempts_delta = -1;
    change.lease = Some(c.lease_token);
    change.detail = serde_json::json!({ "worker": owner, "reason": reason });
    StepResult {
        change,
        object_id: c.object_id,
        workflow_id: c.workflow_id,
        object: None,
        context: None,
        start: Vec::new(),
    }
}

/// Commit results in batches: whatever has arrived while the last commit ran goes in the next.
async fn complete(store: Store, mut rx: mpsc::Receiver<Completion>, max: usize, actor: String) {
    let mut batch: Vec<StepResult> = Vec::with_capacity(max);
    while let Some(first) = rx.recv().await {
        batch.push(first.result);
        while batch.len() < max {
            match rx.try_recv() {
                Ok(c) => batch.push(c.result),
                Err(_) => break,
            }
        }
        let mut delay = Duration::from_millis(100);
        loop {
            let span = tracing::info_span!("commit", workdo.results = batch.len());
            let committed = {
                use tracing::Instrument;
                store.results_commit(&batch, &actor).instrument(span).await
            };
            match committed {
                Ok(applied) => {
                    if !applied.lost.is_empty() {
                        warn!(steps = ?applied.lost, "results dropped: their leases were lost");
                    }
                    break;
                }
                Err(e) => {
                    // The database is unreachable or refused: keep the results and try again.
                    // If leases expire meanwhile the steps run again; nothing is applied twice.
                    warn!(error = %e, n = batch.len(), "commit failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        batch.clear();
    }
}

/// Wake the worker of `template:step` when a NOTIFY says it has ready work.
async fn listen(store: Store, notifies: HashMap<String, Arc<Notify>>, stop: CancellationToken) {
    loop {
        let mut listener = match PgListener::connect_with(store.pool()).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "LISTEN connection failed; polling only until it returns");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        if let Err(e) = listener.listen(READY_CHANNEL).await {
            warn!(error = %e, "LISTEN failed");
            continue;
        }
        // Anything notified while we were not listening is picked up by one claim round.
        for n in notifies.values() {
            n.notify_one();
        }
        loop {
            tokio::select! {
                msg = listener.recv() => match msg {
                    Ok(m) => {
                        if let Some(n) = notifies.get(m.payload()) {
                            n.notify_one();
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "LISTEN connection lost; reconnecting");
                        break;
                    }
                },
                () = stop.cancelled() => return,
            }
        }
    }
}

/// Promote due steps often, sweep expired leases less often.
async fn maintain(store: Store, every: Duration, stop: CancellationToken) {
    let mut tick: u64 = 0;
    loop {
        if let Err(e) = store.steps_promote_due(1000).await {
            warn!(error = %e, "promoting due steps failed");
        }
        if crate::telemetry::enabled() && tick.is_multiple_of(25) {
            match store.queue_depths().await {
                Ok(rows) => {
                    if let Ok(mut q) = crate::telemetry::metrics().queues.lock() {
                        *q = rows
                            .into_iter()
                            .map(|(t, s, l, n, age)| ((t, s, l), (n as u64, age)))
                            .collect();
                    }
                }
                Err(e) => warn!(error = %e, "reading queue depths failed"),
            }
        }
        if tick.is_multiple_of(5) {
            match store.steps_sweep_leases(1000).await {
                Ok(0) => {}
                Ok(n) => info!(steps = n, "expired leases returned to the queue"),
                Err(e) => warn!(error = %e, "sweeping leases failed"),
            }
        }
        tick = tick.wrapping_add(1);
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Values of `KEY=VALUE` pairs, for `--env`.
pub fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    pairs
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{p:?}: expected KEY=VALUE"))
        })
        .collect()
}

/// Call the function for one claimed step and decide its result (nothing is written yet).
pub async fn execute(
    invoker: &Invoker,
    binding: &Binding,
    config: &Config,
    c: &Claimed,
    input: crate::store::StepInputs,
    timeout: Duration,
) -> StepResult {
    let event = Event {
        protocol: PROTOCOL.into(),
        step_id: c.id,
        workflow_id: c.workflow_id,
        object: c.object_id.clone(),
        template: c.template.clone(),
        step: c.name.clone(),
        version: c.version,
        lane: c.lane.clone(),
        attempt: c.attempts,
        max_attempts: c.max_attempts,
        properties: input.properties,
        documents: input.documents,
        context: input.context,
        traceparent: input.trace_context,
        deadline: (Utc::now() + chrono::Duration::from_std(timeout).unwrap_or_default())
            .to_rfc3339(),
    };
    let step_span = tracing::info_span!(
        "step",
        otel.name = %format!("step {}:{}", c.template, c.name),
        workdo.object_id = %c.object_id,
        workdo.template = %c.template,
        workdo.step = %c.name,
        workdo.attempt = c.attempts,
        workdo.lane = %c.lane,
        workdo.status = tracing::field::Empty,
    );
    if let Some(tp) = &event.traceparent {
        crate::telemetry::set_parent(&step_span, tp);
    }
    let invoke_span = tracing::info_span!(
        parent: &step_span,
        "invoke",
        otel.name = %format!("invoke {}", c.name),
        otel.kind = "client",
        workdo.object_id = %c.object_id,
        workdo.template = %c.template,
        workdo.step = %c.name,
        workdo.attempt = c.attempts,
        workdo.runner = invoker.kind(),
    );
    // The function continues the trace from its invocation.
    let mut event = event;
    if let Some(tp) = crate::telemetry::traceparent(&invoke_span) {
        event.traceparent = Some(tp);
    }
    let began = std::time::Instant::now();
    let outcome = {
        use tracing::Instrument;
        invoker
            .invoke(&event, timeout)
            .instrument(invoke_span.clone())
            .await
    };
    let metrics = crate::telemetry::metrics();
    let labels = [
        opentelemetry::KeyValue::new("template", c.template.clone()),
        opentelemetry::KeyValue::new("step", c.name.clone()),
    ];
    metrics
        .invocation
        .record(began.elapsed().as_secs_f64(), &labels);
    if let Ok(o) = &outcome {
        crate::telemetry::function_spans(&invoke_span, &o.spans);
    }
    drop(invoke_span);
    let unit: f64 = rand::random();
    let decision = decide(
        outcome.as_ref(),
        c.attempts,
        c.max_attempts,
        &binding.declared,
        &config.backoff,
        Utc::now(),
        unit,
    );
    step_span.record("workdo.status", decision.status.as_str());
    match &decision.status {
        Status::Completed => metrics.completed.add(1, &labels),
        Status::Error => metrics.failed.add(1, &labels),
        Status::Retrying => metrics.retried.add(1, &labels),
        _ => {}
    }
    let kind = match &decision.status {
        Status::Completed => "completed",
        Status::Skipped => "skipped",
        Status::Retrying => "failed_retrying",
        Status::Error => "failed",
        Status::Scheduled => "deferred",
        _ => "status_reported",
    };
    let mut change = Change::new(c.id, decision.status.clone(), kind);
    change.note = decision.note;
    change.error_message = decision.message;
    change.error_text = decision.text;
    change.lifecycle = decision.lifecycle;
    change.elapsed = decision.elapsed;
    change.run_at = decision.run_at;
    change.attempts_delta = decision.attempts_delta;
    change.lease = Some(c.lease_token);
    change.detail = serde_json::json!({ "worker": config.owner, "attempt": c.attempts });
    let (object, context, start) = match (decision.apply_effects, outcome) {
        (true, Ok(o)) => (o.object, o.context, o.start),
        _ => (None, None, Vec::new()),
    };
    StepResult {
        change,
        object_id: c.object_id.clone(),
        workflow_id: c.workflow_id,
        object,
        context,
        start,
    }
}

/// Fire due schedules; sleep until the next fire time (at most a second).
async fn fire_schedules(store: Store, stop: CancellationToken) {
    loop {
        match store.schedules_fire_due().await {
            Ok(fired) => {
                for f in fired {
                    info!(schedule = %f.schedule, started = f.started, "schedule fired");
                }
            }
            Err(e) => warn!(error = %e, "firing schedules failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Send alert mail every second, look for stuck steps every `stuck_every`, flush on shutdown.
async fn send_alerts(
    sender: crate::alerts::Sender,
    bound: Vec<String>,
    stuck_every: Duration,
    stop: CancellationToken,
) {
    let mut last_stuck = std::time::Instant::now();
    loop {
        if last_stuck.elapsed() >= stuck_every {
            last_stuck = std::time::Instant::now();
            if let Err(e) = sender.check_stuck(&bound).await {
                warn!(error = %e, "stuck-step check failed");
            }
        }
        if let Err(e) = sender.run_once(false).await {
            warn!(error = %e, "sending alerts failed");
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stop.cancelled() => break,
        }
    }
    // Do not leave mail behind: send what is pending, digests included (bounded wait).
    if let Err(e) = sender.flush(Duration::from_secs(30)).await {
        warn!(error = %e, "flushing alerts on shutdown failed");
    }
}

#[cfg(test)]
mod tests {
    use super::shard;

    #[test]
    fn an_objects_results_always_go_to_the_same_completer() {
        let objects: Vec<String> = (0..200).map(|i| format!("druid:bb{i:03}")).collect();
        let first: Vec<usize> = objects.iter().map(|o| shard(o, 4)).collect();
        let again: Vec<usize> = objects.iter().map(|o| shard(o, 4)).collect();
        assert_eq!(first, again);
        assert!(first.iter().all(|&i| i < 4));
        // Spread over every completer, so they share the work.
        for i in 0..4 {
            assert!(first.contains(&i), "no object went to completer {i}");
        }
        assert!(objects.iter().all(|o| shard(o, 1) == 0));
    }
}
