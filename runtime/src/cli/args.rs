//! The command line's arguments, shared by several commands.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};

use crate::api;
use crate::model::template;

#[derive(Debug, Args, Clone)]
pub struct ApiArgs {
    /// Address the HTTP API and the admin page listen on [default: 127.0.0.1:7070; `up --demo`
    /// takes any free loopback port when 7070 is taken, and serves without tokens unless this
    /// is given].
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
    #[command(after_help = "Example: workdo schedules load workflows/schedules.yaml")]
    Load {
        /// Schedules files (YAML).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Every schedule with its next fire time.
    #[command(after_help = "Example: workdo schedules list --json")]
    List,
    /// Let a schedule fire again.
    #[command(after_help = "Example: workdo schedules enable nightly-fixity")]
    Enable {
        /// The schedule's name.
        name: String,
    },
    /// Stop a schedule firing (it stays, and `enable` resumes it).
    #[command(after_help = "Example: workdo schedules disable nightly-fixity")]
    Disable {
        /// The schedule's name.
        name: String,
    },
    /// Fire a schedule now, as if its tick had come (its next regular tick stays).
    #[command(after_help = "Example: workdo schedules fire nightly-fixity")]
    Fire {
        /// The schedule's name.
        name: String,
    },
    /// Delete a schedule (loading its file again brings it back).
    #[command(after_help = "Example: workdo schedules delete nightly-fixity")]
    Delete {
        /// The schedule's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// Create a token and print it (it is shown only this once).
    #[command(
        after_help = "Examples:\n  workdo tokens create --role robot --name scanner-3 --expires 90d\n  workdo tokens create --workflow 42 --signals keep,delete --expires 7d"
    )]
    Create {
        /// admin, robot or viewer (a token scoped with --workflow needs none).
        #[arg(long, required_unless_present = "workflow")]
        role: Option<String>,
        /// Scope the token to this state-machine job: it may send --signals to it, nothing else.
        #[arg(long, requires = "signals")]
        workflow: Option<i64>,
        /// The signals a scoped token may send, comma-separated.
        #[arg(long, value_delimiter = ',', requires = "workflow")]
        signals: Vec<String>,
        /// Valid for this long (e.g. 30d, 12h); without it, until revoked.
        #[arg(long, value_parser = duration)]
        expires: Option<std::time::Duration>,
        /// A label, e.g. who or what uses it.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Every token (never the secrets).
    #[command(after_help = "Example: workdo tokens list")]
    List,
    /// Revoke a token by id.
    #[command(after_help = "Example: workdo tokens revoke 3")]
    Revoke {
        /// The token's id (from `workdo tokens list`).
        id: i64,
    },
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub api: ApiArgs,
    /// Run without the HTTP API.
    #[arg(long)]
    pub no_api: bool,
    /// Register N sample books, run them all with the demo functions and summarise; then, in a
    /// terminal (or with --serve), keep serving the admin page until Ctrl-C, else exit.
    #[arg(long, value_name = "N")]
    pub demo: Option<u32>,
    /// After the demo, keep serving the admin page until Ctrl-C even when stdin is not a
    /// terminal.
    #[arg(long, requires = "demo")]
    pub serve: bool,
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
    /// Longest a worker waits without a notification before looking for work (at least 1ms).
    #[arg(long, default_value = "1s", value_parser = positive_duration)]
    pub poll_interval: std::time::Duration,
    /// A lease lasts the function's timeout plus this (or --lease, when shorter).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub lease_margin: std::time::Duration,
    /// Longest a claim lasts without being renewed. The runtime renews the leases of the steps
    /// it runs every third of this, so a runtime that dies gives its steps back within it
    /// however long its functions run.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub lease: std::time::Duration,
    /// On SIGTERM, how long calls in flight may take to finish before their steps are released.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub grace: std::time::Duration,
    /// Back-off before the first retry; doubles each attempt (default 1s, 100ms with --demo).
    #[arg(long, value_parser = duration)]
    pub retry_base: Option<std::time::Duration>,
    /// Longest back-off.
    #[arg(long, default_value = "1h", value_parser = duration)]
    pub retry_max: std::time::Duration,
    /// Claims commit without waiting for the WAL flush: faster claims, and a claim lost with a
    /// crash or a failover lets its step's function run once more (its completion is never
    /// committed twice; that call is not counted as an attempt). Off by default.
    #[arg(long, env = "WORKDO_ASYNC_CLAIMS")]
    pub async_claims: bool,
    /// Environment for every exec and warm function (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// A variable of this process's environment to pass on to exec and warm functions
    /// (repeatable). Functions get only PATH, HOME, LANG, LC_ALL, TZ and TMPDIR of it otherwise:
    /// never DATABASE_URL, PGPASSWORD or WORKDO_SMTP_URL unless named here.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Where deployed functions are fetched to and run from (private to this user; default
    /// $XDG_CACHE_HOME/workdo/functions, else ~/.cache/workdo/functions).
    #[arg(long, env = "WORKDO_FUNCTION_CACHE", value_name = "DIR")]
    pub function_cache: Option<PathBuf>,
    /// Hand the steps no workdo function runs to Sidekiq robots, as the workflow service does:
    /// each step that becomes ready is pushed once to this Redis (`redis://[:password@]host[:port][/db]`
    /// or `unix:///path[?db=N]`) as a job of class `Robots::{Dor|Sdr}Repo::{Workflow}::{Step}`
    /// on the queue `{workflow}_{lane}`.
    #[arg(long, env = "WORKDO_SIDEKIQ_REDIS", value_name = "URL")]
    pub sidekiq_redis: Option<String>,
    /// A YAML file changing the hand-off's naming rules (keys `sdr_workflows`, `dsa`, `special`;
    /// the defaults are the workflow service's).
    #[arg(long, env = "WORKDO_SIDEKIQ_RULES", value_name = "FILE")]
    pub sidekiq_rules: Option<PathBuf>,
    /// A step handed off and still `queued` (ready, not started) this long after its push was
    /// lost in Redis (a restart without persistence, a flush): push it again, and record that
    /// (event `handoff_pushed_again`). The workflow service's sweeper waits 12 hours.
    #[arg(long, default_value = "12h", value_parser = positive_duration, value_name = "DURATION")]
    pub sidekiq_push_again_after: std::time::Duration,
    /// Database connections this process's runtime may use (besides the API's pool and the
    /// listener). Default: 16 for `up`; for `worker`, what its steps need — one per step, one
    /// per completer and three for the maintenance, machine and alert loops — at most 16.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Transactions committing results in parallel (each holds a connection while it commits).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub completers: u32,
    /// Most results one transaction commits: larger batches give more throughput under load,
    /// smaller ones a shorter wait from a step's result to its dependants' wake-up.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub commit_batch: u32,
    /// Size commits to take about this long (e.g. 5ms), learnt from what results cost: a
    /// dependant's wait for its prerequisite's commit stays near it under load, at a cost in
    /// throughput (BENCHMARKS.md). Default: every commit takes all that waits, up to
    /// --commit-batch.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub commit_within: Option<std::time::Duration>,
    /// A file of KEY=VALUE lines (WORKDO_SMTP_URL, WORKDO_ALERT_FROM, WORKDO_ALERT_TO,
    /// WORKDO_ALERT_INTERVAL, WORKDO_STUCK_STARTED, WORKDO_STUCK_READY, WORKDO_API_URL);
    /// the environment overrides it.
    #[arg(long, env = "WORKDO_CONFIG")]
    pub config: Option<PathBuf>,
    /// Do not fire cron schedules in this process.
    #[arg(long)]
    pub no_schedules: bool,
}

/// An object id in its one spelling (`bc123df4567` is `druid:bc123df4567`), or why not.
pub(super) fn object_id(text: &str) -> Result<String, String> {
    crate::model::object_id::normalize(text)
}

pub(super) fn duration(text: &str) -> Result<std::time::Duration, String> {
    template::parse_duration_secs(text)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| {
            format!("{text:?} is not a duration such as 500ms, 30s, 5m or 90d (at most 36500d)")
        })
}

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Workflows completed longer ago than this (e.g. 90d, 12h).
    #[arg(long, value_parser = duration, required_unless_present = "purge_archived_before")]
    pub finished_before: Option<std::time::Duration>,
    /// Workflows per transaction.
    #[arg(long, default_value_t = 1000)]
    pub batch: i64,
    /// Delete instead of archiving into workdo.archive.
    #[arg(long)]
    pub purge: bool,
    /// Also delete from workdo.archive what was archived longer ago than this (e.g. 365d): the
    /// archive's retention, so it does not grow for ever.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    pub purge_archived_before: Option<std::time::Duration>,
}

/// [`duration`], more than zero: a poll every 0 s is a busy loop, not a setting.
pub(super) fn positive_duration(text: &str) -> Result<std::time::Duration, String> {
    let d = duration(text)?;
    if d < std::time::Duration::from_millis(1) {
        return Err(format!("{text:?} is too short: give at least 1ms"));
    }
    Ok(d)
}

#[derive(Debug, Subcommand)]
pub enum TemplatesCmd {
    /// Load template files, or every .yaml/.yml/.xml file in folders.
    #[command(after_help = "Example: workdo templates load workflows/")]
    Load {
        /// Template files (.yaml, .yml, .xml) or folders of them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Current version of every template.
    #[command(after_help = "Example: workdo templates list --json")]
    List,
    /// One template's steps.
    #[command(after_help = "Example: workdo templates show accessionWF")]
    Show {
        /// The template's name.
        name: String,
    },
    /// Every stored version of a template (SHA-256, when loaded, which is current).
    #[command(after_help = "Example: workdo templates versions accessionWF")]
    Versions {
        /// The template's name.
        name: String,
    },
    /// Make a stored version current again (new workflows start on it).
    #[command(after_help = "Example: workdo templates use accessionWF 3f2a9c")]
    Use {
        /// The template's name.
        name: String,
        /// Its SHA-256, or a unique prefix.
        sha256: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ObjectsCmd {
    /// Register an object, or update its properties and documents.
    #[command(
        after_help = "Example: workdo objects add druid:bb123cd4567 --property barcode=36105010362304 --document descMetadata=mods.xml"
    )]
    Add {
        /// The object, e.g. druid:bb123cd4567 (a bare druid such as bb123cd4567 means the same).
        #[arg(value_parser = object_id, required_unless_present = "from")]
        id: Option<String>,
        /// Register or update many objects from FILE: JSON lines
        /// (`{"id": …, "properties": {…}, "documents": {"name": "content"}}`), or a CSV whose
        /// header has an `id` column and whose other columns are properties (as strings).
        #[arg(long, value_name = "FILE", conflicts_with = "id")]
        from: Option<std::path::PathBuf>,
        /// A property, `key=value`; the value is stored as a string, as typed (a barcode such
        /// as 36105010362304123456 stays exactly that).
        #[arg(long = "property", value_name = "KEY=VALUE")]
        properties: Vec<String>,
        /// A property whose value is JSON, `key=JSON` (`year=1854`, `tags=["a","b"]`); `null`
        /// removes the key, as everywhere.
        #[arg(long = "property-json", value_name = "KEY=JSON")]
        properties_json: Vec<String>,
        /// A document read from a file, `name=path`.
        #[arg(long = "document", value_name = "NAME=FILE")]
        documents: Vec<String>,
    },
    /// Show an object (same as `workdo show`).
    #[command(after_help = "Example: workdo objects show druid:bb123cd4567")]
    Show {
        /// The object, e.g. druid:bb123cd4567 (a bare druid such as bb123cd4567 means the same).
        #[arg(value_parser = object_id)]
        id: String,
    },
    /// Objects by id, a page at a time.
    #[command(
        after_help = "Examples:\n  workdo objects list --prefix druid:bb --limit 50\n  workdo objects list --after druid:bb999zz9999"
    )]
    List {
        /// Only ids starting with this (e.g. druid:bb).
        #[arg(long)]
        prefix: Option<String>,
        /// The page after this id (the last of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Delete an object with its documents, workflows and steps (its events stay).
    #[command(after_help = "Example: workdo objects delete druid:bb123cd4567")]
    Delete {
        /// The object, e.g. druid:bb123cd4567 (a bare druid such as bb123cd4567 means the same).
        #[arg(value_parser = object_id)]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkflowsCmd {
    /// Workflows by id, a page at a time.
    #[command(
        after_help = "Example: workdo workflows list --template accessionWF --status active --limit 20"
    )]
    List {
        /// Only workflows of this template.
        #[arg(long)]
        template: Option<String>,
        /// active or completed.
        #[arg(long, value_parser = ["active", "completed"])]
        status: Option<String>,
        /// Only this object's workflows.
        #[arg(long, value_parser = object_id)]
        object: Option<String>,
        /// The page after this workflow id.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Delete a workflow with its steps.
    #[command(after_help = "Example: workdo workflows delete 42")]
    Delete {
        /// The workflow's id (from `workdo workflows list` or `show`).
        id: i64,
    },
}

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The template to start (its current version).
    pub template: String,
    /// The objects to start it on (registered on the fly when new).
    #[arg(required_unless_present = "from", value_parser = object_id)]
    pub objects: Vec<String>,
    /// Also the objects listed in FILE: one id a line (`#` comments and blank lines skipped),
    /// or a CSV whose header has an `id` column.
    #[arg(long, value_name = "FILE")]
    pub from: Option<std::path::PathBuf>,
    /// Object version (default: the object's current version).
    #[arg(long)]
    pub version: Option<i32>,
    /// Not before this time (RFC 3339, e.g. 2027-01-01T00:00:00Z).
    #[arg(long)]
    pub start_at: Option<DateTime<Utc>>,
    /// Priority of its steps (higher runs first; negative allowed).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub priority: i32,
    /// The lane its steps queue in (a WorkDo lane, e.g. fast or bulk).
    #[arg(long, default_value = "default")]
    pub lane: String,
    /// Workflow context, a JSON object.
    #[arg(long)]
    pub context: Option<String>,
    /// Apply this start once: a repeat with the same key within 24 hours prints the first
    /// answer and starts nothing (for scripts that retry).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    /// TEMPLATE:STEP
    pub step: String,
    /// TEMPLATE:STEP that must be completed (repeatable).
    #[arg(long)]
    pub completed: Vec<String>,
    /// Only this lane.
    #[arg(long)]
    pub lane: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub limit: i64,
    /// List the objects whose step is in error instead.
    #[arg(long)]
    pub errors: bool,
    /// Only objects with this property (KEY=VALUE, a string; repeatable: all of them).
    #[arg(long, value_name = "KEY=VALUE")]
    pub property: Vec<String>,
    /// Only objects with this property (KEY=JSON: a number, true, a list…; repeatable).
    #[arg(long, value_name = "KEY=JSON")]
    pub property_json: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum QueuesCmd {
    /// Define (or redefine) a named queue: objects waiting at a step whose --completed steps
    /// are done and whose properties match.
    #[command(
        after_help = "Example: workdo queues define embargo-release --waiting releaseWF:release --completed accessionWF:end-accession --property-json embargoed=false"
    )]
    Define {
        /// The queue's name (letters, digits, '-', '_', '.').
        name: String,
        /// TEMPLATE:STEP the objects wait at.
        #[arg(long)]
        waiting: String,
        /// TEMPLATE:STEP that must be completed (repeatable).
        #[arg(long)]
        completed: Vec<String>,
        /// KEY=VALUE (a string) the objects' properties hold (repeatable).
        #[arg(long, value_name = "KEY=VALUE")]
        property: Vec<String>,
        /// KEY=JSON the objects' properties hold (repeatable).
        #[arg(long, value_name = "KEY=JSON")]
        property_json: Vec<String>,
        /// Only this lane.
        #[arg(long)]
        lane: Option<String>,
    },
    /// The named queues.
    #[command(after_help = "Example: workdo queues list")]
    List,
    /// What waits in a named queue now.
    #[command(after_help = "Example: workdo queues show embargo-release")]
    Show {
        /// The queue's name.
        name: String,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Delete a named queue (nothing it lists is touched).
    #[command(after_help = "Example: workdo queues delete embargo-release")]
    Delete {
        /// The queue's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum StepCmd {
    /// Set a step's status (the WorkDo update call).
    #[command(
        after_help = "Example: workdo step set druid:bb123cd4567 accessionWF end-accession completed --note checked"
    )]
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// The object, e.g. druid:bb123cd4567 (a bare druid such as bb123cd4567 means the same).
    #[arg(value_parser = object_id)]
    pub object: String,
    /// The workflow's template.
    pub template: String,
    /// The step's name.
    pub step: String,
    /// The new status: completed, error, skipped, waiting, ready, or a status of your own.
    pub status: String,
    /// A note kept with the step (shown by `show` and the XML routes).
    #[arg(long)]
    pub note: Option<String>,
    /// Error message (short, for reports and mail).
    #[arg(long)]
    pub message: Option<String>,
    /// Error text (long, e.g. a stack trace).
    #[arg(long)]
    pub text: Option<String>,
    /// Record this lifecycle milestone when completing.
    #[arg(long)]
    pub lifecycle: Option<String>,
    /// Seconds the work took.
    #[arg(long)]
    pub elapsed: Option<f64>,
    /// Change only if the step is in this status.
    #[arg(long)]
    pub current_status: Option<String>,
    /// Object version (default: the active one).
    #[arg(long)]
    pub version: Option<i32>,
}

#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    /// Only this object's steps (repeatable: any of them).
    #[arg(long, value_parser = object_id)]
    pub object: Vec<String>,
    /// Only steps of this template.
    #[arg(long)]
    pub template: Option<String>,
    /// Only steps of this name.
    #[arg(long)]
    pub step: Option<String>,
    /// Only objects whose property KEY is the string VALUE.
    #[arg(long, value_name = "KEY=VALUE", conflicts_with = "property_json")]
    pub property: Option<String>,
    /// Only objects whose property KEY equals the JSON value (`year=1854`).
    #[arg(long, value_name = "KEY=JSON")]
    pub property_json: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum MachinesCmd {
    /// Move jobs to another version of their machine (the only way a job changes state other
    /// than by a signal). States the new version lacks must be mapped.
    #[command(
        after_help = "Example: workdo machines migrate loanReviewWF --to 3f2a9c --map Review=Reviewing"
    )]
    Migrate {
        /// The machine template whose jobs move.
        template: String,
        /// The SHA-256 (or a unique prefix) of the version to move to.
        #[arg(long)]
        to: String,
        /// OLD=NEW: a state renamed on the way.
        #[arg(long = "map", value_name = "OLD=NEW")]
        map: Vec<String>,
        /// Only this job (default: every active job of the template).
        #[arg(long)]
        workflow: Option<i64>,
    },
    /// Suspend a job: it takes no signals (they, and its alarms as they fall due, wait in its
    /// inbox) until it is resumed.
    #[command(after_help = "Example: workdo machines suspend 4711")]
    Suspend {
        /// The job's workflow id (`workdo show OBJECT` lists it).
        workflow: i64,
    },
    /// Resume a suspended job: what waited in its inbox is taken now, in order.
    #[command(after_help = "Example: workdo machines resume 4711")]
    Resume {
        /// The job's workflow id.
        workflow: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum DbCmd {
    /// Print the database URL in use (with the private cluster's password, for psql and the like).
    #[command(
        after_help = "Examples:\n  psql \"$(workdo db url)\"\n  workdo db url --redact   # to paste into a ticket: every password masked"
    )]
    Url {
        /// Mask every password in it (`user:***@`, `password=***`), for sharing.
        #[arg(long)]
        redact: bool,
    },
    /// Stop the private cluster.
    #[command(after_help = "Example: workdo db stop")]
    Stop,
}
