//! A transition's actions, and a job's start: each action's effect in the transaction of the
//! transition that runs it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use sqlx::{Postgres, Transaction};

use super::{Job, Stop, notify_signals};
use crate::model::machine::expr::{self, Scope};
use crate::model::machine::{self, Action, Fail, Machine};
use crate::model::template::Template;
use crate::store::events::{EventBuf, NewEvent, ReadyKeys};
use crate::store::workflows::StartRequest;
use crate::store::{Result, Store, StoreError};

/// How deep children may nest (a parent, its child, the child's child, …).
const MAX_FORK_DEPTH: i32 = 16;

/// Most jobs forked in one transaction, children of children included (a machine whose children
/// fork children can otherwise fan out to thousands of jobs in one long transaction).
pub const MAX_FORKS_PER_TRANSACTION: i32 = 100;

/// Names while a transition runs: state variables, then the job's context, then config; `now`,
/// `state`, `signal.name`, `signal.actor`, `signal.data…`.
pub(super) struct Ctx<'a> {
    vars: &'a Map<String, Value>,
    context: &'a Value,
    config: &'a BTreeMap<String, Value>,
    state: String,
    signal: Value,
    now: String,
}

impl Scope for Ctx<'_> {
    fn lookup(&self, path: &str) -> Option<Value> {
        let (head, rest) = match path.split_once('.') {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        let base = match head {
            "now" => Value::String(self.now.clone()),
            "state" => Value::String(self.state.clone()),
            "signal" => self.signal.clone(),
            _ => self
                .vars
                .get(head)
                .or_else(|| self.context.get(head))
                .or_else(|| self.config.get(head))
                .cloned()?,
        };
        match rest {
            None => Some(base),
            Some(r) => base.pointer(&format!("/{}", r.replace('.', "/"))).cloned(),
        }
    }
}

/// What a transition collects besides its rows, written at its end.
pub(super) struct Effects<'e> {
    pub(super) events: &'e mut EventBuf,
    pub(super) ready: &'e mut ReadyKeys,
    /// Jobs whose inbox got a signal: notified at commit.
    pub(super) signalled: Vec<i64>,
}

/// The job's state and variables; a final state completes the workflow (its `unfinished` unit).
pub(super) async fn write_record(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    state: &str,
    vars: &Map<String, Value>,
    finished: bool,
) -> Result<()> {
    // A final state ends the job: function actions still pending are skipped (their results
    // could only be refused by a finished job) and the workflow is completed.
    if finished {
        sqlx::query(
            "update workdo.steps
                set status = 'skipped', finished_at = now(), lease_owner = null, lease_token = null,
                    lease_expires_at = null, updated_at = now()
              where workflow_id = $1 and status not in ('completed', 'skipped')",
        )
        .bind(id)
        .execute(&mut **tx)
        .await?;
    }
    sqlx::query(
        "update workdo.workflows
            set machine = jsonb_build_object('state', $2::text, 'variables', $3::jsonb),
                unfinished = case when $4 then 0 else unfinished end,
                status = case when $4 then 'completed' else status end,
                completed_at = case when $4 then now() else completed_at end
          where id = $1",
    )
    .bind(id)
    .bind(state)
    .bind(Value::Object(vars.clone()))
    .bind(finished)
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

/// When an alarm is due: `in` a duration from now, or `at` a time.
fn due_of(
    al: &machine::Alarm,
    ctx: &Ctx<'_>,
    now: DateTime<Utc>,
) -> std::result::Result<DateTime<Utc>, String> {
    if let Some(d) = &al.after {
        let text = expr::text_of(&expr::eval_text(d, ctx)?);
        let secs = machine::duration_secs(&text)
            .ok_or_else(|| format!("alarm {}: {text:?} is not a duration", al.signal))?;
        let span = chrono::Duration::try_milliseconds((secs * 1000.0) as i64)
            .filter(|_| secs < 315_576_000.0)
            .ok_or_else(|| format!("alarm {}: {text:?} is too far away", al.signal))?;
        return Ok(now + span);
    }
    let text = al
        .at
        .as_ref()
        .map(|a| expr::eval_text(a, ctx).map(|v| expr::text_of(&v)))
        .transpose()?
        .unwrap_or_default();
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("alarm {}: {text:?} is not an RFC 3339 time: {e}", al.signal))
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
    super::insert_signal(tx, job, signal, data, actor).await?;
    fx.signalled.push(job);
    Ok(())
}

impl Store {
    /// Run `actions` (of `state`; `association` says `transition` or `enter`). Alarms are set in
    /// `owner`, the state they belong to (the target of the transition).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn fire(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        job: &Job,
        m: &Machine,
        template: &str,
        vars: &mut Map<String, Value>,
        state: &str,
        owner: &str,
        signal: &Value,
        actions: &[Action],
        association: &str,
        fx: &mut Effects<'_>,
    ) -> std::result::Result<(), Stop> {
        let now = Utc::now();
        for a in actions {
            let ctx = Ctx {
                vars,
                context: &job.context,
                config: &m.config,
                state: state.to_string(),
                signal: signal.clone(),
                now: now.to_rfc3339(),
            };
            let bad = |e: String| Stop::Failed(format!("{}: {e}", a.name()));
            let params: Value;
            match a {
                Action::Set(assign) => {
                    let mut out = Map::new();
                    for (k, v) in assign {
                        out.insert(k.clone(), expr::eval_value(v, &ctx).map_err(bad)?);
                    }
                    params = Value::Object(out.clone());
                    vars.extend(out);
                }
                Action::Signal(s) => {
                    let name = expr::text_of(&expr::eval_text(s, &ctx).map_err(bad)?);
                    params = json!({"signal": name});
                    enqueue(tx, fx, job.id, &name, &json!({}), "self").await?;
                }
                Action::SignalParent(s) => {
                    let name = expr::text_of(&expr::eval_text(s, &ctx).map_err(bad)?);
                    let Some(parent) = job.parent_id else {
                        return Err(Stop::Failed("signal-parent: this job has no parent".into()));
                    };
                    params = json!({"signal": name, "parent": parent});
                    let data =
                        json!({"child": job.id, "object": job.object_id, "template": job.template});
                    enqueue(tx, fx, parent, &name, &data, &format!("child:{}", job.id)).await?;
                }
                Action::Alarm(al) => {
                    let due = due_of(al, &ctx, now).map_err(bad)?;
                    params = json!({"signal": al.signal, "due_at": due, "state": owner});
                    sqlx::query(
                        "insert into workdo.alarms (workflow_id, state, signal, due_at) values ($1, $2, $3, $4)",
                    )
                    .bind(job.id)
                    .bind(owner)
                    .bind(&al.signal)
                    .bind(due)
                    .execute(&mut **tx)
                    .await?;
                    // The runtime's alarm loop hears of it (it may be due before its next look).
                    fx.signalled.push(job.id);
                    fx.events.push(
                        NewEvent::new(&job.object_id, "alarm_set", "machine")
                            .workflow(job.id)
                            .template(&job.template)
                            .version(job.version)
                            .detail(params.clone()),
                    );
                }
                Action::Fork(f) => {
                    if let Some(when) = &f.when
                        && !expr::truthy(&expr::eval(when, &ctx).map_err(bad)?)
                    {
                        params = json!({"template": f.template, "when": when, "forked": false});
                        fx.events.push(
                            NewEvent::new(&job.object_id, "action_fired", "machine")
                                .workflow(job.id)
                                .template(&job.template)
                                .version(job.version)
                                .detail(json!({"state": state, "association": association,
                                               "action": a.name(), "parameters": params})),
                        );
                        continue;
                    }
                    // Counted in the transaction itself (a transaction-local setting), so that
                    // nested starts — children forking children — add up.
                    let forked: i32 = sqlx::query_scalar(
                        "select set_config('workdo.forked',
                                (coalesce(nullif(current_setting('workdo.forked', true), ''), '0')::int + 1)::text,
                                true)::int",
                    )
                    .fetch_one(&mut **tx)
                    .await?;
                    if forked > MAX_FORKS_PER_TRANSACTION {
                        return Err(Stop::Failed(format!(
                            "fork {}: more than {MAX_FORKS_PER_TRANSACTION} jobs forked in one transition (children of children included)",
                            f.template
                        )));
                    }
                    // A machine that forks itself on start would recurse for ever.
                    let depth: i32 = sqlx::query_scalar(
                        "with recursive up(id, parent_id, d) as (
                             select id, parent_id, 1 from workdo.workflows where id = $1
                             union all
                             select w.id, w.parent_id, up.d + 1
                               from workdo.workflows w join up on w.id = up.parent_id
                              where up.d <= $2)
                         select max(d) from up",
                    )
                    .bind(job.id)
                    .bind(MAX_FORK_DEPTH)
                    .fetch_one(&mut **tx)
                    .await?;
                    if depth >= MAX_FORK_DEPTH {
                        return Err(Stop::Failed(format!(
                            "fork {}: jobs nest more than {MAX_FORK_DEPTH} deep",
                            f.template
                        )));
                    }
                    let object = match &f.object {
                        Some(o) => expr::text_of(&expr::eval_text(o, &ctx).map_err(bad)?),
                        None => job.object_id.clone(),
                    };
                    // Starting the same template on the same object replaces its workflow: here,
                    // the very job that forks.
                    if f.template == job.template && object == job.object_id {
                        return Err(Stop::Failed(format!(
                            "fork {}: a job cannot fork its own template on its own object (that \
                             would replace the job itself); name another object",
                            f.template
                        )));
                    }
                    let context = expr::eval_value(&json!(f.context), &ctx).map_err(bad)?;
                    let mut req = StartRequest::new(&f.template, &[]);
                    req.objects = vec![object.clone()];
                    req.context = context;
                    req.priority = job.priority;
                    req.lane = job.lane.clone();
                    req.actor = format!("parent:{}", job.id);
                    req.parent = Some(job.id);
                    let started =
                        Box::pin(self.workflow_start_in(tx, &req))
                            .await
                            .map_err(|e| match e {
                                e if e.is_refusal() => {
                                    Stop::Failed(format!("fork {}: {e}", f.template))
                                }
                                e => Stop::Db(e),
                            })?;
                    let children: Vec<i64> = started.iter().map(|s| s.workflow_id).collect();
                    sqlx::query("update workdo.workflows set parent_id = $1 where id = any($2)")
                        .bind(job.id)
                        .bind(&children)
                        .execute(&mut **tx)
                        .await?;
                    params =
                        json!({"template": f.template, "object": object, "children": children});
                    fx.events.push(
                        NewEvent::new(&job.object_id, "child_started", "machine")
                            .workflow(job.id)
                            .template(&job.template)
                            .version(job.version)
                            .detail(params.clone()),
                    );
                }
                Action::Mail(mail) => {
                    let subject =
                        expr::text_of(&expr::eval_text(&mail.subject, &ctx).map_err(bad)?);
                    let body = expr::text_of(&expr::eval_text(&mail.body, &ctx).map_err(bad)?);
                    params = json!({"to": mail.to, "subject": subject});
                    sqlx::query(
                        "insert into workdo.alert_outbox (kind, template, object_id, workflow_id, recipients, payload)
                         values ('mail', $1, $2, $3, $4, $5)",
                    )
                    .bind(&job.template)
                    .bind(&job.object_id)
                    .bind(job.id)
                    .bind(&mail.to)
                    .bind(json!({"subject": subject, "body": body, "object": job.object_id,
                                 "template": job.template, "state": state}))
                    .execute(&mut **tx)
                    .await?;
                }
                Action::Call(f) => {
                    let n: i64 = sqlx::query_scalar(
                        "select count(*) + 1 from workdo.steps where workflow_id = $1 and generated ->> 'call' = $2",
                    )
                    .bind(job.id)
                    .bind(f)
                    .fetch_one(&mut **tx)
                    .await?;
                    let name = format!("call/{f}#{n}");
                    let limit =
                        i32::try_from(crate::model::template::DEFAULT_ERROR_LIMIT).unwrap_or(3);
                    sqlx::query(
                        "insert into workdo.steps
                            (workflow_id, object_id, template, version, lane, name, status, pending,
                             priority, max_attempts, queue, generated)
                         values ($1, $2, $3, $4, $5, $6, 'ready', 0, $7, $8, $9, $10)",
                    )
                    .bind(job.id)
                    .bind(&job.object_id)
                    .bind(&job.template)
                    .bind(job.version)
                    .bind(&job.lane)
                    .bind(&name)
                    .bind(job.priority)
                    .bind(limit)
                    .bind(format!("{template}:call/{f}"))
                    .bind(json!({"call": f, "state": state}))
                    .execute(&mut **tx)
                    .await?;
                    sqlx::query(
                        "update workdo.workflows set unfinished = unfinished + 1 where id = $1",
                    )
                    .bind(job.id)
                    .execute(&mut **tx)
                    .await?;
                    fx.ready.add(template, [&format!("call/{f}")]);
                    params = json!({"function": f, "step": name});
                }
                Action::Fail(Fail::Always(msg)) => {
                    return Err(Stop::Failed(expr::text_of(
                        &expr::eval_text(msg, &ctx).map_err(bad)?,
                    )));
                }
                Action::Fail(Fail::When { when, message }) => {
                    let hit = expr::eval(when, &ctx).map_err(bad)?;
                    if expr::truthy(&hit) {
                        return Err(Stop::Failed(expr::text_of(
                            &expr::eval_text(message, &ctx).map_err(bad)?,
                        )));
                    }
                    params = json!({"when": when, "held": false});
                }
            }
            fx.events.push(
                NewEvent::new(&job.object_id, "action_fired", "machine")
                    .workflow(job.id)
                    .template(&job.template)
                    .version(job.version)
                    .detail(json!({"state": state, "association": association,
                                   "action": a.name(), "parameters": params})),
            );
        }
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
        write_record(tx, workflow_id, &m.initial, &vars, false).await?;
        // Already locked: the start's transaction inserted it.
        let Some(job) = super::load_job(tx, workflow_id, "").await? else {
            return Ok(());
        };
        let mut fx = Effects {
            events,
            ready,
            signalled: Vec::new(),
        };
        fx.events.push(
            NewEvent::new(&job.object_id, "job_started", "machine")
                .workflow(job.id)
                .template(&job.template)
                .version(job.version)
                .detail(json!({"state": m.initial, "variables": vars})),
        );
        let mut vars = vars;
        let enter = m
            .states
            .get(&m.initial)
            .map(|s| s.enter.clone())
            .unwrap_or_default();
        let signal = json!({"name": "start", "actor": "machine", "data": {}});
        match self
            .fire(
                tx, &job, m, &spec.name, &mut vars, &m.initial, &m.initial, &signal, &enter,
                "enter", &mut fx,
            )
            .await
        {
            Ok(()) => {}
            Err(Stop::Failed(reason) | Stop::NotAccepted(reason)) => {
                return Err(StoreError::TransitionRolledBack(format!(
                    "starting {} in {}: {reason}",
                    spec.name, m.initial
                )));
            }
            Err(Stop::Db(e)) => return Err(e),
        }
        let finished = m.states.get(&m.initial).is_some_and(|s| s.is_final);
        write_record(tx, workflow_id, &m.initial, &vars, finished).await?;
        let signalled = std::mem::take(&mut fx.signalled);
        notify_signals(tx, &signalled).await?;
        Ok(())
    }
}
