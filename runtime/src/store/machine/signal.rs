//! A signal delivered to a machine job: the transition under the job's row lock, its inbox taken
//! in order, a suspended job's signals held, and what every signal received leaves in the history.

use serde::Serialize;

use serde_json::{Value, json};

use super::inbox::{mark_taken, notify_signals, signal_in};

use super::actions::Effects;
use super::outcome::{MAX_SIGNAL_DATA_BYTES, MAX_SIGNAL_NAME_CHARS, Moved, Stop};
use super::row::load_job;
use super::taken::alarm_left;
use super::unlocked::plan_for;
use crate::model::machine;
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};
use crate::store::{Result, Store, StoreError};
use machine::plan::Effect;

/// What delivering a signal did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Signalled {
    pub workflow_id: i64,
    pub signal: String,
    pub from: String,
    pub to: String,
    /// The job reached a final state.
    pub finished: bool,
    /// Signals the job sent itself, taken after this one: (signal, the state it led to, or why not).
    #[schema(value_type = Vec<Vec<String>>)]
    pub followed: Vec<(String, String)>,
    /// The job is suspended: the signal waits in its inbox until it is resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
}

/// Where the signal a transition takes comes from.
enum Take<'a> {
    /// Given now (the CLI, the API): the job's lock is waited for.
    Given {
        signal: &'a str,
        data: &'a Value,
        actor: &'a str,
    },
    /// The job's oldest pending inbox signal, unless another process holds the job.
    Inbox,
}

impl Store {
    /// The active machine job of `template` on `object`.
    ///
    /// # Errors
    /// [`StoreError::UnknownWorkflow`] (or what is missing) when there is none.
    pub async fn machine_job(&self, object: &str, template: &str) -> Result<i64> {
        let id: Option<i64> = sqlx::query_scalar(
            "select id from workdo.workflows
              where object_id = $1 and template = $2 and active and machine is not null
              order by version desc limit 1",
        )
        .bind(object)
        .bind(template)
        .fetch_optional(&self.pool)
        .await?;
        match id {
            Some(id) => Ok(id),
            // The object has the workflow, but it is no machine job (or no longer active):
            // `has no step ""` said nothing.
            None => Err(match self.missing(object, template, "").await {
                StoreError::UnknownStep { .. } => StoreError::Invalid {
                    field: "template",
                    value: template.to_string(),
                    reason: "has no active state-machine job on this object: a workflow of steps takes status changes, not signals",
                },
                e => e,
            }),
        }
    }

    /// Deliver `signal` to job `workflow_id` now: its transition commits (or is refused, or
    /// rolled back), then the signals it sent itself are taken, in order.
    ///
    /// # Errors
    /// [`StoreError::SignalRefused`] when the signal is not accepted (nothing changed),
    /// [`StoreError::TransitionRolledBack`] when an action failed (nothing changed).
    pub async fn machine_signal(
        &self,
        workflow_id: i64,
        signal: &str,
        data: &Value,
        actor: &str,
    ) -> Result<Signalled> {
        // What no job could take is a malformed request (400), said before the job is read:
        // Postgres cannot store a NUL character, and names and data have their limits.
        if signal.contains('\0') || crate::model::nul_at(data).is_some() {
            return Err(StoreError::BadInput(
                "the signal or its data contains a NUL character (U+0000)".into(),
            ));
        }
        let chars = signal.chars().count();
        if chars > MAX_SIGNAL_NAME_CHARS {
            return Err(StoreError::BadInput(format!(
                "the signal's name has {chars} characters, over the limit of {MAX_SIGNAL_NAME_CHARS}"
            )));
        }
        let size = serde_json::to_vec(data).map_or(0, |v| v.len());
        if size > MAX_SIGNAL_DATA_BYTES {
            return Err(StoreError::BadInput(format!(
                "the signal's data has {size} bytes, over the limit of {MAX_SIGNAL_DATA_BYTES}"
            )));
        }
        // Run again when the database aborted it for another transaction's sake (a fork racing
        // another start on a new object): nothing of it was kept.
        let delivered = crate::store::again_on_conflict(|| {
            self.deliver(
                workflow_id,
                Take::Given {
                    signal,
                    data,
                    actor,
                },
            )
        })
        .await?;
        let Some((_, result)) = delivered else {
            return Err(StoreError::SignalRefused(format!(
                "there is no workflow {workflow_id}"
            )));
        };
        // Queued behind older signals: they, then it, are taken now, in order; its outcome is
        // the one of the inbox's last signal that is it.
        if let Err(StoreError::Queued) = &result {
            let followed = self.inbox_run_job(workflow_id, 1000).await?;
            let mine = followed.iter().rposition(|(s, _)| s == signal);
            let to = mine.map(|i| followed[i].1.clone()).unwrap_or_default();
            if let Some(why) = to.strip_prefix("refused: ") {
                return Err(StoreError::SignalRefused(why.to_string()));
            }
            return Ok(Signalled {
                workflow_id,
                signal: signal.to_string(),
                from: "(after the signals waiting before it)".into(),
                to,
                finished: false,
                followed,
                queued: mine.is_none(),
            });
        }
        let Moved {
            from,
            to,
            finished,
            queued,
            inbox,
        } = result?;
        if queued {
            return Ok(Signalled {
                workflow_id,
                signal: signal.to_string(),
                from,
                to,
                finished,
                followed: Vec::new(),
                queued,
            });
        }
        // A machine that keeps signalling itself is not this command's to run for ever: past
        // this many follow-ups, the runtime takes the rest.
        // The signal is committed: follow-ups that cannot be taken now (the database busy or
        // gone) stay in the inbox for the runtime, and do not make this signal look failed.
        // An inbox that was empty under the lock, and that the transition sent nothing to, has
        // nothing to follow with (a signal that arrives since is the runtime's, by NOTIFY).
        let followed = match inbox {
            false => Vec::new(),
            true => match self.inbox_run_job(workflow_id, 1000).await {
                Ok(followed) => followed,
                Err(e) => {
                    tracing::warn!(workflow_id, error = %e,
                        "signal applied; its follow-ups are left to the runtime");
                    Vec::new()
                }
            },
        };
        Ok(Signalled {
            workflow_id,
            signal: signal.to_string(),
            from,
            to,
            finished,
            followed,
            queued: false,
        })
    }

    /// Take pending signals of any jobs (the runtime's inbox loop): each job's in order, a job at
    /// a time per process (a job another process holds is skipped). Returns how many were taken.
    pub async fn machine_inbox_run(&self, jobs: i64) -> Result<usize> {
        let ids: Vec<i64> = sqlx::query_scalar(
            "select s.workflow_id from workdo.signals s
               join workdo.workflows w on w.id = s.workflow_id
              where s.processed_at is null
                and not coalesce((w.machine ->> 'suspended')::boolean, false)
              group by s.workflow_id order by min(s.id) limit $1",
        )
        .bind(jobs)
        .fetch_all(&self.pool)
        .await?;
        let mut taken = 0;
        for id in ids {
            // A few at a time per job, so that one busy job does not starve the others.
            taken += self.inbox_run_job(id, 100).await?.len();
        }
        Ok(taken)
    }

    /// Take job `id`'s pending signals, oldest first, each in its own transaction.
    pub(crate) async fn inbox_run_job(&self, id: i64, max: usize) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some((signal, result)) = self.deliver(id, Take::Inbox).await? else {
                break;
            };
            let outcome = match result {
                Ok(Moved { to, .. }) => to,
                Err(StoreError::SignalRefused(why) | StoreError::TransitionRolledBack(why)) => {
                    format!("refused: {why}")
                }
                Err(e) => return Err(e),
            };
            out.push((signal, outcome));
        }
        Ok(out)
    }

    /// One signal's transition, in one transaction under the job's row lock. An inbox signal is
    /// picked and marked taken inside that transaction, so no other process can take it too. A
    /// refused or failing transition is rolled back to a savepoint; the `transition_rollback`
    /// event and the inbox mark commit without it. Returns `None` when there was nothing to take
    /// (no pending signal, or another process holds the job); else the signal and what it did.
    async fn deliver(
        &self,
        workflow_id: i64,
        take: Take<'_>,
    ) -> Result<Option<(String, Result<Moved>)>> {
        // A given signal whose transition only records events is written in one statement
        // that checks the job did not change since it was read (unlocked.rs).
        if let Take::Given {
            signal,
            data,
            actor,
        } = take
            && let Some(moved) = self
                .deliver_unlocked(workflow_id, (signal, data, actor))
                .await?
        {
            return Ok(Some((signal.to_string(), Ok(moved))));
        }
        // The locked way writes the job: what this process kept of it is stale from here.
        self.jobs.forget(workflow_id, false);
        let mut tx = self.pool.begin().await?;
        let lock = match take {
            // No key update: a child's `child_done` (whose foreign key takes KEY SHARE on this
            // row) must not deadlock with this job's transition locking that child.
            Take::Inbox => " for no key update skip locked",
            Take::Given { .. } => " for no key update",
        };
        let Some(job) = load_job(&mut tx, workflow_id, lock).await? else {
            return Ok(None);
        };
        // An inbox with nothing in it: nothing to take, and no more round trips to find out.
        if matches!(take, Take::Inbox) && !job.inbox_pending {
            return Ok(None);
        }
        // The job's version, read under its lock (so a migration that committed meanwhile
        // counts); from the store's cache, or on this transaction's connection.
        let spec = self
            .spec_by_id(&mut *tx, job.template_id, &job.template_sha256)
            .await?;
        // A suspended job's inbox waits.
        if matches!(take, Take::Inbox) && job.record().is_some_and(|r| r.suspended) {
            return Ok(None);
        }
        let (inbox, signal, data, actor) = match take {
            Take::Given {
                signal,
                data,
                actor,
            } => (None, signal.to_string(), data.clone(), actor.to_string()),
            Take::Inbox => {
                let next: Option<(i64, String, Value, String)> = sqlx::query_as(
                    "select id, signal, data, actor from workdo.signals
                      where workflow_id = $1 and processed_at is null order by id limit 1",
                )
                .bind(workflow_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some((id, signal, data, actor)) = next else {
                    return Ok(None);
                };
                (Some(id), signal, data, actor)
            }
        };
        // Suspended (checked under the lock, so a suspend that committed meanwhile counts): a
        // signal given now that the job's state accepts waits in its inbox; one it does not
        // accept is refused as always.
        let record = job.record().unwrap_or_default();
        if inbox.is_none() && record.suspended {
            let state = record.state.to_string();
            let accepted = spec
                .machine
                .as_ref()
                .is_some_and(|m| machine::transition(m, &state, &signal).is_some());
            let size = serde_json::to_vec(&data).map_or(0, |v| v.len());
            if accepted && size <= MAX_SIGNAL_DATA_BYTES {
                signal_in(&mut tx, workflow_id, &signal, &data, &actor).await?;
                tx.commit().await?;
                let moved = Moved {
                    from: state.clone(),
                    to: state,
                    finished: false,
                    queued: true,
                    inbox: true,
                };
                return Ok(Some((signal, Ok(moved))));
            }
        }
        // A job's signals are taken in the order they arrived, however they arrived: one given
        // while older ones wait in the inbox (from children, alarms, a resumed suspension) joins
        // them there, and the inbox is taken in order (`machine_signal` reports its outcome).
        // (A suspended job refuses one its state does not accept now, as below.)
        if inbox.is_none() && job.inbox_pending && !record.suspended {
            signal_in(&mut tx, workflow_id, &signal, &data, &actor).await?;
            tx.commit().await?;
            return Ok(Some((signal, Err(StoreError::Queued))));
        }
        let mut events = EventBuf::default();
        let mut ready = ReadyKeys::default();
        let mut fx = Effects {
            events: &mut events,
            ready: &mut ready,
            signalled: Vec::new(),
            taking: inbox,
        };
        // An alarm's signal waiting since before this fix (or since a race with a transition
        // written without a lock) whose state the job has left is refused, not applied.
        let left = match (inbox, actor.as_str()) {
            (Some(_), "alarm") => alarm_left(&mut tx, &data, &job).await?,
            (Some(_), "self") if record.self_run >= super::actions::MAX_SELF_RUN => Some(format!(
                "the job has taken {} transitions in a row on signals it sent itself: a \
                     loop, ended here (a signal from outside starts the count again)",
                super::actions::MAX_SELF_RUN
            )),
            _ => None,
        };
        let stopped = match left.map_or_else(
            || plan_for(&job, &spec, &signal, &data, &actor),
            |why| Err(Stop::NotAccepted(why)),
        ) {
            Err(Stop::Db(e)) => return Err(e),
            Err(stop) => stop,
            Ok(plan) => {
                // Only a fork can fail once writing has begun (its limits, a child that cannot
                // start): then a savepoint undoes the transition and keeps the inbox mark.
                // Anything else that fails now is the database's, and takes the whole
                // transaction with it — so no savepoint's two round trips for it.
                let forks = plan
                    .effects
                    .iter()
                    .any(|e| matches!(e, Effect::Fork { .. }));
                let applied = if forks {
                    let mut attempt = sqlx::Acquire::begin(&mut *tx).await?;
                    let applied = self
                        .apply_plan(&mut attempt, &job, &spec.name, &plan, &mut fx)
                        .await;
                    match applied {
                        Ok(()) => attempt.commit().await?,
                        Err(_) => attempt.rollback().await?,
                    }
                    applied
                } else {
                    self.apply_plan(&mut tx, &job, &spec.name, &plan, &mut fx)
                        .await
                };
                let signalled = std::mem::take(&mut fx.signalled);
                match applied {
                    Ok(()) => {
                        if let Some(sid) = inbox {
                            mark_taken(&mut tx, sid, &plan.to).await?;
                        }
                        events.flush(&mut tx).await?;
                        ready.notify(&mut tx).await?;
                        notify_signals(&mut tx, &signalled).await?;
                        tx.commit().await?;
                        let moved = Moved {
                            from: plan.from,
                            to: plan.to,
                            finished: plan.finished,
                            queued: false,
                            inbox: job.inbox_pending || signalled.contains(&job.id),
                        };
                        return Ok(Some((signal, Ok(moved))));
                    }
                    Err(Stop::Db(e)) => return Err(e),
                    Err(stop) if forks => stop,
                    // Not a fork's: nothing undoes a part of it, so none of it commits.
                    Err(Stop::Failed(why) | Stop::NotAccepted(why)) => {
                        return Err(StoreError::TransitionRolledBack(why));
                    }
                }
            }
        };
        // Every signal received leaves a trace: one not accepted writes `signal_refused`, one
        // whose transition failed `transition_rollback`. (A `child_done` from a child is the
        // engine's, sent to every parent: a machine that does not take it, or that has ended,
        // lets it pass unremarked; its inbox row says so.)
        let unasked = signal == "child_done" && actor.starts_with("child:");
        let state = job.record().map(|r| r.state);
        let (error, outcome, trace) = match stopped {
            Stop::Db(e) => return Err(e),
            Stop::NotAccepted(why) => {
                let trace = (!unasked).then(|| {
                    let detail = json!({"state": state, "signal": signal, "actor": actor,
                                        "reason": why});
                    ("signal_refused", detail)
                });
                let outcome = format!("refused: {why}");
                (StoreError::SignalRefused(why), outcome, trace)
            }
            Stop::Failed(reason) => {
                let detail = json!({"state": state, "transition": signal, "reason": reason});
                (
                    StoreError::TransitionRolledBack(format!(
                        "{signal} in {}: {reason}; nothing of the transition happened",
                        state.unwrap_or_default()
                    )),
                    format!("rolled back: {reason}"),
                    Some(("transition_rollback", detail)),
                )
            }
        };
        if let Some((kind, detail)) = trace {
            let mut events = EventBuf::default();
            events.push(
                NewEvent::new(&job.object_id, kind, &actor)
                    .workflow(job.id)
                    .template(&job.template)
                    .version(job.version)
                    .detail(detail),
            );
            events.flush(&mut tx).await?;
        }
        if let Some(sid) = inbox {
            mark_taken(&mut tx, sid, &outcome).await?;
        }
        tx.commit().await?;
        Ok(Some((signal, Err(error))))
    }
}
