//! A plan applied: each effect of a transition (`model/machine/plan.rs`) written in the
//! transaction of the transition, then the job's record; and a job's start.

use chrono::Utc;
use serde_json::{Map, Value, json};
use sqlx::{Postgres, Transaction};

use super::inbox::notify_signals;
use super::outcome::Stop;
use super::row::Job;
use crate::model::machine::plan::{self, Effect, Plan};
use crate::model::status::Status;
use crate::model::template::Template;
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};
use crate::store::{Change, Result, Store, StoreError};

/// Transitions a job may take in a row on signals it sent itself: past this, its next one is
/// refused (`signal_refused`, saying why) and the loop ends; a signal from outside starts the
/// count again. The CLI's own bound on following a signal is 1,000 transitions; this one holds
/// in the runtime too, which takes an inbox for ever otherwise.
pub const MAX_SELF_RUN: i64 = 1_000;

/// How deep children may nest (a parent, its child, the child's child, …).
pub(super) const MAX_FORK_DEPTH: i32 = 16;

/// Most jobs forked in one transaction, children of children included (a machine whose children
/// fork children can otherwise fan out to thousands of jobs in one long transaction).
pub const MAX_FORKS_PER_TRANSACTION: i32 = 100;

/// What a transition collects besides its rows, written at its end.
pub(super) struct Effects<'e> {
    pub(super) events: &'e mut EventBuf,
    pub(super) ready: &'e mut ReadyKeys,
    /// Jobs whose inbox got a signal: notified at commit.
    pub(super) signalled: Vec<i64>,
    /// The inbox signal this transition takes, if it is one (an alarm's that rang it is not
    /// cancelled by the transition leaving the alarm's state).
    pub(super) taking: Option<i64>,
}

/// Skip workflow `id`'s steps that have not finished, through the one status path (each with
/// its `skipped` event and `note`).
pub(super) async fn skip_pending(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    note: &str,
    actor: &str,
) -> Result<()> {
    let pending: Vec<i64> = sqlx::query_scalar(
        "select id from workdo.steps
          where workflow_id = $1 and status not in ('completed', 'skipped')
          order by id for update",
    )
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    let changes: Vec<Change> = pending
        .into_iter()
        .map(|step| {
            let mut c = Change::new(step, Status::Skipped, "skipped");
            c.note = Some(note.to_string());
            c
        })
        .collect();
    Store::steps_apply(tx, &changes, actor).await?;
    Ok(())
}

/// The job's state and variables; a final state completes the workflow (its `unfinished` unit).
pub(super) async fn write_record(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    state: &str,
    vars: &Map<String, Value>,
    finished: bool,
    actor: &str,
) -> Result<()> {
    // A final state ends the job: function actions still pending are skipped (their results
    // could only be refused by a finished job) through the one status path, each with its
    // `skipped` event, before the workflow is completed.
    if finished {
        let note = format!("the job reached its final state {state}");
        skip_pending(tx, id, &note, actor).await?;
    }
    // `self_run`: transitions taken in a row on the job's own signals (see MAX_SELF_RUN).
    sqlx::query(
        "update workdo.workflows
            set machine = coalesce(machine, '{}'::jsonb)
                          || jsonb_build_object('state', $2::text, 'variables', $3::jsonb,
                                                'self_run', case when $5 = 'self'
                                                    then coalesce((machine ->> 'self_run')::int, 0) + 1
                                                    else 0 end),
                unfinished = case when $4 then 0 else unfinished end,
                status = case when $4 then 'completed' else status end,
                completed_at = case when $4 then now() else completed_at end
          where id = $1",
    )
    .bind(id)
    .bind(state)
    .bind(Value::Object(vars.clone()))
    .bind(finished)
    .bind(actor)
    .execute(&mut **tx)
    .await?;
    // Alarms of a finished job will never matter.
    if finished {
        sqlx::query(
            "update workdo.alarms set cancelled_at = now()
              where workflow_id = $1 and fired_at is null and cancelled_at is null",
        )
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Inserted into `signals`, the NOTIFY sent at commit.
pub(super) async fn enqueue(
    tx: &mut Transaction<'_, Postgres>,
    fx: &mut Effects<'_>,
    job: i64,
    signal: &str,
    data: &Value,
    actor: &str,
) -> Result<()> {
    super::inbox::insert_signal(tx, job, signal, data, actor).await?;
    fx.signalled.push(job);
    Ok(())
}

/// An event of `job` (its object, workflow, template and version).
pub(super) fn job_event<'a>(
    job: &'a Job,
    kind: &'a str,
    actor: &'a str,
    detail: Value,
) -> NewEvent<'a> {
    NewEvent::new(&job.object_id, kind, actor)
        .workflow(job.id)
        .template(&job.template)
        .version(job.version)
        .detail(detail)
}

/// The event a plan's [`Effect::Event`] records of `job` (`None` for any other effect).
pub(super) fn plan_event<'a>(job: &'a Job, effect: &'a Effect) -> Option<NewEvent<'a>> {
    let Effect::Event {
        kind,
        actor,
        status,
        detail,
    } = effect
    else {
        return None;
    };
    let e = job_event(job, kind, actor, detail.clone());
    Some(match status {
        Some(s) => e.status(s),
        None => e,
    })
}

/// [`Stop::Failed`] when `plan` would leave the job's variables over
/// [`super::outcome::MAX_VARIABLES_BYTES`].
pub(super) fn variables_fit(plan: &Plan) -> std::result::Result<(), Stop> {
    let size = serde_json::to_vec(&plan.variables).map_or(0, |v| v.len());
    if size > super::outcome::MAX_VARIABLES_BYTES {
        return Err(Stop::Failed(format!(
            "the state variables would take {size} bytes, over the limit of {}",
            super::outcome::MAX_VARIABLES_BYTES
        )));
    }
    Ok(())
}

impl Store {
    /// Apply `plan` (from [`plan::transition`] or [`plan::start`]) to `job` in `tx`: its
    /// effects in order, then the job's record. `template` is the machine's name (its call
    /// steps' queue). Fails with [`Stop::Failed`] when a fork passes the limits or cannot
    /// start; the caller rolls back. The plan's variables are checked where it is made
    /// ([`variables_fit`]).
    pub(super) async fn apply_plan(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        job: &Job,
        template: &str,
        plan: &Plan,
        fx: &mut Effects<'_>,
    ) -> std::result::Result<(), Stop> {
        fn fired<'a>(job: &'a Job, f: &plan::Fired, action: &str, params: Value) -> NewEvent<'a> {
            job_event(
                job,
                "action_fired",
                "machine",
                json!({"state": f.state, "association": f.association, "action": action,
                       "parameters": params}),
            )
        }
        // Whether the job has alarms to cancel: those set before, or by this plan.
        let mut alarms = job.alarms_pending;
        for effect in &plan.effects {
            match effect {
                Effect::Event { .. } => {
                    if let Some(e) = plan_event(job, effect) {
                        fx.events.push(e);
                    }
                }
                Effect::Signal {
                    to,
                    signal,
                    data,
                    actor,
                } => enqueue(tx, fx, to.unwrap_or(job.id), signal, data, actor).await?,
                Effect::Alarm {
                    signal,
                    due_at,
                    state,
                } => {
                    sqlx::query(
                        "insert into workdo.alarms (workflow_id, state, signal, due_at) values ($1, $2, $3, $4)",
                    )
                    .bind(job.id)
                    .bind(state)
                    .bind(signal)
                    .bind(due_at)
                    .execute(&mut **tx)
                    .await?;
                    alarms = true;
                    // The runtime's alarm loop hears of it (it may be due before its next look).
                    fx.signalled.push(job.id);
                }
                // Leaving a state cancels its alarms, those that have rung too while their
                // signal still waits in the inbox: taken later it moved the job on from a state
                // the alarm was never set in (a job escalated, then expired by the old state's
                // alarm; an extension re-entering a state, then ended by the alarm it replaced).
                Effect::CancelAlarms { state } if alarms || job.inbox_pending => {
                    sqlx::query(
                        "with gone as (
                             update workdo.alarms a set cancelled_at = now()
                              where a.workflow_id = $1 and a.state = $2 and a.cancelled_at is null
                                -- All but those whose signal was taken (or is being taken now),
                                -- by the alarm row alone: one the alarm loop fires while this
                                -- waits for its lock (its signal not yet visible here) is
                                -- cancelled too, and refused when taken.
                                and not exists (select 1 from workdo.signals s
                                                 where s.workflow_id = $1 and s.actor = 'alarm'
                                                   and s.data ->> 'alarm' = a.id::text
                                                   and (s.processed_at is not null
                                                        or s.id is not distinct from $3))
                             returning a.id)
                         update workdo.signals s
                            set processed_at = now(),
                                outcome = 'refused: the alarm was set in ' || $2 || ', which the job left'
                           from gone g
                          where s.workflow_id = $1 and s.processed_at is null and s.actor = 'alarm'
                            and s.data ->> 'alarm' = g.id::text and s.id is distinct from $3",
                    )
                    .bind(job.id)
                    .bind(state)
                    .bind(fx.taking)
                    .execute(&mut **tx)
                    .await?;
                }
                // None set: nothing to cancel, and no statement to find that out.
                Effect::CancelAlarms { .. } => {}
                Effect::Fork {
                    template: child,
                    object,
                    context,
                    replace,
                    fired: at,
                } => {
                    let children = self
                        .fork(tx, job, (child, object, *replace), context)
                        .await?;
                    let params = json!({"template": child, "object": object, "children": children});
                    fx.events
                        .push(job_event(job, "child_started", "machine", params.clone()));
                    fx.events.push(fired(job, at, "fork", params));
                }
                Effect::Mail {
                    to,
                    subject,
                    body,
                    state,
                } => {
                    sqlx::query(
                        "insert into workdo.alert_outbox (kind, template, object_id, workflow_id, recipients, payload)
                         values ('mail', $1, $2, $3, $4, $5)",
                    )
                    .bind(&job.template)
                    .bind(&job.object_id)
                    .bind(job.id)
                    .bind(to)
                    .bind(json!({"subject": subject, "body": body, "object": job.object_id,
                                 "template": job.template, "state": state}))
                    .execute(&mut **tx)
                    .await?;
                }
                Effect::SignalChildren { signal } => {
                    let children: Vec<i64> = sqlx::query_scalar(
                        "insert into workdo.signals (workflow_id, signal, data, actor)
                         select id, $2, jsonb_build_object('parent', $1::bigint), 'parent:' || $1
                           from workdo.workflows
                          where parent_id = $1 and status <> 'completed' and machine is not null
                          order by id
                         returning workflow_id",
                    )
                    .bind(job.id)
                    .bind(signal)
                    .fetch_all(&mut **tx)
                    .await?;
                    fx.signalled.extend(children);
                }
                Effect::CancelChildren => {
                    let actor = format!("parent:{}", job.id);
                    let cancelled = self.cancel_children(tx, job.id, &actor, 0, fx).await?;
                    if !cancelled.is_empty() {
                        fx.events.push(job_event(
                            job,
                            "children_cancelled",
                            "machine",
                            json!({"children": cancelled}),
                        ));
                    }
                }
                Effect::Call {
                    function,
                    fired: at,
                } => {
                    let step = call(tx, job, template, function, &at.state).await?;
                    fx.ready.add(template, [&format!("call/{function}")]);
                    fx.events.push(fired(
                        job,
                        at,
                        "call",
                        json!({"function": function, "step": step}),
                    ));
                }
            }
        }
        let actor = plan
            .effects
            .iter()
            .find_map(|e| match e {
                Effect::Event { kind, actor, .. } if *kind == "signal_received" => {
                    Some(actor.as_str())
                }
                _ => None,
            })
            .unwrap_or("machine");
        write_record(tx, job.id, &plan.to, &plan.variables, plan.finished, actor).await?;
        Ok(())
    }

    /// A machine job just started (inside the start's transaction): its initial state entered
    /// and that state's enter actions run. If one fails, the start fails.
    pub(crate) async fn machine_started(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        events: &mut EventBuf,
        ready: &mut ReadyKeys,
        workflow_id: i64,
        spec: &Template,
    ) -> Result<()> {
        let Some(m) = &spec.machine else {
            return Ok(());
        };
        let vars: Map<String, Value> = m.variables.clone().into_iter().collect();
        write_record(tx, workflow_id, &m.initial, &vars, false, "machine").await?;
        // Already locked: the start's transaction inserted it.
        let Some(job) = super::row::load_job(&mut *tx, workflow_id, "").await? else {
            return Ok(());
        };
        let view = plan::Job {
            id: job.id,
            object: &job.object_id,
            template: &job.template,
            parent: job.parent_id,
            context: &job.context,
            state: &m.initial,
            variables: vars,
            finished: false,
            children_running: 0,
        };
        let rolled_back = |reason: String| {
            StoreError::TransitionRolledBack(format!(
                "starting {} in {}: {reason}",
                spec.name, m.initial
            ))
        };
        let plan = match plan::start(m, &view, Utc::now()) {
            Ok(p) => p,
            Err(plan::Refusal::NotAccepted(r) | plan::Refusal::Rollback(r)) => {
                return Err(rolled_back(r));
            }
        };
        let mut fx = Effects {
            events,
            ready,
            signalled: Vec::new(),
            taking: None,
        };
        // A transition's plan is checked where it is made (`plan_for`); a start's here.
        let applied = match variables_fit(&plan) {
            Ok(()) => self.apply_plan(tx, &job, &spec.name, &plan, &mut fx).await,
            Err(stop) => Err(stop),
        };
        match applied {
            Ok(()) => {}
            Err(Stop::Failed(reason) | Stop::NotAccepted(reason)) => {
                return Err(rolled_back(reason));
            }
            Err(Stop::Db(e)) => return Err(e),
        }
        let signalled = std::mem::take(&mut fx.signalled);
        notify_signals(tx, &signalled).await?;
        Ok(())
    }
}

/// A `call` action's step: `call/FUNCTION#n`, ready now, one more unit of the job's work.
async fn call(
    tx: &mut Transaction<'_, Postgres>,
    job: &Job,
    template: &str,
    function: &str,
    state: &str,
) -> Result<String> {
    let n: i64 = sqlx::query_scalar(
        "select count(*) + 1 from workdo.steps where workflow_id = $1 and generated ->> 'call' = $2",
    )
    .bind(job.id)
    .bind(function)
    .fetch_one(&mut **tx)
    .await?;
    let name = format!("call/{function}#{n}");
    let limit = i32::try_from(crate::model::template::DEFAULT_ERROR_LIMIT).unwrap_or(3);
    sqlx::query(concat!(
        "with ",
        crate::store::counts::steps_counted!(),
        ", ins as (insert into workdo.steps
            (workflow_id, object_id, template, version, lane, name, status, pending,
             priority, max_attempts, queue, generated)
         select $1, $2, $3, $4, $5, $6, 'ready', 0, $7, $8, $9, $10 from counted
         returning template, name, status, id, active)",
        crate::store::counts::count_inserted!()
    ))
    .bind(job.id)
    .bind(&job.object_id)
    .bind(&job.template)
    .bind(job.version)
    .bind(&job.lane)
    .bind(&name)
    .bind(job.priority)
    .bind(limit)
    .bind(format!("{template}:call/{function}"))
    .bind(json!({"call": function, "state": state}))
    .execute(&mut **tx)
    .await?;
    sqlx::query("update workdo.workflows set unfinished = unfinished + 1 where id = $1")
        .bind(job.id)
        .execute(&mut **tx)
        .await?;
    Ok(name)
}
