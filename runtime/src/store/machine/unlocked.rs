//! A signal's transition planned from the job as read and written in one statement that
//! applies only if the job has not changed since (its row version, `xmin`): two round trips
//! instead of a transaction's five (begin, lock, write the record, write the events, commit).
//!
//! Taken only by a transition whose effects are events alone (the common case: a signal that
//! moves the job or its variables). Anything else — a refusal, an action with effects of its
//! own, a final state, a suspended job, or a job that changed between the read and the write —
//! goes the locked way ([`Store::deliver`]), which decides it afresh under the lock.
//!
//! The job as this process last wrote it is kept ([`WrittenJobs`]), so that the next signal to
//! it is planned without reading it: one round trip. The write checks everything the plan read
//! that the row's version does not cover (children running, alarms set), and returns whether the
//! inbox holds signals; a job written elsewhere since fails the check and is read afresh.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::outcome::{MAX_SIGNAL_DATA_BYTES, Moved, Stop};
use super::row::{Job, load_job};
use crate::model::machine::{self, plan::Effect};
use crate::model::template::Template;
use crate::store::history::events::EventBuf;
use crate::store::{Result, Store};

/// The transition `signal` makes of `job`, planned and not yet applied (nothing is written):
/// [`Stop::NotAccepted`] or [`Stop::Failed`] when it is refused or would roll back.
pub(super) fn plan_for(
    job: &Job,
    spec: &Template,
    signal: &str,
    data: &Value,
    actor: &str,
) -> std::result::Result<machine::plan::Plan, Stop> {
    let refuse = |why: String| Err(Stop::NotAccepted(why));
    let Some(m) = &spec.machine else {
        return refuse(format!("{} is not a machine", job.template));
    };
    let Some(record) = job.record() else {
        return refuse(format!("workflow {} is not a machine job", job.id));
    };
    let size = serde_json::to_vec(data).map_or(0, |v| v.len());
    if size > MAX_SIGNAL_DATA_BYTES {
        return refuse(format!(
            "the signal's data has {size} bytes, over the limit of {MAX_SIGNAL_DATA_BYTES}"
        ));
    }
    let view = machine::plan::Job {
        id: job.id,
        object: &job.object_id,
        template: &job.template,
        parent: job.parent_id,
        context: &job.context,
        state: record.state,
        variables: record.variables(),
        finished: job.status == "completed",
        children_running: job.children_running,
    };
    let sig = machine::plan::Signal {
        name: signal,
        actor,
        data,
    };
    let plan = match machine::plan::transition(m, &view, sig, chrono::Utc::now()) {
        Ok(p) => p,
        Err(machine::plan::Refusal::NotAccepted(why)) => return Err(Stop::NotAccepted(why)),
        Err(machine::plan::Refusal::Rollback(why)) => return Err(Stop::Failed(why)),
    };
    // Checked before anything is written, so that it rolls back like any refusal.
    super::actions::variables_fit(&plan)?;
    Ok(plan)
}

/// The job's new record and the plan's events, written only while the job's row is the version
/// planned from, holds what the plan read (its record, context, status, parent, template
/// version: a kept job must not rely on `xmin` alone, a 32-bit id that a failover losing
/// commits can hand out again), and its children running and alarms set are as the plan saw
/// them (the same SQL as the read, `row.rs`); returns the row's new version (none when nothing
/// was written) and whether its inbox holds signals. The events' ten arrays are bound as
/// $4–$13, in [`EventBuf::bind_to`]'s order.
const WRITE_IF_UNCHANGED: &str = concat!(
    "
    with job as (
        update workdo.workflows w set machine = $2::jsonb
         where id = $1 and xmin = $3::text::xid
           and ",
    children_running!(),
    " = $14 and ",
    alarms_pending!(),
    " = $15
           and status = $16 and parent_id is not distinct from $17 and template_id = $18
           and version = $19 and lane = $20 and priority = $21
           and context = $22::jsonb and machine = $23::jsonb
        returning id, xmin::text::bigint as row_version
    ), written as (
        insert into workdo.events
            (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
        select t.object_id, t.workflow_id, t.template, t.version, t.step, t.kind, t.status,
               t.attempt, t.actor, nullif(t.detail, 'null'::jsonb)
          from job,
               unnest($4::text[], $5::bigint[], $6::text[], $7::int[], $8::text[], $9::text[],
                      $10::text[], $11::int[], $12::text[], $13::jsonb[])
                 as t(object_id, workflow_id, template, version, step, kind, status, attempt,
                      actor, detail)
    )
    select (select row_version from job), ",
    inbox_pending!(),
    " from (select $1::bigint as id) w"
);

/// Jobs as this process last wrote them by a signal without a lock, shared by a store's clones.
/// Bounded: past [`WrittenJobs::MAX`] jobs one goes, and a job whose context and record are
/// large is not kept. A job whose kept version failed its write (another process, a child, an
/// alarm or the runtime changed it since) is not kept again, so jobs signalled by turns through
/// several processes pay at most one wasted round trip each.
#[derive(Debug, Clone, Default)]
pub(crate) struct WrittenJobs(Arc<Mutex<Kept>>);

#[derive(Debug, Default)]
struct Kept {
    jobs: HashMap<i64, Job>,
    elsewhere: HashSet<i64>,
}

impl WrittenJobs {
    const MAX: usize = 2048;
    /// Context and record together, in bytes of JSON, above which a job is not kept (parsed,
    /// JSON takes several times its text's size).
    const MAX_BYTES: usize = 4096;

    fn get(&self, id: i64) -> Option<Job> {
        self.0.lock().ok()?.jobs.get(&id).cloned()
    }

    fn keep(&self, job: Job) {
        let Ok(mut k) = self.0.lock() else { return };
        if k.elsewhere.contains(&job.id) {
            return;
        }
        let size =
            job.context.to_string().len() + job.machine.as_ref().map_or(0, |m| m.to_string().len());
        if size > Self::MAX_BYTES {
            k.jobs.remove(&job.id);
            return;
        }
        if k.jobs.len() >= Self::MAX
            && !k.jobs.contains_key(&job.id)
            && let Some(&any) = k.jobs.keys().next()
        {
            k.jobs.remove(&any);
        }
        k.jobs.insert(job.id, job);
    }

    /// Forget job `id`; `elsewhere`: because another process (or transaction) wrote it.
    pub(super) fn forget(&self, id: i64, elsewhere: bool) {
        let Ok(mut k) = self.0.lock() else { return };
        k.jobs.remove(&id);
        if elsewhere {
            if k.elsewhere.len() >= Self::MAX {
                k.elsewhere.clear();
            }
            k.elsewhere.insert(id);
        }
    }
}

impl Store {
    /// Signal `signal` to job `workflow_id` without a lock, if its transition allows (see the
    /// module): `Some` when it was applied, `None` when the locked way must take it.
    pub(super) async fn deliver_unlocked(
        &self,
        workflow_id: i64,
        (signal, data, actor): (&str, &Value, &str),
    ) -> Result<Option<Moved>> {
        let mut conn = self.pool.acquire().await?;
        // The job as last written here, then (when that is gone or stale) as read now.
        if let Some(job) = self.jobs.get(workflow_id) {
            match self
                .write_unlocked(&mut conn, job, (signal, data, actor))
                .await?
            {
                Written::Moved(moved) => return Ok(Some(moved)),
                Written::Stale => self.jobs.forget(workflow_id, true),
                Written::Locked => return Ok(None),
            }
        }
        let Some(job) = load_job(&mut conn, workflow_id, "").await? else {
            return Ok(None);
        };
        match self
            .write_unlocked(&mut conn, job, (signal, data, actor))
            .await?
        {
            Written::Moved(moved) => Ok(Some(moved)),
            Written::Stale | Written::Locked => Ok(None),
        }
    }

    /// Plan the signal from `job` and write it if it only records events and nothing changed.
    async fn write_unlocked(
        &self,
        conn: &mut sqlx::PgConnection,
        mut job: Job,
        (signal, data, actor): (&str, &Value, &str),
    ) -> Result<Written> {
        // Older signals waiting in the inbox are taken first: the locked way queues this one
        // behind them.
        if job.inbox_pending || job.record().is_none_or(|r| r.suspended) {
            return Ok(Written::Locked);
        }
        let spec = self
            .spec_by_id(&mut *conn, job.template_id, &job.template_sha256)
            .await?;
        let Ok(plan) = plan_for(&job, &spec, signal, data, actor) else {
            return Ok(Written::Locked);
        };
        let Some(events) = events_only(&job, &plan) else {
            return Ok(Written::Locked);
        };
        // The record as it will be: the one read, its state and variables those planned.
        let mut record = match &job.machine {
            Some(Value::Object(m)) => m.clone(),
            _ => serde_json::Map::new(),
        };
        record.insert("state".into(), Value::String(plan.to.clone()));
        record.insert("variables".into(), Value::Object(plan.variables.clone()));
        // A signal from outside (the only kind taken here) ends a run of self-signals.
        record.remove("self_run");
        let record = Value::Object(record);
        let (version, inbox): (Option<i64>, bool) = sqlx::FromRow::from_row(
            &events
                .bind_to(
                    sqlx::query(WRITE_IF_UNCHANGED)
                        .bind(job.id)
                        .bind(&record)
                        .bind(job.row_version.to_string()),
                )
                .bind(job.children_running)
                .bind(job.alarms_pending)
                .bind(&job.status)
                .bind(job.parent_id)
                .bind(job.template_id)
                .bind(job.version)
                .bind(&job.lane)
                .bind(job.priority)
                .bind(&job.context)
                .bind(&job.machine)
                .fetch_one(&mut *conn)
                .await?,
        )?;
        let Some(version) = version else {
            // The job changed since it was read: decided again under its lock.
            return Ok(Written::Stale);
        };
        job.machine = Some(record);
        job.row_version = version;
        job.inbox_pending = inbox;
        self.jobs.keep(job);
        Ok(Written::Moved(Moved {
            from: plan.from,
            to: plan.to,
            finished: false,
            queued: false,
            inbox,
        }))
    }
}

/// How a write without a lock went.
enum Written {
    Moved(Moved),
    /// The job changed since the version planned from.
    Stale,
    /// Not for the unlocked way (a refusal, effects, a suspended job): the locked way decides.
    Locked,
}

/// The plan's events, when events are all it does: no final state (which skips the job's
/// pending steps and cancels its alarms) and no other effect — an alarm cancelled on leaving
/// a state counts as none when the job has no alarms.
fn events_only(job: &Job, plan: &machine::plan::Plan) -> Option<EventBuf> {
    if plan.finished {
        return None;
    }
    let mut events = EventBuf::default();
    for effect in &plan.effects {
        match effect {
            Effect::Event { .. } => {
                if let Some(e) = super::actions::plan_event(job, effect) {
                    events.push(e);
                }
            }
            // Nothing to cancel: no alarm set, none rung and waiting in the inbox.
            Effect::CancelAlarms { .. } if !job.alarms_pending && !job.inbox_pending => {}
            _ => return None,
        }
    }
    Some(events)
}
