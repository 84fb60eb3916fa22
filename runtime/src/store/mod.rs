//! All SQL lives here. Each statement is a method named noun-verb (`step_claim`,
//! `workflow_start`, …); nothing outside this module builds SQL. [`db`] connects and migrates;
//! the store takes and returns plain data (no protocol, telemetry or HTTP types).
//!
//! **Invariant:** for every step, `pending` equals the number of its prerequisites that are not
//! `completed` or `skipped`; a step is `ready`/`scheduled` only when `pending = 0`. Every status
//! change goes through [`Store::steps_apply`], which keeps that true in the same transaction.

// The store's wings, one noun each (a folder's `mod.rs` lists its methods); the files beside
// them are the readers and writers that span nouns (`results`, `queries`, `counts`) or stand
// alone.
mod alerts;
mod bench;
pub(crate) mod connect;
mod counts;
mod demo;
pub(crate) mod dispatch;
mod handoff;
pub(crate) mod history;
mod idempotency;
mod machine;
pub(crate) mod objects;
mod queries;
mod queues;
mod requests;
mod results;
pub(crate) mod schedules;
pub(crate) mod steps;
pub(crate) mod templates;
mod tokens;
mod upkeep;
pub(crate) mod workflows;

pub use connect::{db, hosts, session};
pub use templates::functions;

pub use alerts::{FoldedRow, Outbox, OutboxEntry, OutboxMark, OutboxRow};
pub use counts::{FacetFilter, StepThroughput, Throughput};
pub use demo::{DemoProgress, DemoSummary, DemoTotals};
pub use dispatch::{Bricklets, Dispatch, activation};
pub use handoff::{Handoff, HandoffEntry, HandoffRow};
pub use history::{Archived, ArchivedRow};
pub use idempotency::{Claim, IDEMPOTENCY_HOURS};
pub use machine::{
    MAX_SELF_RUN, MAX_SIGNAL_DATA_BYTES, MachineView, SIGNAL_CHANNEL, Signalled, Suspension,
};
pub use objects::{NewObject, ObjectRow};
pub use queries::{EventRow, Facet, Milestone, ObjectView, QueueEntry, Why, WorkflowView};
pub use queues::{NamedQueue, queue_sql};
pub use requests::StartRequest;
pub use results::{Effects, StepInputs, StepResult, WorkflowToStart};
pub use schedules::{Fired, ScheduleRow};
pub use steps::{
    Applied, Change, Claimed, ErrorGroup, Paused, SetOutcome, SetRequest, StepFilter, Timing,
    queue_key,
};
pub use templates::{Saved, TEMPLATES_CHANNEL, TemplateRow};
pub use tokens::{Role, TokenRow};
pub use workflows::{Started, WorkflowListRow, WorkflowRow};

/// NOTIFY channel carrying `template:step` of steps that became ready. `workdo.apply`
/// (migrations/engine/20_apply.sql) notifies on the same name. Here, at the root, because the
/// steps and the history both name it.
pub const READY_CHANNEL: &str = "workdo_ready";

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// What a store call can fail with; each variant says what the caller did wrong, or that the
/// database did.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unknown template {0:?}: load it first (`workdo templates load`)")]
    UnknownTemplate(String),
    #[error("no object {0:?}")]
    UnknownObject(String),
    #[error("object {object:?} has no active {template} workflow")]
    UnknownWorkflow { object: String, template: String },
    #[error("there is no workflow {0} (workdo workflows list)")]
    UnknownWorkflowId(i64),
    #[error("there is no queue {0:?} (workdo queues list)")]
    UnknownQueue(String),
    #[error("{}", unknown_step(.template, .step))]
    UnknownStep { template: String, step: String },
    #[error("step {step} is {actual:?}, not {expected:?} as required; nothing changed")]
    StatusMismatch {
        step: String,
        expected: String,
        actual: String,
        /// The step's status in workdo's own words (`actual` is the WorkDo view of it).
        status: String,
    },
    #[error("invalid status {status:?} for step {step}: use one of {allowed}")]
    InvalidStatus {
        step: String,
        status: String,
        allowed: String,
    },
    #[error("invalid {field} {value:?}: {reason}")]
    Invalid {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error(
        "object {object:?} is at version {current}: version {asked} is superseded, and only the \
         current version's workflows run (start version {current} or a newer one)"
    )]
    OldVersion {
        object: String,
        asked: i32,
        current: i32,
    },
    #[error("{0}")]
    ObjectId(String),
    #[error(
        "{template} names bricklets that are neither defined in it nor loaded: {}; load their \
         files first (kind: bricklet) or define them under bricklets:",
        names.join(", ")
    )]
    UnknownBricklets {
        template: String,
        names: Vec<String>,
    },
    #[error(
        "generator {generator} would compose {steps} steps, over the limit of {max}: its observers \
         matched more fragments than a subnet should hold"
    )]
    SubnetTooLarge {
        generator: String,
        steps: u64,
        max: u64,
    },
    #[error("signal not accepted: {0}")]
    SignalRefused(String),
    #[error("migration refused: {0}")]
    MigrationRefused(String),
    #[error("transition rolled back: {0}")]
    TransitionRolledBack(String),
    /// A signal queued behind older ones in its job's inbox (internal: `machine_signal` takes
    /// the inbox and answers with this signal's outcome).
    #[error("queued behind older signals")]
    Queued,
    #[error("{0}")]
    Schedule(String),
    #[error("no deployed function {0} (workdo functions list)")]
    UnknownFunction(String),
    #[error(
        "function {name} is pinned by {total} unfinished workflow(s) ({}); let them finish, \
         retry them with --current-functions onto another function, or delete them first",
        shown_ids(.workflows, *.total)
    )]
    FunctionInUse {
        name: String,
        workflows: Vec<i64>,
        total: i64,
    },
    #[error("{0}")]
    BadArtifact(String),
    /// Input no state of things could take (a malformed request: 400), said in full.
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    FunctionConflict(String),
    #[error("stored template {0} cannot be read: {1}")]
    CorruptTemplate(String, serde_json::Error),
    /// The session was found shared with another client ([`session`]): nothing this call did
    /// is kept, and the process claims nothing until the session is its own again.
    #[error("{} ({})", session::LOST_SESSION, .0)]
    SessionLost(sqlx::Error),
    #[error(transparent)]
    Sql(sqlx::Error),
}

/// Every database error passes here: one that shows the session shared with another client
/// (a transaction pooler switched on under this process) marks it lost and says so, in place of
/// the raw statement error.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if session::shows_lost_session(&e) {
            session::mark_lost();
            StoreError::SessionLost(e)
        } else {
            StoreError::Sql(e)
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Workflow ids for a message: the first few, and how many more.
fn shown_ids(ids: &[i64], total: i64) -> String {
    let list: Vec<String> = ids.iter().map(|i| format!("workflow {i}")).collect();
    let more = total - ids.len() as i64;
    if more > 0 {
        format!("{} and {more} more", list.join(", "))
    } else {
        list.join(", ")
    }
}

/// [`StoreError::UnknownStep`]'s words; an empty template means none was named.
fn unknown_step(template: &str, step: &str) -> String {
    if template.is_empty() {
        format!("no loaded template has a step {step:?}")
    } else {
        format!("{template} has no step {step:?}")
    }
}

impl StoreError {
    /// Whether the database refused the data itself (a value it cannot store, a constraint),
    /// as opposed to being unreachable: sending the same data again fails again.
    pub fn is_refusal(&self) -> bool {
        match self {
            StoreError::Sql(sqlx::Error::Database(d)) => d.code().is_some_and(|c| {
                // 22: data exception (e.g. a NUL in text), 23: integrity constraint,
                // 54: program limit exceeded (e.g. a value too large).
                c.starts_with("22") || c.starts_with("23") || c.starts_with("54")
            }),
            StoreError::Sql(_) | StoreError::SessionLost(_) => false,
            _ => true,
        }
    }

    /// Whether the database aborted the transaction for another one's sake (a deadlock broken,
    /// a serialization failure): the same transaction run again may well commit.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Sql(sqlx::Error::Database(d))
                 if matches!(d.code().as_deref(), Some("40P01") | Some("40001"))
                    // An object another transaction registered after this one looked for it
                    // (two starts on a new object at once): run again, it is found.
                    || (d.code().as_deref() == Some("23505")
                        && d.constraint() == Some("objects_pkey")))
    }
}

/// `once` run again, up to three more times, while the database aborts it for another
/// transaction's sake ([`StoreError::is_conflict`]): for a write whose transaction left nothing
/// behind when aborted, and which means the same when run again (an upsert, a delete).
pub(crate) async fn again_on_conflict<T, F, Fut>(mut once: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match once().await {
            Err(e) if tries < 3 && e.is_conflict() => tries += 1,
            done => return done,
        }
    }
}

/// Starts a trace for a new workflow and returns its W3C `traceparent`, or `None` when
/// nothing is traced: (object, template, version, lane). The store keeps the answer on the
/// workflow row; it does not know how traces are made.
pub type TraceStart = fn(&str, &str, i32, &str) -> Option<String>;

/// Handle on the workdo schema.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
    trace_start: Option<TraceStart>,
    /// Claims commit without waiting for the WAL flush (`--async-claims`).
    async_claims: bool,
    /// Template versions by id, parsed (shared by clones; see [`Store::spec_by_id`]).
    specs: templates::SpecCache,
    /// Machine jobs as this process last wrote them (store/machine/unlocked.rs).
    jobs: machine::WrittenJobs,
}

impl Store {
    pub fn new(pool: PgPool) -> Self {
        Store {
            pool,
            trace_start: None,
            async_claims: false,
            specs: templates::SpecCache::default(),
            jobs: machine::WrittenJobs::default(),
        }
    }

    /// Claims commit without waiting for the WAL flush (ARCHITECTURE.md "Decisions"): faster
    /// claims; a claim lost with a crash or a failover lets its step's function run once more
    /// (its completion is never committed twice, and that call is not counted as an attempt).
    pub fn with_async_claims(mut self, on: bool) -> Self {
        self.async_claims = on;
        self
    }

    /// New workflows get a trace from `start`.
    pub fn traced(mut self, start: TraceStart) -> Self {
        self.trace_start = Some(start);
        self
    }

    /// The same database through a pool of its own for API requests: at most half this pool's
    /// connections (two at least), each request waiting at most 3 s for one, so a database
    /// that is down or saturated is answered 503 in seconds instead of after 30. Connects lazily.
    /// Its statements wait at most [`db::REQUEST_LOCK_TIMEOUT`] for a lock and run at most
    /// [`db::REQUEST_STATEMENT_TIMEOUT`] (then 503 too).
    pub fn for_requests(&self) -> Store {
        let max = (self.pool.options().get_max_connections() / 2).max(2);
        let pool = db::request_pool_options(max)
            .acquire_timeout(std::time::Duration::from_secs(3))
            .connect_lazy_with((*self.pool.connect_options()).clone());
        // After a failover the main pool is pointed at the new primary (`hosts::follow`); this
        // one follows it within a second.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (main, requests) = (self.pool.clone(), pool.clone());
            rt.spawn(async move {
                let mut seen = main.connect_options();
                while !main.is_closed() && !requests.is_closed() {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    let now = main.connect_options();
                    if !std::sync::Arc::ptr_eq(&now, &seen) {
                        requests.set_connect_options((*now).clone());
                        seen = now;
                    }
                }
            });
        }
        Store {
            pool,
            trace_start: self.trace_start,
            async_claims: self.async_claims,
            specs: self.specs.clone(),
            jobs: self.jobs.clone(),
        }
    }

    /// The server's connection room: `max_connections`, the connections reserved for
    /// superusers, and the connections open now (all databases).
    pub async fn connection_room(&self) -> Result<(i64, i64, i64)> {
        Ok(sqlx::query_as(
            "select current_setting('max_connections')::bigint,
                    current_setting('superuser_reserved_connections')::bigint,
                    (select count(*) from pg_stat_activity where backend_type = 'client backend')",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// When the database is reached through PgBouncer and its console answers this user (an
    /// `admin_users` or `stats_users` name, or `auth_type = any`): the server connections it
    /// pools for each user and database (`default_pool_size`). `None` when there is no
    /// PgBouncer in between, or it does not say.
    pub async fn pooler_pool_size(&self) -> Option<i64> {
        use sqlx::{ConnectOptions, Row};
        let opts = (*self.pool.connect_options()).clone().database("pgbouncer");
        let mut conn = tokio::time::timeout(std::time::Duration::from_secs(3), opts.connect())
            .await
            .ok()?
            .ok()?;
        // The console speaks the simple protocol only.
        let rows = sqlx::raw_sql("SHOW CONFIG").fetch_all(&mut conn).await.ok();
        let _ = sqlx::Connection::close(conn).await;
        rows?.iter().find_map(|r| {
            let key: String = r.try_get("key").ok()?;
            let value: String = r.try_get("value").ok()?;
            (key == "default_pool_size").then(|| value.trim().parse().ok())?
        })
    }

    /// Whether the database answers a trivial query.
    ///
    /// # Errors
    /// When it does not.
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("select 1").execute(&self.pool).await?;
        Ok(())
    }

    /// A connection listening on [`READY_CHANNEL`], for the runtime's listener.
    ///
    /// # Errors
    /// When the server cannot be reached.
    pub async fn ready_listener(&self) -> Result<sqlx::postgres::PgListener> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener
            .listen_all([
                READY_CHANNEL,
                machine::SIGNAL_CHANNEL,
                templates::TEMPLATES_CHANNEL,
            ])
            .await?;
        Ok(listener)
    }
}

/// One step row, as every read returns it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct StepRow {
    pub id: i64,
    pub workflow_id: i64,
    pub object_id: String,
    pub template: String,
    pub version: i32,
    pub lane: String,
    pub active: bool,
    pub name: String,
    pub status: String,
    pub prereqs: Vec<String>,
    pub pending: i32,
    pub priority: i32,
    pub run_at: DateTime<Utc>,
    pub attempts: i32,
    pub max_attempts: i32,
    pub lifecycle: Option<String>,
    pub note: Option<String>,
    pub error_message: Option<String>,
    pub error_text: Option<String>,
    pub elapsed: Option<f64>,
    pub lease_owner: Option<String>,
    pub lease_token: Option<Uuid>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// A generated step's claim key, `TEMPLATE:BRICKLET/STEP` (dynamic dispatch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Where a generated step came from: `{generator, bricklet, instance}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub generated: Option<serde_json::Value>,
}

/// `id` in its one spelling ([`crate::model::object_id`]), or [`StoreError::ObjectId`].
pub fn object_id(id: &str) -> Result<String> {
    crate::model::object_id::normalize(id).map_err(StoreError::ObjectId)
}

/// Lanes: like template names.
pub fn check_lane(lane: &str) -> Result<()> {
    if !crate::model::template::valid_name(lane) {
        return Err(StoreError::Invalid {
            field: "lane",
            value: lane.chars().take(80).collect(),
            reason: "use letters, digits and -_. (at most 100)",
        });
    }
    Ok(())
}
