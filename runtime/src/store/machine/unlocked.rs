//! A signal's transition planned from the job as read and written in one statement that
//! applies only if the job has not changed since (its row version, `xmin`): two round trips
//! instead of a transaction's five (begin, lock, write the record, write the events, commit).
//!
//! Taken only by a transition whose effects are events alone (the common case: a signal that
//! moves the job or its variables). Anything else — a refusal, an action with effects of its
//! own, a final state, a suspended job, or a job that changed between the read and the write —
//! goes the locked way ([`Store::deliver`]), which decides it afresh under the lock.

use serde_json::Value;

use super::{Job, MAX_SIGNAL_DATA_BYTES, Moved, Stop, load_job};
use crate::model::machine::{self, plan::Effect};
use crate::model::template::Template;
use crate::store::events::EventBuf;
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
    let Some(record) = job.machine.clone() else {
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
        state: record["state"].as_str().unwrap_or_default(),
        variables: record["variables"].as_object().cloned().unwrap_or_default(),
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

/// The job's record and the plan's events, written only while the job's row is the version
/// read. The events' ten arrays are bound as $5–$14, in [`EventBuf::bind_to`]'s order.
const WRITE_IF_UNCHANGED: &str = "
    with job as (
        update workdo.workflows
           set machine = coalesce(machine, '{}'::jsonb)
                         || jsonb_build_object('state', $2::text, 'variables', $3::jsonb)
         where id = $1 and xmin = $4::text::xid
        returning id
    ), written as (
        insert into workdo.events
            (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
        select t.object_id, t.workflow_id, t.template, t.version, t.step, t.kind, t.status,
               t.attempt, t.actor, nullif(t.detail, 'null'::jsonb)
          from job,
               unnest($5::text[], $6::bigint[], $7::text[], $8::int[], $9::text[], $10::text[],
                      $11::text[], $12::int[], $13::text[], $14::jsonb[])
                 as t(object_id, workflow_id, template, version, step, kind, status, attempt,
                      actor, detail)
    )
    select count(*) from job";

impl Store {
    /// Signal `signal` to job `workflow_id` without a lock, if its transition allows (see the
    /// module): `Some` when it was applied, `None` when the locked way must take it.
    pub(super) async fn deliver_unlocked(
        &self,
        workflow_id: i64,
        (signal, data, actor): (&str, &Value, &str),
    ) -> Result<Option<Moved>> {
        let mut conn = self.pool.acquire().await?;
        let Some(job) = load_job(&mut conn, workflow_id, "").await? else {
            return Ok(None);
        };
        let record = job.machine.as_ref();
        if record.is_none_or(|m| m["suspended"].as_bool().unwrap_or(false)) {
            return Ok(None);
        }
        let spec = self
            .spec_in(&mut conn, job.template_id, &job.template_sha256)
            .await?;
        let Ok(plan) = plan_for(&job, &spec, signal, data, actor) else {
            return Ok(None);
        };
        let Some(events) = events_only(&job, &plan) else {
            return Ok(None);
        };
        let row = events
            .bind_to(
                sqlx::query(WRITE_IF_UNCHANGED)
                    .bind(job.id)
                    .bind(&plan.to)
                    .bind(Value::Object(plan.variables.clone()))
                    .bind(job.row_version.to_string()),
            )
            .fetch_one(&mut *conn)
            .await?;
        let written: i64 = sqlx::Row::try_get(&row, 0)?;
        if written == 0 {
            // The job changed since it was read: decided again under its lock.
            return Ok(None);
        }
        Ok(Some(Moved {
            from: plan.from,
            to: plan.to,
            finished: false,
            queued: false,
            inbox: job.inbox_pending,
        }))
    }
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
            Effect::CancelAlarms { .. } if !job.alarms_pending => {}
            _ => return None,
        }
    }
    Some(events)
}
