//! The thin runtime: workers that claim ready steps, call their functions and commit results,
//! and the services beside them. One service a file: [`worker`], [`completer`], [`listener`],
//! [`maintenance`], [`scheduler`], [`alerts`], [`machines`] (alarms and machine signals); [`run`] wires them and shuts them down;
//! [`inject`] runs chosen steps now (`workdo run`) through the same call and commit path.
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub mod alerts;
mod bindings;
mod completer;
mod execute;
pub mod function_cache;
mod functions;
pub mod handoff;
pub mod inject;
mod leases;
mod listener;
mod machines;
mod maintenance;
mod scheduler;
pub mod session;
mod worker;
mod workers;

use crate::model::outcome::InvokeError;
use crate::model::retry::Backoff;
use crate::store::{Store, StoreError};
use alerts::{AlertConfig, AlertError};
use worker::Shared;

/// How the runtime behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// Names this process in leases and events.
    pub owner: String,
    /// Longest a worker sleeps without a notification before claiming again.
    pub poll_interval: Duration,
    /// A lease lasts the function's timeout plus this, or [`Config::lease`] when shorter.
    pub lease_margin: Duration,
    /// Longest a claim lasts without being renewed: the runtime renews the leases of the steps
    /// it runs every third of this, so a runtime that dies gives its steps back within it.
    pub lease: Duration,
    /// On shutdown, how long calls in flight may take to finish.
    pub grace: Duration,
    pub backoff: Backoff,
    /// Environment for every exec and warm function (`--env`).
    pub env: BTreeMap<String, String>,
    /// Variables of this process's environment passed on to exec and warm functions besides
    /// [`PASSED_ENV`] (`--pass-env`).
    pub pass_env: Vec<String>,
    /// Claim size for steps with no `batch-limit`.
    pub default_batch: u32,
    /// How often due steps are promoted and leases swept (the hot tables' dead rows are looked
    /// at every fifth time).
    pub maintenance_interval: Duration,
    /// A hot table is vacuumed when its dead rows pass this share of its live rows and this
    /// many ([`vacuum_hot_tables`]); by default [`VACUUM_DEAD`].
    pub vacuum_dead: (f64, i64),
    /// Most results committed in one transaction.
    pub commit_batch: usize,
    /// `--commit-within`: commits sized to take about this long (at most `commit_batch`
    /// results), which bounds a dependant's wait under load at a cost in throughput.
    pub commit_within: Option<Duration>,
    /// Completers committing results in parallel, each on its own connection (results are
    /// sharded by object, so they never wait for each other's row locks).
    pub completers: usize,
    /// Alert mail; `None` leaves alerts in the outbox.
    pub alerts: Option<AlertConfig>,
    /// Fire cron schedules.
    pub schedules: bool,
    /// How often the stuck-step monitor looks.
    pub stuck_check_interval: Duration,
    /// Push the steps no workdo function runs to Sidekiq robots (`--sidekiq-redis`).
    pub handoff: Option<handoff::HandoffConfig>,
    /// Which steps this process follows as templates change: `None` every step with a function
    /// (`workdo up`); `Some(steps)` only those (`workdo worker TEMPLATE:STEP…`). A caller of
    /// [`run`] that passes it a subset of [`bindings`] gives the same list here.
    pub only: Option<Vec<String>>,
    /// `workdo worker --queue NAME`: its step's worker claims only what the queue lists.
    pub queue: Option<crate::store::NamedQueue>,
    /// Where deployed functions are fetched to (`--function-cache`); `None`:
    /// [`function_cache::default_dir`].
    pub function_cache: Option<std::path::PathBuf>,
    /// The cache's size past which unpinned functions are removed.
    pub function_cache_limit: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            owner: default_owner(),
            poll_interval: Duration::from_secs(1),
            lease_margin: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            grace: Duration::from_secs(30),
            backoff: Backoff::default(),
            env: BTreeMap::new(),
            pass_env: Vec::new(),
            default_batch: 100,
            maintenance_interval: Duration::from_millis(200),
            vacuum_dead: VACUUM_DEAD,
            commit_batch: 500,
            commit_within: None,
            completers: 2,
            alerts: None,
            schedules: true,
            stuck_check_interval: Duration::from_secs(30),
            handoff: None,
            only: None,
            queue: None,
            function_cache: None,
            function_cache_limit: function_cache::DEFAULT_LIMIT_BYTES,
        }
    }
}

pub use bindings::{Binding, StepKind, bindings};
pub use maintenance::{VACUUM_DEAD, fold_step_counts, vacuum_hot_tables};

/// The variables of the runtime's own environment every exec and warm function gets, when set.
/// Nothing else of it is passed on — not `DATABASE_URL`, `PGPASSWORD` or `WORKDO_SMTP_URL` —
/// unless an operator names it with `--pass-env`.
pub const PASSED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

impl Config {
    /// A function's environment before its step's own `env`: [`PASSED_ENV`] and the `--pass-env`
    /// names as this process has them, then `--env`.
    pub fn function_env(&self) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = PASSED_ENV
            .iter()
            .copied()
            .chain(self.pass_env.iter().map(String::as_str))
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        env.extend(self.env.clone());
        env
    }
}

/// `host:pid:random`: the random part keeps two processes with the same host name and pid
/// (containers sharing a host name, each its pid 1) from taking each other for themselves when
/// one gives back the steps leased to it that it does not hold.
pub fn default_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &nonce[..8])
}

/// `bindings` with the named queue's step bound to it (`workdo worker --queue NAME`).
pub fn with_queue(
    mut bindings: Vec<Binding>,
    queue: Option<&crate::store::NamedQueue>,
) -> Vec<Binding> {
    if let Some(q) = queue {
        for b in &mut bindings {
            if b.template == q.template && b.step == q.step {
                b.named = Some(q.clone());
            }
        }
    }
    bindings
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0} has no function to run (a human or skip-queue step)")]
    NotBound(String),
    #[error("{0}: {1}")]
    Function(String, InvokeError),
    #[error(transparent)]
    Alerts(#[from] AlertError),
}

/// The deployed functions' cache this runtime uses: `--function-cache`, or the default folder
/// (made on first use).
fn open_function_cache(config: &Config) -> function_cache::FunctionCache {
    let dir = config
        .function_cache
        .clone()
        .unwrap_or_else(function_cache::default_dir);
    function_cache::FunctionCache::new(dir, config.function_cache_limit)
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
    hide_environment();
    let held: Arc<leases::Held> = Arc::default();
    let (results, completers) = completer::start(
        &store,
        config.completers,
        completer::Sizer::new(config.commit_batch, config.commit_within),
        &config.owner,
        &held,
        &shutdown,
    );
    let notifies: listener::Notifies = Arc::default();
    let background = CancellationToken::new();
    let (signals, alarms) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let templates_changed = Arc::new(Notify::new());
    let listener = tokio::spawn(listener::listen(
        store.clone(),
        notifies.clone(),
        [Arc::clone(&signals), Arc::clone(&alarms)],
        Arc::clone(&templates_changed),
        Arc::clone(&held),
        background.clone(),
    ));
    let leases = tokio::spawn(leases::keep(
        store.clone(),
        Arc::clone(&held),
        config.owner.clone(),
        config.lease,
        background.clone(),
    ));
    let machines = tokio::spawn(machines::run(
        store.clone(),
        signals,
        alarms,
        config.poll_interval,
        background.clone(),
    ));
    let session = tokio::spawn(session::watch(store.clone(), background.clone()));
    let cache = Arc::new(open_function_cache(&config));
    let maintenance = tokio::spawn(maintenance::maintain(
        store.clone(),
        config.maintenance_interval,
        Arc::clone(&cache),
        background.clone(),
    ));
    let vacuums = tokio::spawn(maintenance::vacuum_hot_tables(
        store.clone(),
        config.maintenance_interval * 5,
        config.vacuum_dead,
        background.clone(),
    ));
    let scheduler = config
        .schedules
        .then(|| tokio::spawn(scheduler::fire_schedules(store.clone(), background.clone())));
    // The hand-off: every step of a step template that no workdo function runs (robots' steps),
    // except those the template keeps out of queues, is pushed when it becomes ready.
    let handoff = match &config.handoff {
        Some(h) => {
            // A process that pushes is a hand-off in use: the workflow service's routes of
            // every process on this database now call its ready steps `queued`.
            if store
                .handoff_set(Some("sidekiq"), &format!("runtime:{}", config.owner))
                .await?
            {
                info!("hand-off enabled in the database (workdo handoff disable turns it off)");
            }
            let steps = handoff::handoff_steps(&store).await?;
            let waiting = store.handoff_steps_set(&steps).await?;
            info!(steps = steps.len(), ready_now = waiting, redis = %crate::store::db::redact(&h.redis_url),
                  "handing off to Sidekiq");
            Some(tokio::spawn(handoff::run(
                store.clone(),
                h.clone(),
                Duration::from_millis(100),
                background.clone(),
            )))
        }
        None => None,
    };
    let alerts = match &config.alerts {
        Some(a) => {
            let sender = alerts::Sender::new(store.clone(), a.clone())?;
            let bound: Vec<String> = bindings.iter().map(Binding::key).collect();
            Some(tokio::spawn(alerts::serve(
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
        results,
        held,
        cache,
    });
    // The workers follow the templates: started now for `bindings`, and again whenever a
    // template's current version changes (NOTIFY, or the poll when a notification is lost).
    let mut set = workers::WorkerSet::new(Arc::clone(&shared), notifies, shutdown.clone());
    set.reconcile(bindings);
    info!(workers = set.len(), owner = %shared.config.owner, "runtime started");
    let only = shared.config.only.clone().unwrap_or_default();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = templates_changed.notified() => {}
            () = tokio::time::sleep(TEMPLATE_POLL) => {}
            Some(()) = set.join_next(), if !set.is_empty() => continue,
        }
        // A read through a shared session (a transaction pooler switched on under this
        // process) may be another client's rows: while the session is lost, or if the read
        // lost it (an error, or a panic in the driver on a row of the wrong shape, which the
        // task keeps from this loop), no worker changes.
        let read = tokio::spawn({
            let (store, only) = (shared.store.clone(), only.clone());
            async move { self::bindings(&store, &only).await }
        })
        .await;
        match read {
            _ if crate::store::session::is_lost() => {
                warn!("the database session is shared; workers unchanged")
            }
            Ok(Ok(b)) => set.reconcile(with_queue(b, shared.config.queue.as_ref())),
            Ok(Err(e)) => warn!(error = %e, "reading templates failed; workers unchanged"),
            Err(e) => {
                // A panic in the driver on a row of the wrong shape: the session is checked
                // now, not taken as lost (a panic of another cause would stop claims each time).
                if let Ok(Some(_)) = shared.store.session_shared().await {
                    crate::store::session::mark_lost();
                }
                warn!(error = %e, "reading templates failed; workers unchanged");
            }
        }
        if shared.config.handoff.is_some() {
            match handoff::handoff_steps(&shared.store).await {
                Ok(steps) => {
                    if let Err(e) = shared.store.handoff_steps_set(&steps).await {
                        warn!(error = %e, "updating the handed-off steps failed");
                    }
                }
                Err(e) => warn!(error = %e, "reading templates failed"),
            }
        }
    }
    // With no steps to work on, this process still promoted, swept, fired schedules and sent
    // alerts until it was told to stop.
    set.wait_all().await;
    drop(shared); // closes the completers' channels once every worker is done
    for c in completers {
        let _ = c.await;
    }
    background.cancel();
    let _ = listener.await;
    let _ = machines.await;
    let _ = maintenance.await;
    let _ = vacuums.await;
    let _ = session.await;
    let _ = leases.await;
    if let Some(s) = scheduler {
        let _ = s.await;
    }
    if let Some(a) = alerts {
        let _ = a.await;
    }
    if let Some(h) = handoff {
        let _ = h.await;
    }
    info!("runtime stopped");
    Ok(())
}

/// Functions run as this process's user could read its environment — its secrets — from
/// `/proc/PID/environ`; a process that is not dumpable has its `/proc` files owned by root.
/// (A function running as root reads them anyway: run workdo, or its functions, as another
/// user.)
fn hide_environment() {
    // SAFETY: prctl(PR_SET_DUMPABLE) changes a flag of this process; it touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// How often a runtime looks for changed templates when no notification came.
const TEMPLATE_POLL: Duration = Duration::from_secs(5);

/// Values of `KEY=VALUE` pairs, for `--env`.
///
/// # Errors
/// A pair without `=`, named.
pub fn parse_env(pairs: &[String]) -> Result<BTreeMap<String, String>, EnvError> {
    pairs
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| EnvError(p.clone()))
        })
        .collect()
}

/// An `--env` value that is not `KEY=VALUE`.
#[derive(Debug, thiserror::Error)]
#[error("--env {0:?}: expected KEY=VALUE")]
pub struct EnvError(pub String);
