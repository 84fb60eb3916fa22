//! The `workdo` command. Every command writes to a `Write` so tests can read its output, and
//! every read command takes `--json` for scripts. This file parses and dispatches; each group of
//! commands has a file of its own.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};

mod args;
pub mod files;
pub use files::default_data_dir;
pub mod functions;
mod graph;
mod handoff;
mod help;
mod housekeeping;
mod idempotent;
mod inputs;
mod machines;
mod objects;
mod schedules;
mod show;
mod steps;
mod templates;
mod tokens;
mod up;

use idempotent::{once_begin, once_end};

pub use args::*;
use inputs::{parse_properties, split_step, step_filter};

use crate::store::{Store, db};

/// A Postgres-native workflow runtime for object-centric work.
#[derive(Debug, Parser)]
#[command(name = "workdo", version, about)]
pub struct Cli {
    /// Postgres to use. Without it, a private cluster is started under --data-dir.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Where the private cluster lives when no database URL is given: by default the user's
    /// data directory ($XDG_DATA_HOME/workdo, else ~/.local/share/workdo), whatever the
    /// current directory.
    #[arg(
        long,
        env = "WORKDO_DATA_DIR",
        global = true,
        default_value_os_t = default_data_dir()
    )]
    pub data_dir: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What is logged to stderr: error, warn, info (each failed step, retry and alert), debug
    /// or trace for workdo's own events (other crates' stay at warn), or tracing directives
    /// such as `workdo=debug,sqlx=info` [default: info; warn under `up --demo`, whose progress
    /// bars show the failures].
    #[arg(long, env = "WORKDO_LOG", global = true)]
    pub log_level: Option<String>,
    /// How logs are written: `text`, or `json` (one object per line, for a log collector).
    #[arg(long, env = "WORKDO_LOG_FORMAT", global = true, default_value = "text",
          value_parser = ["text", "json"])]
    pub log_format: String,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The logging options given.
    pub fn log_options(&self) -> crate::telemetry::LogOptions {
        let demo = matches!(&self.command, Command::Up(up) if up.demo.is_some());
        let default = if demo { "warn" } else { "info" };
        crate::telemetry::LogOptions {
            level: self.log_level.clone().unwrap_or_else(|| default.into()),
            format: self.log_format.clone(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the database migrations (every command also does this first).
    #[command(after_help = "Example: DATABASE_URL=postgres://workdo@db/workdo workdo migrate")]
    Migrate,
    /// Load, list and show workflow templates.
    #[command(after_help = "Example: workdo templates load workflows/")]
    #[command(subcommand)]
    Templates(TemplatesCmd),
    /// Deploy step functions to the database and roll them back; workers fetch what they run.
    #[command(after_help = "Example: workdo functions deploy shelve functions/bin/shelve")]
    #[command(subcommand)]
    Functions(functions::FunctionsCmd),
    /// Register and inspect objects.
    #[command(
        after_help = "Example: workdo objects add druid:bb123cd4567 --property barcode=36105010362304"
    )]
    #[command(subcommand)]
    Objects(ObjectsCmd),
    /// Start a template on objects.
    #[command(
        after_help = "Examples:\n  workdo start accessionWF druid:bb123cd4567 druid:bc234df5678\n  workdo start accessionWF druid:bb123cd4567 --priority 10 --lane fast\n  workdo start accessionWF druid:bb123cd4567 --start-at 2027-01-01T00:00:00Z"
    )]
    Start(StartArgs),
    /// Objects waiting at TEMPLATE:STEP whose --completed steps are done (a WorkDo queue).
    #[command(
        after_help = "Examples:\n  workdo queue accessionWF:end-accession --completed accessionWF:rights-metadata\n  workdo queue accessionWF:technical-metadata --errors"
    )]
    Queue(QueueArgs),
    /// Named queues: a step, the steps that must be done, and object properties, under a name
    /// the CLI, `/api/queues/NAME` and `/workflow_queue?queue=NAME` share.
    #[command(after_help = "Example: workdo queues show embargo-release")]
    #[command(subcommand)]
    Queues(QueuesCmd),
    /// Whether ready robot steps are handed off to Sidekiq (`queued` on the workflow service's
    /// routes) or wait for robots that poll (`waiting`): one setting in the database.
    #[command(subcommand, after_help = "Example: workdo handoff enable sidekiq")]
    Handoff(handoff::HandoffCmd),
    /// Facets: template × step × status counts.
    #[command(after_help = "Example: workdo status --template accessionWF")]
    Status {
        /// Only this template.
        #[arg(long)]
        template: Option<String>,
    },
    /// Send a signal to a state-machine job; prints the transition it took.
    #[command(
        after_help = "Example: workdo signal druid:bb123cd4567 loanReviewWF approve --data '{\"by\": \"jd\"}'"
    )]
    Signal {
        /// The object whose job gets the signal.
        #[arg(value_parser = args::object_id)]
        object: String,
        /// The machine template of the job.
        template: String,
        /// The signal's name, e.g. approve.
        signal: String,
        /// Data for the signal (JSON), seen by actions as `signal.data`.
        #[arg(long)]
        data: Option<String>,
        /// Send this signal once: a repeat with the same key within 24 hours prints the first
        /// answer and sends nothing (for scripts that retry).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// State-machine housekeeping.
    #[command(
        after_help = "Example: workdo machines migrate loanReviewWF --to 3f2a9c --map Review=Reviewing"
    )]
    #[command(subcommand)]
    Machines(MachinesCmd),
    /// List and delete workflows.
    #[command(after_help = "Example: workdo workflows list --status active")]
    #[command(subcommand)]
    Workflows(WorkflowsCmd),
    /// Move finished workflows (steps and events with them) out of the live tables, in batches
    /// that never hold up the runtime; with --purge, delete them.
    #[command(after_help = "Example: workdo archive --finished-before 90d")]
    Archive(args::ArchiveArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Example: workdo completions bash > /etc/bash_completion.d/workdo")]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// A workflow's step graph, generated subnets included, as Mermaid or Graphviz DOT.
    #[command(
        after_help = "Example: workdo graph druid:bb123cd4567 digitalObjectWF --format dot | dot -Tsvg > graph.svg"
    )]
    Graph {
        /// The object.
        #[arg(value_parser = args::object_id)]
        object: String,
        /// The workflow's template.
        template: String,
        /// `mermaid` or `dot`.
        #[arg(long, default_value = "mermaid", value_parser = ["mermaid", "dot"])]
        format: String,
    },
    /// An object's workflows, steps, milestones and last events.
    #[command(after_help = "Example: workdo show druid:bb123cd4567 --events 50")]
    Show {
        /// The object.
        #[arg(value_parser = args::object_id)]
        object: String,
        /// How many recent events to show.
        #[arg(long, default_value_t = 20)]
        events: i64,
    },
    /// Change a step by hand.
    #[command(
        after_help = "Example: workdo step set druid:bb123cd4567 accessionWF end-accession completed"
    )]
    #[command(subcommand)]
    Step(StepCmd),
    /// Set the priority of unfinished steps (higher runs first).
    #[command(
        after_help = "Examples:\n  workdo prioritize 100 --object druid:bb123cd4567\n  workdo prioritize 5 --template accessionWF --property project=rush\n  (or in SQL: select workdo.prioritize(100, object_id => 'druid:bb123cd4567');)"
    )]
    Prioritize {
        /// The new priority (higher runs first; negative allowed).
        #[arg(allow_hyphen_values = true)]
        priority: i32,
        #[command(flatten)]
        filter: FilterArgs,
        /// Every unfinished step (required when no filter is given).
        #[arg(long)]
        all: bool,
    },
    /// Put steps in error back in the queue, attempts reset.
    #[command(
        after_help = "Examples:\n  workdo retry --template accessionWF --step technical-metadata\n  workdo retry --again --object druid:bb123cd4567 --template digitalObjectWF --step inspect-content"
    )]
    Retry {
        #[command(flatten)]
        filter: FilterArgs,
        /// Run finished (completed or skipped) steps again instead, e.g. an observer after its
        /// document changed (a filter is required).
        #[arg(long)]
        again: bool,
        /// Run the retried steps on the deployed functions' versions current now, not those
        /// their workflows pinned when they started (after deploying a fix).
        #[arg(long)]
        current_functions: bool,
    },
    /// Skip unfinished steps.
    #[command(
        after_help = "Example: workdo skip --object druid:bb123cd4567 --template accessionWF --step rights-metadata"
    )]
    Skip(FilterArgs),
    /// Pause a queue: no worker in any process claims TEMPLATE:STEP's ready steps (nor hands
    /// them to Sidekiq) until `workdo resume`; running calls finish. Without a step, lists the
    /// paused ones.
    #[command(
        after_help = "Examples:\n  workdo pause googleScannedBookWF:shelve --reason \"storage maintenance\"\n  workdo pause"
    )]
    Pause {
        /// TEMPLATE:STEP (a generated step's queue: TEMPLATE:BRICKLET/STEP).
        step: Option<String>,
        /// Why, shown on the page and by `workdo pause`.
        #[arg(long, requires = "step")]
        reason: Option<String>,
    },
    /// Resume a paused queue: its workers claim again at once.
    #[command(after_help = "Example: workdo resume googleScannedBookWF:shelve")]
    Resume {
        /// TEMPLATE:STEP
        step: String,
    },
    /// Why a step is not running.
    #[command(after_help = "Example: workdo why druid:bb123cd4567 accessionWF end-accession")]
    Why {
        /// The object.
        #[arg(value_parser = args::object_id)]
        object: String,
        /// The workflow's template.
        template: String,
        /// The step; leave it out for a state-machine job.
        step: Option<String>,
    },
    /// The private cluster: its URL, or stop it.
    #[command(after_help = "Example: workdo db url")]
    #[command(subcommand)]
    Db(DbCmd),
    /// Run the runtime: workers for every step bound to a function, plus maintenance.
    #[command(
        after_help = "Examples:\n  workdo up\n  workdo up --demo 200\n  workdo up --listen 0.0.0.0:7070 --config /etc/workdo/alerts.env --log-format json"
    )]
    Up(UpArgs),
    /// Serve the HTTP API only (no workers).
    #[command(after_help = "Example: workdo serve --listen 127.0.0.1:7070")]
    Serve(ApiArgs),
    /// Create, list and revoke API tokens.
    #[command(after_help = "Example: workdo tokens create --role viewer --name dashboard")]
    #[command(subcommand)]
    Tokens(TokensCmd),
    /// Task injection: run TEMPLATE:STEP for these objects now, ahead of the queue.
    #[command(
        after_help = "Example: workdo run accessionWF:technical-metadata --object druid:bb123cd4567"
    )]
    Run {
        /// TEMPLATE:STEP
        step: String,
        /// An object to run it for (repeatable).
        #[arg(long = "object", required = true, value_parser = args::object_id)]
        objects: Vec<String>,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// Measure throughput and latency next to a plain SQL queue, on this server (see BENCHMARKS.md).
    #[command(after_help = "Example: workdo bench --runs 5 --only queue --only dag")]
    Bench {
        /// Runs per figure; the table shows the median with min and max.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Small sizes (seconds), with the same correctness checks.
        #[arg(long)]
        quick: bool,
        /// Only these scenarios (repeatable): queue (yardstick and claim+complete), dag, start,
        /// wake, scale, calls, dispatch, machines, archive (WORKDO_BENCH_ARCHIVE finished
        /// workflows, 250,000 by default, four events each). Default: all.
        #[arg(long, value_enum)]
        only: Vec<crate::bench::Scenario>,
        /// The workdo executable used as the warm/exec no-op function (default: this one).
        #[arg(long, hide = true)]
        noop_function: Option<PathBuf>,
        /// A small no-op function binary for the exec figures (default: `noop` next to this
        /// executable, built by `cargo build --release`)
        #[arg(long, value_name = "PATH")]
        exec_function: Option<PathBuf>,
    },
    /// Cron schedules that start workflows.
    #[command(after_help = "Example: workdo schedules list")]
    #[command(subcommand)]
    Schedules(SchedulesCmd),
    /// Run workers for just these steps (TEMPLATE:STEP), e.g. to spread robots over machines.
    #[command(
        after_help = "Example: workdo worker accessionWF:technical-metadata accessionWF:rights-metadata --max-connections 4"
    )]
    Worker {
        /// TEMPLATE:STEP, one or more.
        #[arg(required_unless_present = "queue")]
        steps: Vec<String>,
        /// Work a named queue (`workdo queues define`): its step, for the objects it lists only.
        #[arg(long, conflicts_with = "steps")]
        queue: Option<String>,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
}

/// Run a parsed command, writing its output to `out`.
///
/// # Errors
/// Anything the command reports: bad input, a missing database, a failed statement.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<()> {
    // Completions need no database.
    if let Command::Completions { shell } = &cli.command {
        return housekeeping::completions(*shell, out);
    }
    if let Command::Db(DbCmd::Stop) = &cli.command {
        if cli.database_url.is_some() {
            bail!("DATABASE_URL is set: there is no private cluster to stop");
        }
        // Stopping must not start anything first; and says what it did.
        if !cli.data_dir.join("pgdata").exists() {
            writeln!(
                out,
                "no private cluster in {}: nothing to stop",
                cli.data_dir.display()
            )?;
            return Ok(());
        }
        let cluster = crate::pg::Cluster::open(&cli.data_dir)?;
        let running = cluster.port != 0;
        cluster.stop()?;
        if running {
            writeln!(out, "stopped the cluster in {}", cli.data_dir.display())?;
        } else {
            writeln!(
                out,
                "the cluster in {} was not running",
                cli.data_dir.display()
            )?;
        }
        return Ok(());
    }
    let target = db::resolve(cli.database_url.as_deref(), &cli.data_dir).await?;
    // Which database this is, for the runtime's start-up line.
    let database = match &target.cluster {
        Some(c) => format!(
            "the private cluster in {} (port {})",
            c.dir.display(),
            c.port
        ),
        None => db::redact(&target.url),
    };
    if let Command::Bench {
        runs,
        quick,
        only,
        noop_function,
        exec_function,
    } = &cli.command
    {
        let opts = crate::bench::Options {
            runs: *runs,
            quick: *quick,
            only: only.clone(),
            noop_function: noop_function.clone(),
            exec_function: exec_function.clone(),
        };
        crate::bench::run(&target.url, &opts, cli.json, out).await?;
        return Ok(());
    }
    if let Command::Db(DbCmd::Url { redact }) = &cli.command {
        if *redact {
            writeln!(out, "{}", db::redact(&target.url))?;
        } else {
            writeln!(out, "{}", target.url)?;
        }
        return Ok(());
    }
    let connections = match &cli.command {
        Command::Up(a) => a.runtime.max_connections.unwrap_or(16),
        Command::Worker { runtime, steps, .. } => runtime
            .max_connections
            .unwrap_or_else(|| up::worker_connections(steps.len(), runtime.completers)),
        _ => 4,
    };
    let pool = db::connect(&target.url, connections).await?;
    db::migrate(&pool).await?;
    let async_claims = match &cli.command {
        Command::Up(args) => args.runtime.async_claims,
        Command::Worker { runtime, .. } => runtime.async_claims,
        _ => false,
    };
    let store = Store::new(pool)
        .traced(crate::telemetry::workflow_trace)
        .with_async_claims(async_claims);
    let json = cli.json;
    match cli.command {
        Command::Migrate => writeln!(out, "migrations applied")?,
        Command::Templates(cmd) => templates::run(&store, cmd, json, out).await?,
        Command::Functions(cmd) => functions::run(&store, cmd, json, out).await?,
        Command::Objects(ObjectsCmd::Add {
            id,
            from,
            properties,
            properties_json,
            documents,
        }) => {
            let props = parse_properties(&properties, &properties_json)?;
            match (id, from) {
                (Some(id), _) => objects::add(&store, &id, &props, &documents, json, out).await?,
                (None, Some(file)) => objects::add_from(&store, &file, &props, json, out).await?,
                (None, None) => bail!("give an object id or --from FILE"),
            }
        }
        Command::Objects(ObjectsCmd::Show { id }) => {
            show::object(&store, &id, 20, json, out).await?
        }
        Command::Objects(ObjectsCmd::List {
            prefix,
            after,
            limit,
        }) => {
            housekeeping::objects_list(
                &store,
                prefix.as_deref(),
                after.as_deref(),
                limit,
                json,
                out,
            )
            .await?
        }
        Command::Objects(ObjectsCmd::Delete { id }) => {
            housekeeping::object_delete(&store, &id, out).await?
        }
        Command::Workflows(WorkflowsCmd::List {
            template,
            status,
            object,
            after,
            limit,
        }) => {
            housekeeping::workflows_list(
                &store,
                template.as_deref(),
                status.as_deref(),
                object.as_deref(),
                after,
                limit,
                json,
                out,
            )
            .await?
        }
        Command::Workflows(WorkflowsCmd::Delete { id }) => {
            housekeeping::workflow_delete(&store, id, out).await?
        }
        Command::Archive(a) => housekeeping::archive(&store, &a, json, out).await?,
        Command::Completions { .. } => {}
        Command::Signal {
            object,
            template,
            signal,
            data,
            idempotency_key,
        } => {
            let request = serde_json::json!({"signal": [&object, &template, &signal, &data]});
            if !once_begin(&store, idempotency_key.as_deref(), &request, json, out).await? {
                // The answer is kept before it is printed: a print that fails (a closed pipe, a
                // full disk) must not give the key back for a signal that was sent.
                let done =
                    machines::signal(&store, &object, &template, &signal, data.as_deref()).await;
                once_end(&store, idempotency_key.as_deref(), &done).await?;
                machines::print_signalled(&done?, json, out)?;
            }
        }
        Command::Machines(MachinesCmd::Migrate {
            template,
            to,
            map,
            workflow,
        }) => machines::migrate(&store, &template, &to, &map, workflow, json, out).await?,
        Command::Machines(MachinesCmd::Suspend { workflow }) => {
            machines::suspend(&store, workflow, true, json, out).await?
        }
        Command::Machines(MachinesCmd::Resume { workflow }) => {
            machines::suspend(&store, workflow, false, json, out).await?
        }
        Command::Graph {
            object,
            template,
            format,
        } => graph::graph(&store, &object, &template, &format, out).await?,
        Command::Show { object, events } => {
            show::object(&store, &object, events, json, out).await?
        }
        Command::Start(args) => objects::start(&store, args, json, out).await?,
        Command::Queue(args) => steps::queue(&store, &args, json, out).await?,
        Command::Queues(cmd) => steps::queues(&store, cmd, json, out).await?,
        Command::Handoff(cmd) => handoff::handoff(&store, cmd, json, out).await?,
        Command::Status { template } => {
            show::status(&store, template.as_deref(), json, out).await?
        }
        Command::Step(StepCmd::Set(args)) => steps::set(&store, args, json, out).await?,
        Command::Prioritize {
            priority,
            filter,
            all,
        } => steps::prioritize(&store, priority, &filter, all, json, out).await?,
        Command::Retry {
            filter,
            again,
            current_functions,
        } => steps::retry(&store, &filter, (again, current_functions), json, out).await?,
        Command::Skip(filter) => steps::skip(&store, &filter, json, out).await?,
        Command::Pause { step, reason } => {
            steps::pause(&store, step.as_deref(), reason.as_deref(), json, out).await?
        }
        Command::Resume { step } => steps::resume(&store, &step, json, out).await?,
        Command::Why {
            object,
            template,
            step,
        } => steps::why(&store, &object, &template, step.as_deref(), json, out).await?,
        Command::Db(_) | Command::Bench { .. } => {}
        Command::Up(args) => {
            let private = target.cluster.is_some();
            let followed =
                crate::store::hosts::Hosts::parse(&target.url).is_ok_and(|h| h.followed());
            let at = (database.as_str(), private, followed);
            up::up(&store, args, &cli.data_dir, at, out).await?
        }
        Command::Serve(args) => up::serve(store, &args).await?,
        Command::Tokens(cmd) => tokens::run(&store, cmd, json, out).await?,
        Command::Run {
            step,
            objects,
            runtime,
        } => up::run_now(&store, &step, &objects, &runtime, json, out).await?,
        Command::Schedules(cmd) => schedules::run(&store, cmd, json, out).await?,
        Command::Worker {
            steps,
            queue,
            runtime,
        } => up::worker(store, &steps, queue.as_deref(), &runtime).await?,
    }
    Ok(())
}

pub(super) fn actor() -> String {
    std::env::var("USER")
        .map(|u| format!("cli:{u}"))
        .unwrap_or_else(|_| "cli".into())
}
