//! The `workdo` command. Every command writes to a `Write` so tests can read its output, and
//! every read command takes `--json` for scripts.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use serde_json::Value;

use tokio_util::sync::CancellationToken;

use crate::store::Role;
use crate::store::{SetRequest, StartRequest, StepFilter, Store};
use crate::template;
use crate::{api, db, demo, worker};

/// A Postgres-native workflow runtime for object-centric work.
#[derive(Debug, Parser)]
#[command(name = "workdo", version, about)]
pub struct Cli {
    /// Postgres to use. Without it, a private cluster is started under --data-dir.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where the private cluster lives when no database URL is given.
    #[arg(
        long,
        env = "WORKDO_DATA_DIR",
        global = true,
        default_value = ".workdo"
    )]
    pub data_dir: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations (every command also does this first).
    Migrate,
    /// Load, list and show workflow templates.
    #[command(subcommand)]
    Templates(TemplatesCmd),
    /// Register and inspect objects.
    #[command(subcommand)]
    Objects(ObjectsCmd),
    /// Start a template on objects.
    Start(StartArgs),
    /// Objects waiting at TEMPLATE:STEP whose --completed steps are done (a WorkDo queue).
    Queue(QueueArgs),
    /// Facets: template × step × status counts.
    Status {
        /// Only this template.
        #[arg(long)]
        template: Option<String>,
    },
    /// An object's workflows, steps, milestones and last events.
    Show {
        object: String,
        /// How many recent events to show.
        #[arg(long, default_value_t = 20)]
        events: i64,
    },
    /// Change a step by hand.
    #[command(subcommand)]
    Step(StepCmd),
    /// Set the priority of unfinished steps (higher runs first).
    Prioritize {
        priority: i32,
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Put steps in error back in the queue, attempts reset.
    Retry(FilterArgs),
    /// Skip unfinished steps.
    Skip(FilterArgs),
    /// Why a step is not running.
    Why {
        object: String,
        template: String,
        step: String,
    },
    /// The private cluster: its URL, or stop it.
    #[command(subcommand)]
    Db(DbCmd),
    /// Run the runtime: workers for every step bound to a function, plus maintenance.
    Up(UpArgs),
    /// Serve the HTTP API only (no workers).
    Serve(ApiArgs),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Tokens(TokensCmd),
    /// Task injection: run TEMPLATE:STEP for these objects now, ahead of the queue.
    Run {
        /// TEMPLATE:STEP
        step: String,
        #[arg(long = "object", required = true)]
        objects: Vec<String>,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// Measure throughput and latency next to a plain SQL queue, on this server (see BENCHMARKS.md).
    Bench {
        /// Runs per figure; the table shows the median with min and max.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Small sizes (seconds), with the same correctness checks.
        #[arg(long)]
        quick: bool,
        /// Only these scenarios (repeatable): queue (yardstick and claim+complete), dag, start,
        /// wake, scale, calls. Default: all.
        #[arg(long, value_enum)]
        only: Vec<crate::bench::Scenario>,
        /// The workdo executable used as the warm/exec no-op function (default: this one).
        #[arg(long, hide = true)]
        noop_function: Option<PathBuf>,
    },
    /// Cron schedules that start workflows.
    #[command(subcommand)]
    Schedules(SchedulesCmd),
    /// Run workers for just these steps (TEMPLATE:STEP), e.g. to spread robots over machines.
    Worker {
        #[arg(required = true)]
        steps: Vec<String>,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
}

#[derive(Debug, Args, Clone)]
pub struct ApiArgs {
    /// Address the HTTP API listens on [default: 127.0.0.1:7070; `up --demo` serves no API
    /// unless this is given].
    #[arg(long, env = "WORKDO_LISTEN")]
    pub listen: Option<std::net::SocketAddr>,
    /// Serve without tokens (everyone is admin); refused unless --listen is a loopback address.
    #[arg(long)]
    pub open: bool,
}

impl ApiArgs {
    pub fn address(&self) -> std::net::SocketAddr {
        self.listen
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 7070)))
    }

    pub fn access(&self) -> api::Access {
        if self.open {
            api::Access::Open
        } else {
            api::Access::Tokens
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum SchedulesCmd {
    /// Load schedules files (`schedules: [...]`); entries are matched by name.
    Load {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Every schedule with its next fire time.
    List,
}

#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// Create a token and print it (it is shown only this once).
    Create {
        /// admin, robot or viewer.
        #[arg(long)]
        role: String,
        /// Valid for this long (e.g. 30d, 12h); without it, until revoked.
        #[arg(long, value_parser = duration)]
        expires: Option<std::time::Duration>,
        /// A label, e.g. who or what uses it.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Every token (never the secrets).
    List,
    /// Revoke a token by id.
    Revoke { id: i64 },
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// Run without the HTTP API.
    #[arg(long)]
    pub no_api: bool,
    /// Register N sample books, run them all with the demo functions, summarise, and exit.
    #[arg(long, value_name = "N")]
    pub demo: Option<u32>,
    /// Templates the demo loads.
    #[arg(long, default_value = "workflows")]
    pub templates: PathBuf,
    /// Folder the demo functions work in (default: DATA_DIR/demo-workspace).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

#[derive(Debug, Args, Clone)]
pub struct RuntimeArgs {
    /// Longest a worker waits without a notification before looking for work.
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub poll_interval: std::time::Duration,
    /// A lease lasts the function's timeout plus this.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub lease_margin: std::time::Duration,
    /// On SIGTERM, how long calls in flight may take to finish before their steps are released.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub grace: std::time::Duration,
    /// Back-off before the first retry; doubles each attempt (default 1s, 100ms with --demo).
    #[arg(long, value_parser = duration)]
    pub retry_base: Option<std::time::Duration>,
    /// Longest back-off.
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub retry_max: std::time::Duration,
    /// Environment for every exec and warm function (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Database connections this process may use.
    #[arg(long, default_value_t = 16)]
    pub max_connections: u32,
    /// Transactions committing results in parallel (each holds a connection while it commits).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub completers: u32,
    /// Most results one transaction commits: larger batches give more throughput under load,
    /// smaller ones a shorter wait from a step's result to its dependants' wake-up.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub commit_batch: u32,
    /// A file of KEY=VALUE lines (WORKDO_SMTP_URL, WORKDO_ALERT_FROM, WORKDO_ALERT_TO,
    /// WORKDO_ALERT_INTERVAL, WORKDO_STUCK_STARTED, WORKDO_STUCK_READY, WORKDO_API_URL);
    /// the environment overrides it.
    #[arg(long, env = "WORKDO_CONFIG")]
    pub config: Option<PathBuf>,
    /// Do not fire cron schedules in this process.
    #[arg(long)]
    pub no_schedules: bool,
}

fn duration(text: &str) -> Result<std::time::Duration, String> {
    template::parse_duration_secs(text)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a duration such as 500ms, 30s or 5m"))
}

#[derive(Debug, Subcommand)]
pub enum TemplatesCmd {
    /// Load template files, or every .yaml/.yml/.xml file in folders.
    Load {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Current version of every template.
    List,
    /// One template's steps.
    Show { name: String },
}

#[derive(Debug, Subcommand)]
pub enum ObjectsCmd {
    /// Register an object, or update its properties and documents.
    Add {
        id: String,
        /// A property, `key=value`; the value is JSON when it parses as JSON, else a string.
        #[arg(long = "property", value_name = "KEY=VALUE")]
        properties: Vec<String>,
        /// A document read from a file, `name=path`.
        #[arg(long = "document", value_name = "NAME=FILE")]
        documents: Vec<String>,
    },
    /// Show an object (same as `workdo show`).
    Show { id: String },
}

#[derive(Debug, Args)]
pub struct StartArgs {
    pub template: String,
    #[arg(required = true)]
    pub objects: Vec<String>,
    /// Object version (default: the object's current version).
    #[arg(long)]
    pub version: Option<i32>,
    /// Not before this time (RFC 3339, e.g. 2027-01-01T00:00:00Z).
    #[arg(long)]
    pub start_at: Option<DateTime<Utc>>,
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i32,
    #[arg(long, default_value = "default")]
    pub lane: String,
    /// Workflow context, a JSON object.
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    /// TEMPLATE:STEP
    pub step: String,
    /// TEMPLATE:STEP that must be completed (repeatable).
    #[arg(long)]
    pub completed: Vec<String>,
    #[arg(long)]
    pub lane: Option<String>,
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    /// List the objects whose step is in error instead.
    #[arg(long)]
    pub errors: bool,
}

#[derive(Debug, Subcommand)]
pub enum StepCmd {
    /// Set a step's status (the WorkDo update call).
    Set {
        object: String,
        template: String,
        step: String,
        status: String,
        #[arg(long)]
        note: Option<String>,
        /// Error message (short, for reports and mail).
        #[arg(long)]
        message: Option<String>,
        /// Error text (long, e.g. a stack trace).
        #[arg(long)]
        text: Option<String>,
        /// Record this lifecycle milestone when completing.
        #[arg(long)]
        lifecycle: Option<String>,
        /// Seconds the work took.
        #[arg(long)]
        elapsed: Option<f64>,
        /// Change only if the step is in this status.
        #[arg(long)]
        current_status: Option<String>,
        /// Object version (default: the active one).
        #[arg(long)]
        version: Option<i32>,
    },
}

#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    #[arg(long)]
    pub object: Option<String>,
    #[arg(long)]
    pub template: Option<String>,
    #[arg(long)]
    pub step: Option<String>,
    /// Only objects whose property KEY equals VALUE (JSON or string).
    #[arg(long, value_name = "KEY=VALUE")]
    pub property: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DbCmd {
    /// Print the database URL in use.
    Url,
    /// Stop the private cluster.
    Stop,
}

/// Run a parsed command, writing its output to `out`.
///
/// # Errors
/// Anything the command reports: bad input, a missing database, a failed statement.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<()> {
    if let Command::Db(DbCmd::Stop) = &cli.command {
        if cli.database_url.is_some() {
            bail!("DATABASE_URL is set: there is no private cluster to stop");
        }
        // Stopping must not start anything first.
        if cli.data_dir.join("pgdata").exists() {
            crate::pg::Cluster::open(&cli.data_dir)?.stop()?;
        }
        writeln!(out, "stopped the cluster in {}", cli.data_dir.display())?;
        return Ok(());
    }
    let target = db::resolve(cli.database_url.as_deref(), &cli.data_dir).await?;
    if let Command::Bench {
        runs,
        quick,
        only,
        noop_function,
    } = &cli.command
    {
        let opts = crate::bench::Options {
            runs: *runs,
            quick: *quick,
            only: only.clone(),
            noop_function: noop_function.clone(),
        };
        crate::bench::run(&target.url, &opts, cli.json, out).await?;
        return Ok(());
    }
    if let Command::Db(DbCmd::Url) = &cli.command {
        writeln!(out, "{}", target.url)?;
        return Ok(());
    }
    let connections = match &cli.command {
        Command::Up(a) => a.runtime.max_connections,
        Command::Worker { runtime, .. } => runtime.max_connections,
        _ => 4,
    };
    let pool = db::connect(&target.url, connections).await?;
    db::migrate(&pool).await?;
    let store = Store::new(pool);
    let json = cli.json;
    match cli.command {
        Command::Migrate => writeln!(out, "migrations applied")?,
        Command::Templates(cmd) => templates(&store, cmd, json, out).await?,
        Command::Objects(ObjectsCmd::Add {
            id,
            properties,
            documents,
        }) => {
            let props = parse_properties(&properties)?;
            let mut docs = BTreeMap::new();
            for d in &documents {
                let (name, path) = d
                    .split_once('=')
                    .with_context(|| format!("--document {d:?}: expected NAME=FILE"))?;
                let content = std::fs::read_to_string(path)
                    .with_context(|| format!("--document {name}: cannot read {path}"))?;
                docs.insert(name.to_string(), content);
            }
            let created = store.object_put(&id, &props, &docs, &actor()).await?;
            emit(
                out,
                json,
                &serde_json::json!({"id": id, "created": created}),
                |o| writeln!(o, "{} {id}", if created { "registered" } else { "updated" }),
            )?;
        }
        Command::Objects(ObjectsCmd::Show { id }) => show(&store, &id, 20, json, out).await?,
        Command::Show { object, events } => show(&store, &object, events, json, out).await?,
        Command::Start(args) => {
            let context = match &args.context {
                None => Value::Object(Default::default()),
                Some(text) => serde_json::from_str(text)
                    .with_context(|| format!("--context is not valid JSON: {text}"))?,
            };
            let req = StartRequest {
                template: args.template,
                objects: args.objects,
                version: args.version,
                priority: args.priority,
                lane: args.lane,
                start_at: args.start_at,
                context,
                actor: actor(),
            };
            let started = store.workflow_start(&req).await?;
            emit(out, json, &started, |o| {
                for s in &started {
                    writeln!(
                        o,
                        "{} {} on {} (version {}, workflow {}){}",
                        if s.replaced { "restarted" } else { "started" },
                        s.template,
                        s.object_id,
                        s.version,
                        s.workflow_id,
                        if s.ready.is_empty() {
                            String::new()
                        } else {
                            format!("; ready: {}", s.ready.join(", "))
                        }
                    )?;
                }
                Ok(())
            })?;
        }
        Command::Queue(args) => {
            let (t, s) = split_step(&args.step)?;
            if args.errors {
                let rows = store.queue_errors(t, s, args.limit).await?;
                emit(out, json, &rows, |o| {
                    table(
                        o,
                        &["object", "attempts", "message"],
                        rows.iter().map(|r| {
                            vec![
                                r.object_id.clone(),
                                format!("{}/{}", r.attempts, r.max_attempts),
                                r.error_message.clone().unwrap_or_default(),
                            ]
                        }),
                    )
                })?;
            } else {
                let completed = args
                    .completed
                    .iter()
                    .map(|c| split_step(c).map(|(a, b)| (a.to_string(), b.to_string())))
                    .collect::<Result<Vec<_>>>()?;
                store.steps_promote_due(10_000).await?;
                let rows = store
                    .queue_waiting(t, s, &completed, args.lane.as_deref(), args.limit)
                    .await?;
                emit(out, json, &rows, |o| {
                    table(
                        o,
                        &["object", "version", "lane", "status", "priority", "since"],
                        rows.iter().map(|r| {
                            vec![
                                r.object_id.clone(),
                                r.version.to_string(),
                                r.lane.clone(),
                                r.status.clone(),
                                r.priority.to_string(),
                                r.run_at.format("%Y-%m-%d %H:%M:%S").to_string(),
                            ]
                        }),
                    )
                })?;
            }
        }
        Command::Status { template } => {
            let facets = store.facets(template.as_deref()).await?;
            emit(out, json, &facets, |o| status_table(o, &facets))?;
        }
        Command::Step(StepCmd::Set {
            object,
            template,
            step,
            status,
            note,
            message,
            text,
            lifecycle,
            elapsed,
            current_status,
            version,
        }) => {
            let req = SetRequest {
                object,
                template,
                step,
                status,
                note,
                error_message: message,
                error_text: text,
                lifecycle,
                elapsed,
                current_status,
                version,
                actor: actor(),
            };
            let outcome = store.step_set(&req).await?;
            emit(out, json, &outcome, |o| {
                writeln!(
                    o,
                    "{}:{} on {} is {}{}",
                    req.template,
                    req.step,
                    req.object,
                    outcome.step.status,
                    if outcome.next_steps.is_empty() {
                        String::new()
                    } else {
                        format!("; now ready: {}", outcome.next_steps.join(", "))
                    }
                )
            })?;
        }
        Command::Prioritize { priority, filter } => {
            let f = step_filter(&filter)?;
            let n = store.steps_prioritize(&f, priority, &actor()).await?;
            emit(
                out,
                json,
                &serde_json::json!({"steps": n, "priority": priority}),
                |o| writeln!(o, "priority {priority} set on {n} steps"),
            )?;
        }
        Command::Retry(filter) => {
            let n = store.steps_retry(&step_filter(&filter)?, &actor()).await?;
            emit(out, json, &serde_json::json!({"steps": n}), |o| {
                writeln!(o, "{n} steps put back in the queue")
            })?;
        }
        Command::Skip(filter) => {
            let f = step_filter(&filter)?;
            if f.object.is_none()
                && f.template.is_none()
                && f.step.is_none()
                && f.property.is_none()
            {
                bail!("skip needs at least one of --object, --template, --step or --property");
            }
            let n = store.steps_skip(&f, &actor()).await?;
            emit(out, json, &serde_json::json!({"steps": n}), |o| {
                writeln!(o, "{n} steps skipped")
            })?;
        }
        Command::Why {
            object,
            template,
            step,
        } => {
            let why = store.why(&object, &template, &step).await?;
            emit(out, json, &why, |o| {
                writeln!(
                    o,
                    "{}:{} on {} (version {}) is {}",
                    why.step.template,
                    why.step.name,
                    why.step.object_id,
                    why.step.version,
                    why.step.status
                )?;
                for r in &why.reasons {
                    writeln!(o, "  - {r}")?;
                }
                Ok(())
            })?;
        }
        Command::Db(_) | Command::Bench { .. } => {}
        Command::Up(args) => up(&store, args, &cli.data_dir, out).await?,
        Command::Serve(args) => {
            api::serve(store, args.address(), args.access(), shutdown_on_signal()?).await?;
        }
        Command::Tokens(cmd) => tokens(&store, cmd, json, out).await?,
        Command::Run {
            step,
            objects,
            runtime,
        } => run_now(&store, &step, &objects, &runtime, json, out).await?,
        Command::Schedules(SchedulesCmd::Load { files }) => {
            let mut n = 0;
            for f in &files {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read {}", f.display()))?;
                let origin = f.display().to_string();
                let specs = crate::schedules::parse_file(&origin, &text)?;
                n += store.schedules_put(&specs, &origin).await?;
            }
            emit(out, json, &serde_json::json!({"schedules": n}), |o| {
                writeln!(o, "{n} schedules loaded")
            })?;
        }
        Command::Schedules(SchedulesCmd::List) => {
            let rows = store.schedules_list().await?;
            emit(out, json, &rows, |o| {
                table(
                    o,
                    &[
                        "schedule",
                        "cron",
                        "time zone",
                        "starts",
                        "next fire (UTC)",
                        "last fired",
                    ],
                    rows.iter().map(|r| {
                        vec![
                            r.name.clone(),
                            r.cron.clone(),
                            r.timezone.clone(),
                            r.template.clone(),
                            if r.enabled {
                                r.next_fire_at.format("%Y-%m-%d %H:%M:%S").to_string()
                            } else {
                                "never".into()
                            },
                            r.last_fired_at
                                .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                                .unwrap_or_else(|| "-".into()),
                        ]
                    }),
                )
            })?;
        }
        Command::Worker { steps, runtime } => {
            let bindings = worker::bindings(&store, &steps).await?;
            let config = runtime_config(&runtime, false)?;
            run_until_signal(store, config, bindings).await?;
        }
    }
    Ok(())
}

fn runtime_config(args: &RuntimeArgs, demo: bool) -> Result<worker::Config> {
    let mut config = worker::Config {
        poll_interval: args.poll_interval,
        lease_margin: args.lease_margin,
        grace: args.grace,
        env: worker::parse_env(&args.env).map_err(anyhow::Error::msg)?,
        completers: args.completers as usize,
        commit_batch: args.commit_batch as usize,
        ..Default::default()
    };
    config.backoff.base = args.retry_base.unwrap_or(if demo {
        std::time::Duration::from_millis(100)
    } else {
        std::time::Duration::from_secs(1)
    });
    config.backoff.max = args.retry_max;
    config.alerts = crate::alerts::AlertConfig::load(args.config.as_deref())?;
    config.schedules = !args.no_schedules;
    Ok(config)
}

/// Cancelled on SIGTERM or Ctrl-C.
fn shutdown_on_signal() -> Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let t = token.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutting down: no new claims; calls in flight may finish");
        t.cancel();
    });
    Ok(token)
}

async fn run_until_signal(
    store: Store,
    config: worker::Config,
    bindings: Vec<worker::Binding>,
) -> Result<()> {
    if bindings.is_empty() {
        eprintln!(
            "workdo: no step of the loaded templates has a function; running maintenance only"
        );
    }
    let token = shutdown_on_signal()?;
    worker::run(store, config, bindings, token).await?;
    Ok(())
}

/// The API in the background, stopped by `token`.
async fn spawn_api(
    store: &Store,
    args: &UpArgs,
    token: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<Result<(), api::ServeError>>>> {
    if args.no_api || (args.demo.is_some() && args.api.listen.is_none()) {
        return Ok(None);
    }
    let (listen, access) = (args.api.address(), args.api.access());
    if access == api::Access::Open && !listen.ip().is_loopback() {
        return Err(api::ServeError::OpenNotLoopback(listen).into());
    }
    // Bind now so that a taken port is an error before any work starts.
    let probe =
        std::net::TcpListener::bind(listen).map_err(|e| api::ServeError::Bind(listen, e))?;
    drop(probe);
    Ok(Some(tokio::spawn(api::serve(
        store.clone(),
        listen,
        access,
        token.clone(),
    ))))
}

async fn up(
    store: &Store,
    args: UpArgs,
    data_dir: &std::path::Path,
    out: &mut impl Write,
) -> Result<()> {
    let Some(n) = args.demo else {
        let bindings = worker::bindings(store, &[]).await?;
        let config = runtime_config(&args.runtime, false)?;
        let token = shutdown_on_signal()?;
        let server = spawn_api(store, &args, &token).await?;
        if bindings.is_empty() {
            eprintln!(
                "workdo: no step of the loaded templates has a function; running maintenance only"
            );
        }
        worker::run(store.clone(), config, bindings, token).await?;
        if let Some(s) = server {
            s.await??;
        }
        return Ok(());
    };
    let mut config = runtime_config(&args.runtime, true)?;
    let workspace = args
        .workspace
        .clone()
        .unwrap_or_else(|| data_dir.join("demo-workspace"));
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("cannot create the demo workspace {}", workspace.display()))?;
    let workspace = workspace.canonicalize()?;
    config
        .env
        .entry("WORKDO_WORKSPACE".into())
        .or_insert_with(|| workspace.display().to_string());
    // The demo templates, loaded as `templates load` would.
    let files = template::find_files(&args.templates)
        .with_context(|| format!("cannot read {}", args.templates.display()))?;
    for f in files {
        let loaded = template::parse_file(&f)?;
        store.template_save(&loaded).await?;
    }
    let bindings = worker::bindings(store, &[]).await?;
    let run: u32 = rand::random::<u32>() % 1_000_000;
    let started = std::time::Instant::now();
    demo::seed(store, run, n).await?;
    writeln!(
        out,
        "demo run {run}: {n} books, workspace {}",
        workspace.display()
    )?;
    let token = CancellationToken::new();
    let server = spawn_api(store, &args, &token).await?;
    let runtime = tokio::spawn(worker::run(store.clone(), config, bindings, token.clone()));
    let signals = shutdown_on_signal()?;
    let draw = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tokio::select! {
        watched = demo::watch(store, run, draw) => watched?,
        () = signals.cancelled() => {}
    }
    token.cancel();
    runtime.await??;
    if let Some(s) = server {
        s.await??;
    }
    demo::summary(store, run, started, out).await?;
    Ok(())
}

async fn templates(
    store: &Store,
    cmd: TemplatesCmd,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    match cmd {
        TemplatesCmd::Load { paths } => {
            // Parse everything first: one bad file loads nothing, and every problem is reported.
            let mut loaded = Vec::new();
            let mut problems = Vec::new();
            for path in &paths {
                let files = template::find_files(path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                if files.is_empty() {
                    problems.push(format!("{}: no .yaml, .yml or .xml files", path.display()));
                }
                for f in files {
                    match template::parse_file(&f) {
                        Ok(l) => loaded.push(l),
                        Err(e) => problems.push(e.to_string()),
                    }
                }
            }
            if !problems.is_empty() {
                bail!("nothing loaded:\n{}", problems.join("\n"));
            }
            let mut report = Vec::new();
            for l in &loaded {
                let (id, created) = store.template_save(l).await?;
                report.push(serde_json::json!({
                    "name": l.template.name, "sha256": l.sha256, "id": id, "new": created,
                    "steps": l.template.steps.len(), "origin": l.origin,
                }));
            }
            emit(out, json, &report, |o| {
                for (l, r) in loaded.iter().zip(&report) {
                    writeln!(
                        o,
                        "{} {} ({} steps, sha256 {}) from {}",
                        if r["new"] == Value::Bool(true) {
                            "loaded"
                        } else {
                            "unchanged"
                        },
                        l.template.name,
                        l.template.steps.len(),
                        &l.sha256[..12],
                        l.origin
                    )?;
                }
                Ok(())
            })?;
        }
        TemplatesCmd::List => {
            let rows = store.template_list().await?;
            emit(out, json, &rows, |o| {
                table(
                    o,
                    &["template", "steps", "versions", "sha256", "loaded"],
                    rows.iter().map(|r| {
                        vec![
                            r.name.clone(),
                            r.spec.steps.len().to_string(),
                            r.versions.to_string(),
                            r.sha256[..12].to_string(),
                            r.loaded_at.format("%Y-%m-%d %H:%M").to_string(),
                        ]
                    }),
                )
            })?;
        }
        TemplatesCmd::Show { name } => {
            let row = store.template_current(&name).await?;
            emit(out, json, &row, |o| {
                writeln!(
                    o,
                    "{} (sha256 {}, {} version(s))",
                    row.name, row.sha256, row.versions
                )?;
                table(
                    o,
                    &[
                        "step",
                        "prerequisites",
                        "lifecycle",
                        "error-limit",
                        "function",
                    ],
                    row.spec.steps.iter().map(|s| {
                        vec![
                            s.name.clone(),
                            s.prereqs.join(", "),
                            s.lifecycle.clone().unwrap_or_default(),
                            s.error_limit.to_string(),
                            match (&s.function, s.skip_queue) {
                                (_, true) => "skip-queue".into(),
                                (None, _) => "human".into(),
                                (Some(f), _) => format!("{:?}", f.runner)
                                    .split_whitespace()
                                    .next()
                                    .unwrap_or_default()
                                    .to_lowercase(),
                            },
                        ]
                    }),
                )
            })?;
        }
    }
    Ok(())
}

async fn show(
    store: &Store,
    id: &str,
    events: i64,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let view = store.object_view(id, events).await?;
    emit(out, json, &view, |o| {
        writeln!(o, "{} (version {})", view.id, view.version)?;
        if view.properties.as_object().is_some_and(|p| !p.is_empty()) {
            writeln!(o, "properties: {}", view.properties)?;
        }
        if !view.documents.is_empty() {
            writeln!(o, "documents: {}", view.documents.join(", "))?;
        }
        for w in &view.workflows {
            writeln!(
                o,
                "\n{} v{} [{}{}] priority {} lane {}",
                w.workflow.template,
                w.workflow.version,
                w.workflow.status,
                if w.workflow.active { "" } else { ", inactive" },
                w.workflow.priority,
                w.workflow.lane
            )?;
            table(
                o,
                &[
                    "step",
                    "status",
                    "attempts",
                    "elapsed",
                    "lifecycle",
                    "note / error",
                ],
                w.steps.iter().map(|s| {
                    vec![
                        s.name.clone(),
                        s.status.clone(),
                        format!("{}/{}", s.attempts, s.max_attempts),
                        s.elapsed.map(|e| format!("{e:.3}s")).unwrap_or_default(),
                        s.lifecycle.clone().unwrap_or_default(),
                        s.error_message
                            .clone()
                            .or_else(|| s.note.clone())
                            .unwrap_or_default(),
                    ]
                }),
            )?;
        }
        if !view.milestones.is_empty() {
            writeln!(o, "\nmilestones:")?;
            for m in &view.milestones {
                writeln!(
                    o,
                    "  {} {} (version {})",
                    m.at.format("%Y-%m-%d %H:%M:%S"),
                    m.name,
                    m.version
                )?;
            }
        }
        if !view.events.is_empty() {
            writeln!(o, "\nevents:")?;
            for e in &view.events {
                writeln!(
                    o,
                    "  {} {} {}{}{}",
                    e.at.format("%Y-%m-%d %H:%M:%S%.3f"),
                    e.kind,
                    e.template.clone().unwrap_or_default(),
                    e.step.as_ref().map(|s| format!(":{s}")).unwrap_or_default(),
                    e.status
                        .as_ref()
                        .map(|s| format!(" -> {s}"))
                        .unwrap_or_default()
                )?;
            }
        }
        Ok(())
    })
}

fn status_table(o: &mut dyn Write, facets: &[crate::store::Facet]) -> std::io::Result<()> {
    // One row per template step, one column per status present.
    let mut statuses: Vec<&str> = facets.iter().map(|f| f.status.as_str()).collect();
    let order = |s: &str| {
        crate::status::Status::BUILTIN
            .iter()
            .position(|b| *b == s)
            .unwrap_or(usize::MAX)
    };
    statuses.sort_by_key(|s| (order(s), s.to_string()));
    statuses.dedup();
    // Rows in the order the facets come: by template, then the steps' order in the template.
    let mut rows: Vec<((String, String), BTreeMap<String, i64>)> = Vec::new();
    for f in facets {
        let key = (f.template.clone(), f.step.clone());
        match rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, counts)) => {
                counts.insert(f.status.clone(), f.count);
            }
            None => rows.push((key, BTreeMap::from([(f.status.clone(), f.count)]))),
        }
    }
    let mut headers = vec!["template", "step"];
    headers.extend(statuses.iter());
    table(
        o,
        &headers,
        rows.iter().map(|((t, s), counts)| {
            let mut row = vec![t.clone(), s.clone()];
            row.extend(statuses.iter().map(|st| {
                counts
                    .get(*st)
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into())
            }));
            row
        }),
    )
}

/// Print `value` as JSON, or run `text` to print it for people.
fn emit<T: Serialize + ?Sized>(
    out: &mut impl Write,
    json: bool,
    value: &T,
    text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, value)?;
        writeln!(out)?;
    } else {
        text(out)?;
    }
    Ok(())
}

/// Left-aligned columns.
pub fn table(
    o: &mut dyn Write,
    headers: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |o: &mut dyn Write, cells: Vec<&str>| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        writeln!(o, "{}", s.trim_end())
    };
    line(o, headers.to_vec())?;
    for r in &rows {
        line(o, r.iter().map(String::as_str).collect())?;
    }
    if rows.is_empty() {
        writeln!(o, "(none)")?;
    }
    Ok(())
}

fn split_step(text: &str) -> Result<(&str, &str)> {
    match text.split_once(':') {
        Some((t, s)) if !t.is_empty() && !s.is_empty() => Ok((t, s)),
        _ => bail!("{text:?}: expected TEMPLATE:STEP, e.g. accessionWF:shelve"),
    }
}

fn parse_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

fn parse_properties(items: &[String]) -> Result<BTreeMap<String, Value>> {
    items
        .iter()
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .with_context(|| format!("--property {p:?}: expected KEY=VALUE"))?;
            if k.is_empty() {
                bail!("--property {p:?}: empty key");
            }
            Ok((k.to_string(), parse_value(v)))
        })
        .collect()
}

fn step_filter(f: &FilterArgs) -> Result<StepFilter> {
    let property = match &f.property {
        None => None,
        Some(p) => {
            let (k, v) = p
                .split_once('=')
                .with_context(|| format!("--property {p:?}: expected KEY=VALUE"))?;
            Some((k.to_string(), parse_value(v)))
        }
    };
    Ok(StepFilter {
        object: f.object.clone(),
        template: f.template.clone(),
        step: f.step.clone(),
        property,
        ..StepFilter::default()
    })
}

fn actor() -> String {
    std::env::var("USER")
        .map(|u| format!("cli:{u}"))
        .unwrap_or_else(|_| "cli".into())
}

async fn tokens(store: &Store, cmd: TokensCmd, json: bool, out: &mut impl Write) -> Result<()> {
    match cmd {
        TokensCmd::Create {
            role,
            expires,
            name,
        } => {
            let role = Role::parse(&role)
                .with_context(|| format!("--role {role:?}: use admin, robot or viewer"))?;
            let expires_at = match expires {
                Some(d) => Some(
                    Utc::now() + chrono::Duration::from_std(d).context("--expires is too long")?,
                ),
                None => None,
            };
            let (id, token) = store.token_create(role, &name, expires_at).await?;
            emit(
                out,
                json,
                &serde_json::json!({"id": id, "role": role, "token": token, "expires_at": expires_at}),
                |o| writeln!(o, "{token}"),
            )?;
        }
        TokensCmd::List => {
            let rows = store.token_list().await?;
            emit(out, json, &rows, |o| {
                table(
                    o,
                    &["id", "name", "role", "created", "expires", "revoked"],
                    rows.iter().map(|r| {
                        let t = |d: Option<DateTime<Utc>>| {
                            d.map(|d| d.format("%Y-%m-%d %H:%M").to_string())
                                .unwrap_or_else(|| "-".into())
                        };
                        vec![
                            r.id.to_string(),
                            r.name.clone(),
                            r.role.clone(),
                            t(Some(r.created_at)),
                            t(r.expires_at),
                            t(r.revoked_at),
                        ]
                    }),
                )
            })?;
        }
        TokensCmd::Revoke { id } => {
            store.token_revoke(id).await?;
            emit(out, json, &serde_json::json!({"revoked": id}), |o| {
                writeln!(o, "token {id} revoked")
            })?;
        }
    }
    Ok(())
}

/// `workdo run`: claim the step of these objects now and run it through the worker's path.
async fn run_now(
    store: &Store,
    step: &str,
    objects: &[String],
    args: &RuntimeArgs,
    json: bool,
    out: &mut impl Write,
) -> Result<()> {
    let bindings = worker::bindings(store, &[step.to_string()]).await?;
    let Some(binding) = bindings.into_iter().next() else {
        bail!("{step} has no function to run");
    };
    let config = runtime_config(args, false)?;
    let invoker = crate::function::Invoker::new(&binding.function, &config.env)
        .map_err(anyhow::Error::msg)?;
    let timeout = std::time::Duration::from_secs_f64(binding.function.timeout_secs);
    let mut claimed = store
        .step_claim_objects(
            &binding.template,
            &binding.step,
            objects,
            &config.owner,
            timeout + config.lease_margin,
        )
        .await?;
    let mut inputs = store
        .step_inputs(&mut claimed, &binding.function.documents)
        .await?;
    let mut results = Vec::new();
    for c in &claimed {
        let input = inputs.remove(&c.id).unwrap_or_default();
        results.push(worker::execute(&invoker, &binding, &config, c, input, timeout).await);
    }
    invoker.shutdown().await;
    store
        .results_commit(&results, &format!("cli:run:{}", config.owner))
        .await?;
    let mut report = Vec::new();
    for o in objects {
        let line = match claimed
            .iter()
            .zip(&results)
            .find(|(c, _)| &c.object_id == o)
        {
            Some((_, r)) => serde_json::json!({"object": o, "status": r.change.status.as_str(),
                "message": r.change.error_message, "note": r.change.note}),
            None => {
                let why = store.why(o, &binding.template, &binding.step).await;
                let reason = match why {
                    Ok(w) => w.reasons.join("; "),
                    Err(e) => e.to_string(),
                };
                serde_json::json!({"object": o, "status": "not run", "message": reason})
            }
        };
        report.push(line);
    }
    emit(out, json, &report, |o| {
        for r in &report {
            writeln!(
                o,
                "{} {}{}",
                r["object"].as_str().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default(),
                r["message"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )?;
        }
        Ok(())
    })?;
    Ok(())
}
