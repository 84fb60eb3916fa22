//! A job's family: the children it forks (within the limits on forks and depth, never
//! replacing running work unless told) and their cancelling, when it ends or is deleted or
//! restarted.

use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};

use super::actions::{Effects, MAX_FORK_DEPTH, MAX_FORKS_PER_TRANSACTION, skip_pending};
use super::outcome::Stop;
use super::row::Job;
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};
use crate::store::requests::StartRequest;
use crate::store::{Result, Store};

/// How a fork chain too deep to run begins its message: each generation adds its template.
const FORK_CHAIN: &str = "forks nest too deep: ";

impl Store {
    /// Cancel what still runs below `parents`, workflows about to be deleted or replaced (a
    /// `workflows delete`, a start that replaces one): a child whose parent row goes has its
    /// `parent_id` set to null and can never `signal-parent`. As a final state does: their
    /// pending steps skipped, machines ended `cancelled`, each recorded — except below a machine
    /// whose template says `keep-children`. In the caller's transaction, before the delete.
    pub(crate) async fn cancel_children_of(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        parents: &[i64],
        actor: &str,
    ) -> Result<usize> {
        let rows: Vec<(i64, i64, String)> = sqlx::query_as(
            "select p.id, p.template_id, t.sha256 from workdo.workflows p
               join workdo.templates t on t.id = p.template_id
              where p.id = any($1)
                and exists (select 1 from workdo.workflows c
                             where c.parent_id = p.id and c.status <> 'completed')
              order by p.id",
        )
        .bind(parents)
        .fetch_all(&mut **tx)
        .await?;
        let mut events = EventBuf::default();
        let mut ready = ReadyKeys::default();
        let mut n = 0;
        {
            let mut fx = Effects {
                events: &mut events,
                ready: &mut ready,
                signalled: Vec::new(),
                taking: None,
            };
            for (parent, template_id, sha) in rows {
                let spec = self.spec_by_id(&mut **tx, template_id, &sha).await?;
                if spec.machine.as_ref().is_some_and(|m| m.keep_children) {
                    continue;
                }
                n += self
                    .cancel_children(tx, parent, actor, 0, &mut fx)
                    .await?
                    .len();
            }
        }
        events.flush(tx).await?;
        ready.notify(tx).await?;
        Ok(n)
    }

    /// Cancel the children of job `parent` still running, and theirs (at most
    /// [`MAX_FORK_DEPTH`] deep): each one's pending steps skipped through the status path, each
    /// machine ended as cancelled (`job_cancelled`, its alarms cancelled). Returns the ids of
    /// `parent`'s own children cancelled.
    pub(super) fn cancel_children<'a>(
        &'a self,
        tx: &'a mut Transaction<'_, Postgres>,
        parent: i64,
        actor: &'a str,
        depth: i32,
        fx: &'a mut Effects<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<i64>>> + Send + 'a>> {
        Box::pin(async move {
            let kids: Vec<(i64, bool, String, String, i32)> = sqlx::query_as(
                "select id, machine is not null, object_id, template, version
                   from workdo.workflows where parent_id = $1 and status <> 'completed'
                  order by id for no key update",
            )
            .bind(parent)
            .fetch_all(&mut **tx)
            .await?;
            let mut out = Vec::new();
            for (id, machine, object, template, version) in kids {
                if depth + 1 < MAX_FORK_DEPTH {
                    self.cancel_children(tx, id, actor, depth + 1, fx).await?;
                }
                let note = format!("cancelled with its parent {parent}");
                skip_pending(tx, id, &note, actor).await?;
                if machine {
                    sqlx::query(
                        "update workdo.workflows
                            set status = 'completed', completed_at = now(), unfinished = 0,
                                machine = machine || jsonb_build_object('cancelled', true,
                                                                        'suspended', false)
                          where id = $1 and status <> 'completed'",
                    )
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
                    sqlx::query(
                        "update workdo.alarms set cancelled_at = now()
                          where workflow_id = $1 and fired_at is null and cancelled_at is null",
                    )
                    .bind(id)
                    .execute(&mut **tx)
                    .await?;
                    fx.events.push(
                        NewEvent::new(&object, "job_cancelled", actor)
                            .workflow(id)
                            .template(&template)
                            .version(version)
                            .status("completed")
                            .detail(json!({"parent": parent})),
                    );
                }
                out.push(id);
            }
            Ok(out)
        })
    }

    /// Start a child of `job`: within the limits on forks per transaction and on depth.
    pub(super) async fn fork(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        job: &Job,
        (template, object, replace): (&str, &str, bool),
        context: &Value,
    ) -> std::result::Result<Vec<i64>, Stop> {
        // A fork never replaces running work unless it says so: a second fork of one template
        // on one object replaced the first child, whose `child_done` then never came.
        // (An id that is none is refused below, by the start, with its reason.)
        if let (false, Ok(id)) = (replace, crate::model::object_id::normalize(object)) {
            let running: Option<i64> = sqlx::query_scalar(
                "select w.id from workdo.workflows w join workdo.objects o on o.id = w.object_id
                  where w.object_id = $1 and w.template = $2
                    and w.version = o.version and w.status = 'active'
                  limit 1",
            )
            .bind(id)
            .bind(template)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| Stop::Db(e.into()))?;
            if let Some(id) = running {
                return Err(Stop::Failed(format!(
                    "fork {template} on {object}: workflow {id} of {template} still runs there, \
                     and a fork never replaces running work (give the fork `replace: true` to \
                     start it over)"
                )));
            }
        }
        // Counted in the transaction itself (a transaction-local setting), so that nested
        // starts — children forking children — add up.
        let forked: i32 = sqlx::query_scalar(
            "select set_config('workdo.forked',
                    (coalesce(nullif(current_setting('workdo.forked', true), ''), '0')::int + 1)::text,
                    true)::int",
        )
        .fetch_one(&mut **tx)
        .await?;
        if forked > MAX_FORKS_PER_TRANSACTION {
            return Err(Stop::Failed(format!(
                "fork {template}: more than {MAX_FORKS_PER_TRANSACTION} jobs forked in one transition (children of children included)"
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
                "{FORK_CHAIN}{template}: jobs nest more than {MAX_FORK_DEPTH} deep"
            )));
        }
        let mut req = StartRequest::new(template, &[]);
        req.objects = vec![object.to_string()];
        req.context = context.clone();
        req.priority = job.priority;
        req.lane = job.lane.clone();
        req.actor = format!("parent:{}", job.id);
        req.parent = Some(job.id);
        let started = Box::pin(self.workflow_start_in(tx, &req))
            .await
            .map_err(|e| match e {
                // A start racing another on a new object: the transition runs again whole
                // (`machine_signal`), and the object is found then.
                e if e.is_conflict() => Stop::Db(e),
                // A fork cycle said once, as its chain of templates, not as one nested "fork …:
                // transition rolled back: starting …" per generation (5.8 KB at 16 deep).
                e if e.is_refusal() => {
                    let said = e.to_string();
                    match said.find(FORK_CHAIN) {
                        Some(at) => Stop::Failed(format!(
                            "{FORK_CHAIN}{template} → {}",
                            &said[at + FORK_CHAIN.len()..]
                        )),
                        None => Stop::Failed(format!("fork {template}: {e}")),
                    }
                }
                e => Stop::Db(e),
            })?;
        let children: Vec<i64> = started.iter().map(|s| s.workflow_id).collect();
        sqlx::query("update workdo.workflows set parent_id = $1 where id = any($2)")
            .bind(job.id)
            .bind(&children)
            .execute(&mut **tx)
            .await?;
        Ok(children)
    }
}
