//! A step's status changes: `steps_apply` (one call of `workdo.apply`, the one path every change
//! takes), the WorkDo update call (`step_set`), promotion of due steps, the lease sweep, and the
//! row locks other wings take on an object's or a workflow's steps.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, PgConnection, Postgres, Transaction};
use uuid::Uuid;

use crate::model::status::Status;
use crate::store::{Result, StepRow, Store, StoreError};

/// A status change for one step, applied by [`Store::steps_apply`].
#[derive(Debug, Clone)]
pub struct Change {
    pub id: i64,
    /// Target status. `waiting`/`ready` become `ready`, `scheduled` or `waiting` as the step's
    /// prerequisites and start time say.
    pub status: Status,
    pub note: Option<String>,
    pub error_message: Option<String>,
    pub error_text: Option<String>,
    pub lifecycle: Option<String>,
    pub elapsed: Option<f64>,
    /// Due time for `scheduled` (defer) and `retrying` (back-off).
    pub run_at: Option<DateTime<Utc>>,
    /// Change to the attempts count: +1 for an exception reported from outside a worker's
    /// claim, -1 for a deferred or released claim that gives its attempt back.
    pub attempts_delta: i32,
    /// Apply only while the step is still held under this lease.
    pub lease: Option<Uuid>,
    /// Reset the attempts count (manual retry).
    pub reset_attempts: bool,
    pub event: &'static str,
    pub detail: Value,
}

impl Change {
    pub fn new(id: i64, status: Status, event: &'static str) -> Self {
        Change {
            id,
            status,
            note: None,
            error_message: None,
            error_text: None,
            lifecycle: None,
            elapsed: None,
            run_at: None,
            attempts_delta: 0,
            lease: None,
            reset_attempts: false,
            event,
            detail: Value::Null,
        }
    }
}

/// What a batch of changes did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Applied {
    /// Steps changed (ids), with their old and new status.
    pub changed: Vec<(i64, String, String)>,
    /// Ids in the batch that were skipped because their lease was lost.
    pub lost: Vec<i64>,
    /// Steps that became ready, as (workflow id, step name).
    pub ready: Vec<(i64, String)>,
    /// Workflows that completed.
    pub completed_workflows: Vec<i64>,
}

/// A step claimed by a worker.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Claimed {
    pub id: i64,
    pub workflow_id: i64,
    pub object_id: String,
    pub template: String,
    pub name: String,
    pub version: i32,
    pub lane: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub priority: i32,
    pub lease_token: Uuid,
    pub lease_expires_at: DateTime<Utc>,
    /// The object's properties when claimed.
    #[serde(skip)]
    pub properties: Value,
    /// The workflow's context when claimed.
    #[serde(skip)]
    pub context: Value,
    /// The workflow's trace (W3C traceparent), when traced.
    #[serde(skip)]
    pub trace_context: Option<String>,
}

/// Set one step's status from outside (CLI, API, web page): the WorkDo update call.
#[derive(Debug, Clone)]
pub struct SetRequest {
    pub object: String,
    pub template: String,
    pub step: String,
    pub status: String,
    pub note: Option<String>,
    pub error_message: Option<String>,
    pub error_text: Option<String>,
    pub lifecycle: Option<String>,
    pub elapsed: Option<f64>,
    /// Precondition: change only if the step's status is this one.
    pub current_status: Option<String>,
    /// Read `current_status` in the workflow service's words, with the hand-off in use
    /// (`Some(true)`) or not ([`Status::service_name`]); `None`: workdo's own words.
    pub service_words: Option<bool>,
    /// Object version; the active workflow when `None`.
    pub version: Option<i32>,
    pub actor: String,
}

impl SetRequest {
    pub fn new(object: &str, template: &str, step: &str, status: &str) -> Self {
        SetRequest {
            object: object.into(),
            template: template.into(),
            step: step.into(),
            status: status.into(),
            note: None,
            error_message: None,
            error_text: None,
            lifecycle: None,
            elapsed: None,
            current_status: None,
            service_words: None,
            version: None,
            actor: "workdo".into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SetOutcome {
    pub step: StepRow,
    /// Steps of the workflow that became ready through this change.
    pub next_steps: Vec<String>,
}

/// A row of `workdo.apply`: a changed step, a dependant whose counter moved, or a workflow
/// whose counter moved (`kind`); the columns the caller reports from.
#[derive(sqlx::FromRow)]
struct AppliedRow {
    kind: String,
    id: Option<i64>,
    workflow_id: i64,
    name: Option<String>,
    old_status: String,
    status: String,
}

/// The statement arguments $1–$14 of `workdo.apply` (named `p_ids` … `p_actor`): one array
/// element per change, one change per step (the last one given for a step wins), then the actor.
fn bind_changes<'q>(
    query: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    changes: &[&Change],
    actor: &str,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    fn each<T>(changes: &[&Change], f: impl Fn(&Change) -> T) -> Vec<T> {
        changes.iter().map(|c| f(c)).collect()
    }
    query
        .bind(each(changes, |c| c.id))
        .bind(each(changes, |c| c.status.as_str().to_string()))
        .bind(each(changes, |c| c.note.clone()))
        .bind(each(changes, |c| c.error_message.clone()))
        .bind(each(changes, |c| c.error_text.clone()))
        .bind(each(changes, |c| c.lifecycle.clone()))
        .bind(each(changes, |c| c.elapsed))
        .bind(each(changes, |c| c.run_at))
        .bind(each(changes, |c| c.attempts_delta))
        .bind(each(changes, |c| c.reset_attempts))
        .bind(each(changes, |c| c.lease))
        .bind(each(changes, |c| c.event.to_string()))
        .bind(each(changes, |c| c.detail.clone()))
        .bind(actor.to_string())
}

/// One change per step: the last one given for it wins. (`workdo.apply` takes them in id
/// order whatever order they come in: ARCHITECTURE.md, lock order.)
fn unique_changes<'a>(changes: impl IntoIterator<Item = &'a Change>) -> Vec<&'a Change> {
    let all: Vec<&Change> = changes.into_iter().collect();
    let mut seen = std::collections::HashSet::new();
    let mut unique: Vec<&Change> = all
        .into_iter()
        .rev()
        .filter(|c| seen.insert(c.id))
        .collect();
    unique.reverse();
    unique
}

/// What the rows of `workdo.apply` say about a batch of `changes`.
fn report(changes: &[&Change], rows: &[AppliedRow]) -> Applied {
    let mut applied = Applied::default();
    for r in rows {
        let moved = r.old_status != r.status;
        match (r.kind.as_str(), r.id) {
            ("step", Some(id)) => {
                applied
                    .changed
                    .push((id, r.old_status.clone(), r.status.clone()))
            }
            ("workflow", Some(id)) if moved && r.status == "completed" => {
                applied.completed_workflows.push(id);
            }
            _ => {}
        }
        if let ("step" | "dependant", Some(name)) = (r.kind.as_str(), &r.name)
            && moved
            && r.status == "ready"
        {
            applied.ready.push((r.workflow_id, name.clone()));
        }
    }
    let changed: std::collections::HashSet<i64> =
        applied.changed.iter().map(|(id, _, _)| *id).collect();
    applied.lost = changes
        .iter()
        .map(|c| c.id)
        .filter(|id| !changed.contains(id))
        .collect();
    applied
}

impl Store {
    /// Apply status changes, with every consequence — dependants' readiness, workflow
    /// completion, milestones, events, alert outbox, NOTIFY — in one statement (`workdo.apply`,
    /// migrations/engine/20_apply.sql), on a connection or in a transaction of the caller's.
    ///
    /// Changes carrying a lease apply only while the step is still `started` under it; the
    /// others are reported in [`Applied::lost`] and change nothing.
    pub(crate) async fn steps_apply<'a>(
        conn: &mut PgConnection,
        changes: impl IntoIterator<Item = &'a Change>,
        actor: &str,
    ) -> Result<Applied> {
        let changes = unique_changes(changes);
        if changes.is_empty() {
            return Ok(Applied::default());
        }
        let query = sqlx::query(
            "select * from workdo.apply(p_ids => $1, p_statuses => $2, p_notes => $3, p_messages => $4,
                                        p_texts => $5, p_lifecycles => $6, p_elapsed => $7,
                                        p_due => $8, p_attempts => $9, p_reset => $10,
                                        p_leases => $11, p_events => $12, p_details => $13,
                                        p_actor => $14)",
        );
        let rows = bind_changes(query, &changes, actor)
            .fetch_all(&mut *conn)
            .await?;
        let rows = rows
            .iter()
            .map(AppliedRow::from_row)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(report(&changes, &rows))
    }

    /// Set one step's status: the WorkDo update call. Honours a `current_status` precondition
    /// (a mismatch changes nothing), checks the status against the template the workflow is
    /// locked to, counts an attempt for `error`, and returns the steps that became ready.
    pub async fn step_set(&self, req: &SetRequest) -> Result<SetOutcome> {
        let mut tx = self.pool.begin().await?;
        let step = lock_step(&mut tx, &req.object, &req.template, &req.step, req.version).await?;
        // Read through this transaction's connection: a second one from the pool, taken while
        // this one is held, let two requests on a small pool wait on each other until the
        // pool's timeout (two concurrent updates on `workdo serve` both answered 503).
        let (template_id, sha256): (i64, String) = sqlx::query_as(
            "select w.template_id, t.sha256 from workdo.workflows w
               join workdo.templates t on t.id = w.template_id where w.id = $1",
        )
        .bind(step.workflow_id)
        .fetch_one(&mut *tx)
        .await?;
        let spec = self.spec_by_id(&mut *tx, template_id, &sha256).await?;
        // `queued` is the workflow service's word for a step a robot took into its queue. The
        // one place it is decided: with the hand-off in use (the service's routes say so) a
        // ready step is queued already, so `queued` is `ready`; a step a workdo function runs,
        // or one kept out of queues, has no robot to take it, so `queued` is `ready` there too
        // (it would wait for ever); otherwise a robot that polls keeps it as a status of its own.
        let robot_step = spec
            .step(&req.step)
            .is_some_and(|s| !s.is_run() && !s.skip_queue);
        let handed_off = req.service_words == Some(true);
        let wanted = if req.status == "queued" && (handed_off || !robot_step) {
            "ready"
        } else {
            req.status.as_str()
        };
        let Some(status) = Status::parse(wanted)
            .filter(|_| wanted == "queued" || spec.allows_status(&req.step, wanted))
        else {
            let declared = spec
                .step(&req.step)
                .map(|s| s.statuses.clone())
                .unwrap_or_default();
            let mut allowed: Vec<&str> = Status::BUILTIN.to_vec();
            allowed.extend(declared.iter().map(String::as_str));
            return Err(StoreError::InvalidStatus {
                step: format!("{}:{}", req.template, req.step),
                status: req.status.clone(),
                allowed: allowed.join(", "),
            });
        };
        let current = Status::parse(&step.status).unwrap_or(Status::Custom(step.status.clone()));
        // A precondition that is no status at all is a malformed request (400), not a mismatch.
        if let Some(expected) = &req.current_status
            && expected != "queued"
            && Status::parse(expected).is_none()
        {
            return Err(StoreError::InvalidStatus {
                step: format!("{}:{}", req.template, req.step),
                status: expected.chars().take(80).collect(),
                allowed: "a status name (waiting, queued, started, completed, error, …) as the precondition"
                    .into(),
            });
        }
        let skip_queue = spec.step(&req.step).is_some_and(|s| s.skip_queue);
        let holds = |expected: &str| match req.service_words {
            Some(handoff) => {
                current.service_name(skip_queue, handoff) == expected
                    || (!matches!(expected, "waiting" | "queued") && current.matches(expected))
            }
            None => current.matches(expected),
        };
        if let Some(expected) = &req.current_status
            && !holds(expected)
        {
            return Err(StoreError::StatusMismatch {
                step: format!("{}:{}", req.template, req.step),
                expected: expected.clone(),
                actual: current.workdo_name().to_string(),
                status: current.as_str().to_string(),
            });
        }
        // A time taken is a number of seconds, 0 or more: NaN, infinities and negatives were
        // stored and shown as null or "-5.000" (the XML route refused them, the others not).
        if let Some(e) = req.elapsed
            && !(e.is_finite() && e >= 0.0)
        {
            return Err(StoreError::Invalid {
                field: "elapsed",
                value: e.to_string(),
                reason: "must be a number of seconds, 0 or more",
            });
        }
        if let Some(lc) = &req.lifecycle
            && !crate::model::template::valid_name(lc)
        {
            return Err(StoreError::Invalid {
                field: "lifecycle",
                value: lc.clone(),
                reason: "use letters, digits and -_.",
            });
        }
        let mut change = Change::new(step.id, status.clone(), "status_set");
        change.note = req.note.clone();
        change.error_message = req.error_message.clone();
        change.error_text = req.error_text.clone();
        change.lifecycle = req.lifecycle.clone();
        change.elapsed = req.elapsed;
        change.attempts_delta = i32::from(status.is_error());
        let applied = Self::steps_apply(&mut tx, &[change], &req.actor).await?;
        // A machine's call step ended by hand tells its job, as the runtime's end of it does.
        if current != status && req.step.starts_with("call/") {
            crate::store::machine::calls_ended(&mut tx, &[step.id]).await?;
        }
        let row: StepRow = sqlx::query_as("select * from workdo.steps where id = $1")
            .bind(step.id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        let next_steps = applied
            .ready
            .into_iter()
            .filter(|(wf, _)| *wf == step.workflow_id)
            .map(|(_, name)| name)
            .filter(|name| name != &req.step)
            .collect();
        Ok(SetOutcome {
            step: row,
            next_steps,
        })
    }

    /// Make due `scheduled` and `retrying` steps ready. Returns how many.
    pub async fn steps_promote_due(&self, limit: i64) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let due: Vec<(i64, String)> = sqlx::query_as(
            "select id, status from workdo.steps
              where status in ('scheduled', 'retrying') and run_at <= now()
              order by run_at
              limit $1
                for update skip locked",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let changes: Vec<Change> = due
            .iter()
            .map(|(id, _)| Change::new(*id, Status::Ready, "due"))
            .collect();
        let n = Self::steps_apply(&mut tx, &changes, "workdo")
            .await?
            .changed
            .len();
        tx.commit().await?;
        Ok(n)
    }

    /// Steps whose lease expired (their worker died or hung) go back to the queue, or to
    /// `error` when that was their last attempt. Returns how many.
    pub async fn steps_sweep_leases(&self, limit: i64) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let expired: Vec<(i64, i32, i32, Option<String>)> = sqlx::query_as(
            "select id, attempts, max_attempts, lease_owner from workdo.steps
              where lease_token is not null and lease_expires_at < now()
              order by lease_expires_at
              limit $1
                for update skip locked",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        let changes: Vec<Change> = expired
            .iter()
            .map(|(id, attempts, max, owner)| {
                let last = attempts >= max;
                let mut c = Change::new(
                    *id,
                    if last { Status::Error } else { Status::Ready },
                    "lease_expired",
                );
                if last {
                    c.error_message = Some(format!(
                        "lease of {} expired on attempt {attempts} of {max}",
                        owner.as_deref().unwrap_or("a worker")
                    ));
                }
                c.detail = serde_json::json!({ "owner": owner });
                c
            })
            .collect();
        let n = Self::steps_apply(&mut tx, &changes, "workdo")
            .await?
            .changed
            .len();
        let last: Vec<i64> = expired
            .iter()
            .filter(|(_, attempts, max, _)| attempts >= max)
            .map(|e| e.0)
            .collect();
        crate::store::machine::calls_ended(&mut tx, &last).await?;
        tx.commit().await?;
        Ok(n)
    }
}

/// Workers' results must each name the lease they hold.
pub(crate) fn require_leases<'a>(changes: impl IntoIterator<Item = &'a Change>) -> Result<()> {
    match changes.into_iter().find(|c| c.lease.is_none()) {
        Some(c) => Err(StoreError::Invalid {
            field: "lease",
            value: c.id.to_string(),
            reason: "a worker's result must name the lease it holds",
        }),
        None => Ok(()),
    }
}

/// Lock the steps of object `object`'s workflows (of `template`, of `version`, of versions
/// older than `older`, when given), in id order, before deleting or deactivating those
/// workflows: `workdo.apply` takes a batch's steps before their workflows, and a delete that took
/// a workflow row first (its object's cascade, or its own delete) and then its steps (the
/// steps' trigger) deadlocked with a commit holding one of them.
pub(crate) async fn lock_steps_of_object(
    conn: &mut PgConnection,
    object: &str,
    template: Option<&str>,
    version: Option<i32>,
    older: Option<i32>,
) -> Result<()> {
    sqlx::query(
        "select 1 from workdo.steps s
          where s.workflow_id in (select w.id from workdo.workflows w
                                   where w.object_id = $1 and ($2::text is null or w.template = $2)
                                     and ($3::int is null or w.version = $3)
                                     and ($4::int is null or w.version < $4))
          order by s.id
            for update of s",
    )
    .bind(object)
    .bind(template)
    .bind(version)
    .bind(older)
    .execute(conn)
    .await?;
    Ok(())
}

/// [`lock_steps_of_object`] for workflow `id`.
pub(crate) async fn lock_steps_of_workflow(conn: &mut PgConnection, id: i64) -> Result<()> {
    sqlx::query("select 1 from workdo.steps where workflow_id = $1 order by id for update")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// The step `template:step` of the object's active workflow (or of `version`), locked.
async fn lock_step(
    tx: &mut Transaction<'_, Postgres>,
    object: &str,
    template: &str,
    step: &str,
    version: Option<i32>,
) -> Result<StepRow> {
    let row: Option<StepRow> = sqlx::query_as(
        "select s.* from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
          where w.object_id = $1 and w.template = $2 and s.name = $3
            and (($4::int is null and s.active) or s.version = $4)
          order by s.version desc
          limit 1
            for update of s",
    )
    .bind(object)
    .bind(template)
    .bind(step)
    .bind(version)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(row) = row {
        return Ok(row);
    }
    // Say what is missing, the outermost first: the object, its workflow, then the step.
    let (has_object, has_workflow): (bool, bool) = sqlx::query_as(
        "select exists (select 1 from workdo.objects where id = $1),
                exists (select 1 from workdo.workflows where object_id = $1 and template = $2
                          and (($3::int is null and active) or version = $3))",
    )
    .bind(object)
    .bind(template)
    .bind(version)
    .fetch_one(&mut **tx)
    .await?;
    if !has_object {
        return Err(StoreError::UnknownObject(object.into()));
    }
    Err(if has_workflow {
        StoreError::UnknownStep {
            template: template.into(),
            step: step.into(),
        }
    } else {
        StoreError::UnknownWorkflow {
            object: object.into(),
            template: template.into(),
        }
    })
}
