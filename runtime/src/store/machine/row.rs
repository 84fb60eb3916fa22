//! A machine job as a transition reads it: its row, and what the row does not hold (its
//! children still running, its inbox, its alarms). The SQL for those three is written once,
//! here, for the read and for the unlocked write that checks them (`unlocked.rs`).

use serde_json::Value;

use crate::store::Result;

/// Children of job `w` not yet completed (a transition's `children_running`).
macro_rules! children_running {
    () => {
        "(select count(*) from workdo.workflows c
           where c.parent_id = w.id and c.status <> 'completed')"
    };
}

/// Whether job `w`'s inbox holds signals not yet taken.
macro_rules! inbox_pending {
    () => {
        "exists(select 1 from workdo.signals s
                 where s.workflow_id = w.id and s.processed_at is null)"
    };
}

/// Whether job `w` has alarms set, neither fired nor cancelled.
macro_rules! alarms_pending {
    () => {
        "exists(select 1 from workdo.alarms a
                 where a.workflow_id = w.id and a.fired_at is null and a.cancelled_at is null)"
    };
}

/// A job's record (`workflows.machine`) read once, as a view of it: the state, variables and
/// flags borrowed, not copied (a job's variables may hold a MiB). Keys it does not name stay
/// with the record the plan writes back.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MachineRecord<'a> {
    pub(crate) state: &'a str,
    variables: Option<&'a serde_json::Map<String, Value>>,
    pub(crate) suspended: bool,
    pub(crate) cancelled: bool,
    /// Transitions the job has made by signalling itself in a row (`MAX_SELF_RUN` bounds it).
    pub(crate) self_run: i64,
}

impl<'a> MachineRecord<'a> {
    /// `record` read field by field: a field missing or of another type reads as its default
    /// (no state, no variables, neither suspended nor cancelled) and the others as they are.
    pub(crate) fn read(record: &'a Value) -> MachineRecord<'a> {
        MachineRecord {
            state: record["state"].as_str().unwrap_or_default(),
            variables: record["variables"].as_object(),
            suspended: record["suspended"].as_bool().unwrap_or(false),
            cancelled: record["cancelled"].as_bool().unwrap_or(false),
            self_run: record["self_run"].as_i64().unwrap_or(0),
        }
    }

    /// The job's state variables, copied out.
    pub(crate) fn variables(&self) -> serde_json::Map<String, Value> {
        self.variables.cloned().unwrap_or_default()
    }
}

/// A machine job as a transition reads it (under its lock, or not: `unlocked.rs`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub(super) struct Job {
    pub(super) id: i64,
    pub(super) object_id: String,
    pub(super) template: String,
    pub(super) template_id: i64,
    pub(super) version: i32,
    pub(super) status: String,
    pub(super) lane: String,
    pub(super) priority: i32,
    pub(super) context: Value,
    pub(super) machine: Option<Value>,
    pub(super) parent_id: Option<i64>,
    /// Children not yet completed (a transition's `children_running`).
    pub(super) children_running: i64,
    /// Signals wait in the job's inbox (read with the job: no round trip of its own).
    pub(super) inbox_pending: bool,
    /// Alarms are set and neither fired nor cancelled (so leaving a state has some to cancel).
    pub(super) alarms_pending: bool,
    /// The row version read (`xmin`): a write conditioned on it applies only if nothing
    /// changed the job since.
    pub(super) row_version: i64,
    /// Its template version's SHA-256: what a cached description must match.
    pub(super) template_sha256: String,
}

impl Job {
    /// Its record typed (`None`: not a machine job).
    pub(super) fn record(&self) -> Option<MachineRecord<'_>> {
        self.machine.as_ref().map(MachineRecord::read)
    }
}

/// A machine job's row with what a transition reads besides: its children still running, its
/// inbox and alarms, its row version and its template version's SHA-256.
const JOB: &str = concat!(
    "select w.id, w.object_id, w.template, w.template_id, w.version, w.status, w.lane,
            w.priority, w.context, w.machine, w.parent_id, ",
    children_running!(),
    " as children_running, ",
    inbox_pending!(),
    " as inbox_pending, ",
    alarms_pending!(),
    " as alarms_pending,
                w.xmin::text::bigint as row_version,
                (select t.sha256 from workdo.templates t where t.id = w.template_id) as template_sha256
           from workdo.workflows w where w.id = $1"
);

/// Job `id`, locked as `lock` says (`for update`, or `for update skip locked`: then `None` when
/// another transaction holds it, as when there is no such workflow), or read unlocked (`""`).
///
/// Locked, the lock is taken by a statement of its own and the job read by the next: a
/// statement that waits for a row lock gets the row's new version but evaluates its subqueries
/// (children, inbox, alarms) in the snapshot it started with, from before the transaction it
/// waited for — a job whose alarm that transaction set would read as having none.
pub(super) async fn load_job(
    conn: &mut sqlx::PgConnection,
    id: i64,
    lock: &str,
) -> Result<Option<Job>> {
    if !lock.is_empty() {
        let locked: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "select id from workdo.workflows where id = $1{lock}"
        )))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
        if locked.is_none() {
            return Ok(None);
        }
    }
    Ok(sqlx::query_as(JOB).bind(id).fetch_optional(conn).await?)
}
