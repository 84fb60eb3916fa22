//! What an operator lists and tidies: objects and workflows page by page, finished workflows
//! archived or purged in batches, schedules switched on and off, template versions.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::events::{EventBuf, NewEvent};
use super::templates::TemplateRow;
use super::{Result, Store, StoreError};

/// An object in a list.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ObjectRow {
    pub id: String,
    pub version: i32,
    pub properties: Value,
    pub workflows: i64,
    pub active_workflows: i64,
    pub updated_at: DateTime<Utc>,
    /// How many a search found in all (its page's rows carry it).
    #[sqlx(default)]
    #[serde(skip)]
    pub total: i64,
}

/// A workflow in a list.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct WorkflowListRow {
    pub id: i64,
    pub object_id: String,
    pub template: String,
    pub version: i32,
    pub status: String,
    pub active: bool,
    pub unfinished: i32,
    pub state: Option<String>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// Steps in error that share a template step and a message: the admin page's errors view.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ErrorGroup {
    pub template: String,
    pub step: String,
    pub message: String,
    pub count: i64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    /// One of the group's error texts (e.g. a stack trace).
    pub text: Option<String>,
    /// The latest message of the group as written (`message` has its numbers masked as `#`).
    pub example: String,
    pub ids: Vec<i64>,
}

/// Elapsed and wait times of one template step over a window (seconds).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Timing {
    pub template: String,
    pub step: String,
    pub finished: i64,
    pub elapsed_p50: Option<f64>,
    pub elapsed_p95: Option<f64>,
    pub elapsed_p99: Option<f64>,
    pub wait_p50: Option<f64>,
    pub wait_p95: Option<f64>,
    pub wait_p99: Option<f64>,
}

/// What one archive or purge run moved.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Archived {
    pub workflows: u64,
    pub steps: u64,
    pub events: u64,
    pub batches: u64,
    /// Where the next batch starts: the last workflow moved (`completed_at`, `id`).
    #[serde(skip)]
    pub cursor: Option<(DateTime<Utc>, i64)>,
}

impl Store {
    /// Objects by id after `after` (paging), those whose id starts with `prefix`.
    pub async fn objects_list(
        &self,
        prefix: Option<&str>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ObjectRow>> {
        Ok(sqlx::query_as(
            "select o.id, o.version, o.properties,
                    (select count(*) from workdo.workflows w where w.object_id = o.id) as workflows,
                    (select count(*) from workdo.workflows w
                      where w.object_id = o.id and w.active and w.status = 'active') as active_workflows,
                    o.updated_at
               from workdo.objects o
              where ($1::text is null or starts_with(o.id, $1)) and ($2::text is null or o.id > $2)
              order by o.id limit $3",
        )
        .bind(prefix)
        .bind(after)
        .bind(limit.clamp(1, 10_000))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Objects whose id starts with one of `prefixes`, or (`property`) whose property KEY
    /// reads VALUE (a string, or a number or boolean as written), by id.
    pub async fn objects_find(
        &self,
        prefixes: &[String],
        property: Option<(&str, &str)>,
        (limit, offset): (i64, i64),
    ) -> Result<(i64, Vec<ObjectRow>)> {
        let (key, value) = property.unzip();
        let rows: Vec<ObjectRow> = sqlx::query_as(
            "select o.id, o.version, o.properties,
                    (select count(*) from workdo.workflows w where w.object_id = o.id) as workflows,
                    (select count(*) from workdo.workflows w
                      where w.object_id = o.id and w.active and w.status = 'active') as active_workflows,
                    o.updated_at, count(*) over () as total
               from workdo.objects o
              where (cardinality($1::text[]) = 0 or o.id like any(
                        select replace(replace(replace(p, '\\', '\\\\'), '%', '\\%'), '_', '\\_') || '%'
                          from unnest($1::text[]) p))
                and ($2::text is null or o.properties ->> $2 = $3)
              order by o.id limit $4 offset $5",
        )
        .bind(prefixes)
        .bind(key)
        .bind(value)
        .bind(limit.clamp(1, 10_000))
        .bind(offset.max(0))
        .fetch_all(&self.pool)
        .await?;
        // Past the last page there is no row to carry the count: ask again from the start.
        if rows.is_empty() && offset > 0 {
            let (total, _) = Box::pin(self.objects_find(prefixes, property, (1, 0))).await?;
            return Ok((total, rows));
        }
        Ok((rows.first().map_or(0, |r| r.total), rows))
    }

    /// Workflows by id after `after` (paging), filtered.
    pub async fn workflows_list(
        &self,
        template: Option<&str>,
        status: Option<&str>,
        object: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<WorkflowListRow>> {
        Ok(sqlx::query_as(
            "select id, object_id, template, version, status, active, unfinished,
                    machine ->> 'state' as state, created_at, completed_at
               from workdo.workflows
              where ($1::text is null or template = $1) and ($2::text is null or status = $2)
                and ($3::text is null or object_id = $3) and id > $4
              order by id limit $5",
        )
        .bind(template)
        .bind(status)
        .bind(object)
        .bind(after)
        .bind(limit.clamp(1, 10_000))
        .fetch_all(&self.pool)
        .await?)
    }

    /// A page of the active steps of a template step in a status, narrowed by `filter`, most
    /// recently changed first: `limit` from `offset`.
    pub async fn steps_in(
        &self,
        template: &str,
        step: &str,
        status: &str,
        filter: &super::FacetFilter,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<super::StepRow>> {
        let (key, value) = filter.property_parts();
        let names = facet_clause(template, step);
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select * from workdo.steps s where {names} and {STEPS_IN}
              order by updated_at desc, id limit $8 offset $9"
        )))
        .bind(template)
        .bind(step)
        .bind(status)
        .bind(filter.lane.as_deref())
        .bind(filter.milestone.as_deref())
        .bind(key)
        .bind(value)
        .bind(limit.clamp(1, 10_000))
        .bind(offset.max(0))
        .fetch_all(&self.pool)
        .await?)
    }

    /// How many steps [`Store::steps_in`] pages through, and (`ids`) at most `ids_limit` of
    /// their ids, for acting on all of them: one scan for both.
    pub async fn steps_in_all(
        &self,
        template: &str,
        step: &str,
        status: &str,
        filter: &super::FacetFilter,
        ids_limit: i64,
    ) -> Result<(i64, Vec<i64>)> {
        let (key, value) = filter.property_parts();
        let names = facet_clause(template, step);
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select count(*), coalesce((array_agg(s.id order by s.id) filter (where $8 > 0))[1:$8], '{{}}')
               from workdo.steps s where {names} and {STEPS_IN}"
        )))
        .bind(template)
        .bind(step)
        .bind(status)
        .bind(filter.lane.as_deref())
        .bind(filter.milestone.as_deref())
        .bind(key)
        .bind(value)
        .bind(ids_limit.max(0))
        .fetch_one(&self.pool)
        .await?)
    }

    /// Active steps in error, grouped by template step and message with its numbers masked (26
    /// messages differing by a barcode or an id are one group), biggest group first.
    pub async fn errors_grouped(&self) -> Result<Vec<ErrorGroup>> {
        Ok(sqlx::query_as(
            "select template, name as step,
                    regexp_replace(coalesce(error_message, ''), '\\m[0-9]+\\M', '#', 'g') as message,
                    count(*) as count, min(updated_at) as first, max(updated_at) as last,
                    (array_agg(error_text order by updated_at desc))[1] as text,
                    (array_agg(coalesce(error_message, '') order by updated_at desc))[1] as example,
                    array_agg(id order by id) as ids
               from workdo.steps where status in ('error', 'exception') and active
              group by template, name, regexp_replace(coalesce(error_message, ''), '\\m[0-9]+\\M', '#', 'g')
              order by count(*) desc, template, name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Per template step, over the steps finished in the last `hours`: elapsed (the function's
    /// time) and wait (ready to started) at p50, p95 and p99.
    pub async fn timings(&self, hours: f64) -> Result<Vec<Timing>> {
        Ok(sqlx::query_as(
            "select template, workdo.facet_name(name) as step, count(*) as finished,
                    percentile_cont(0.5) within group (order by elapsed) as elapsed_p50,
                    percentile_cont(0.95) within group (order by elapsed) as elapsed_p95,
                    percentile_cont(0.99) within group (order by elapsed) as elapsed_p99,
                    percentile_cont(0.5) within group (order by extract(epoch from started_at - run_at)) as wait_p50,
                    percentile_cont(0.95) within group (order by extract(epoch from started_at - run_at)) as wait_p95,
                    percentile_cont(0.99) within group (order by extract(epoch from started_at - run_at)) as wait_p99
               from workdo.steps
              where finished_at > now() - make_interval(secs => $1) and status = 'completed'
              group by template, workdo.facet_name(name) order by template, 2",
        )
        .bind(hours * 3600.0)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Delete workflow `id` with its steps.
    ///
    /// # Errors
    /// [`StoreError::UnknownWorkflow`] when there is none.
    pub async fn workflow_delete_by_id(&self, id: i64, actor: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        super::steps::lock_steps_of_workflow(&mut tx, id).await?;
        self.cancel_children_of(&mut tx, &[id], actor).await?;
        let row: Option<(String, String, i32)> = sqlx::query_as(
            "delete from workdo.workflows where id = $1 returning object_id, template, version",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        Self::functions_unpin_in(&mut tx, &[id]).await?;
        let Some((object, template, version)) = row else {
            return Err(StoreError::UnknownWorkflowId(id));
        };
        let mut events = EventBuf::default();
        events.push(
            NewEvent::new(&object, "workflow_deleted", actor)
                .workflow(id)
                .template(&template)
                .version(version),
        );
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Delete object `id` with its documents, workflows, steps and milestones (its events stay:
    /// the log is append-only, and says it was deleted). Run again when the database aborts it
    /// for another transaction's sake: at REPEATABLE READ, a start that has just committed a
    /// workflow on the object makes the workflows' cascade fail with a serialization error,
    /// and the delete run again takes that workflow too.
    pub async fn object_delete(&self, id: &str, actor: &str) -> Result<()> {
        super::again_on_conflict(|| self.object_delete_once(id, actor)).await
    }

    async fn object_delete_once(&self, id: &str, actor: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // The object, then its workflows' steps, then (the delete) its workflows: the order a
        // start re-creating a workflow and `objects_put` take them in.
        sqlx::query("select 1 from workdo.objects where id = $1 for update")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        super::steps::lock_steps_of_object(&mut tx, id, None, None, None).await?;
        let n = sqlx::query("delete from workdo.objects where id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::UnknownObject(id.to_string()));
        }
        let mut events = EventBuf::default();
        events.push(NewEvent::new(id, "object_deleted", actor));
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// How many workflows finished before `before` (what an archive run has ahead of it).
    pub async fn archive_pending(&self, before: DateTime<Utc>) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from workdo.workflows where status = 'completed' and completed_at < $1",
        )
        .bind(before)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Move (or, with `purge`, delete) workflows completed before `before`, `batch` at a time,
    /// each batch its own short transaction that locks only the rows it moves (`SKIP LOCKED`),
    /// so the runtime is never held up. Returns what moved.
    pub async fn archive(
        &self,
        before: DateTime<Utc>,
        batch: i64,
        purge: bool,
    ) -> Result<Archived> {
        let mut total = Archived::default();
        let mut cursor = None;
        loop {
            // A start replacing a workflow deletes its steps, then the workflow; a batch holds
            // its workflows, then deletes their steps: one of the two is the database's victim
            // when they meet (seen with `start` and `archive` beside `up`). The batch's
            // transaction left nothing behind, and run again it picks what is left.
            let done =
                super::again_on_conflict(|| self.archive_batch(before, batch, purge, cursor))
                    .await?;
            if done.workflows == 0 {
                // From the start once more: a workflow skipped while another transaction held
                // it lies behind the cursor.
                if cursor.take().is_some() {
                    continue;
                }
                return Ok(total);
            }
            cursor = done.cursor;
            total.workflows += done.workflows;
            total.steps += done.steps;
            total.events += done.events;
            total.batches += 1;
        }
    }

    /// One batch of [`Store::archive`]: the oldest `batch` finished workflows (the partial index
    /// `workflows_finished`), each with its steps and events as one JSON record in
    /// `workdo.archive` unless `purge`, then deleted. Events are found by object and workflow
    /// through `events_object`. Nothing moved means nothing was left (after `cursor`, the
    /// previous batch's [`Archived::cursor`]: without it each batch would step again over the
    /// index entries of every workflow moved before it, dead until a vacuum).
    pub async fn archive_batch(
        &self,
        before: DateTime<Utc>,
        batch: i64,
        purge: bool,
        cursor: Option<(DateTime<Utc>, i64)>,
    ) -> Result<Archived> {
        let mut tx = self.pool.begin().await?;
        let limit = batch.clamp(1, 100_000);
        let picked: Vec<(i64, String, DateTime<Utc>)> = match cursor {
            None => {
                sqlx::query_as(
                    "select id, object_id, completed_at from workdo.workflows
                      where status = 'completed' and completed_at < $1
                      order by completed_at, id limit $2 for update skip locked",
                )
                .bind(before)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?
            }
            Some((at, id)) => {
                sqlx::query_as(
                    "select id, object_id, completed_at from workdo.workflows
                      where status = 'completed' and completed_at < $1
                        and (completed_at, id) > ($3, $4)
                      order by completed_at, id limit $2 for update skip locked",
                )
                .bind(before)
                .bind(limit)
                .bind(at)
                .bind(id)
                .fetch_all(&mut *tx)
                .await?
            }
        };
        let Some(last) = picked.last().map(|(id, _, at)| (*at, *id)) else {
            tx.commit().await?;
            return Ok(Archived::default());
        };
        let (ids, objects): (Vec<i64>, Vec<String>) =
            picked.into_iter().map(|(id, o, _)| (id, o)).unzip();
        if !purge {
            sqlx::query(
                "insert into workdo.archive (workflow_id, object_id, template, completed_at, record)
                 select w.id, w.object_id, w.template, w.completed_at,
                        jsonb_build_object(
                          'workflow', to_jsonb(w),
                          'steps', coalesce((select jsonb_agg(to_jsonb(s) order by s.id)
                                               from workdo.steps s where s.workflow_id = w.id), '[]'),
                          'events', coalesce((select jsonb_agg(to_jsonb(e) order by e.id)
                                                from workdo.events e
                                               where e.object_id = w.object_id and e.workflow_id = w.id), '[]'))
                   from workdo.workflows w where w.id = any($1)
                 on conflict (workflow_id) do nothing",
            )
            .bind(&ids)
            .execute(&mut *tx)
            .await?;
        }
        let events = sqlx::query(
            "delete from workdo.events e
              using unnest($1::bigint[], $2::text[]) as d(id, object_id)
              where e.object_id = d.object_id and e.workflow_id = d.id",
        )
        .bind(&ids)
        .bind(&objects)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let steps = sqlx::query("delete from workdo.steps where workflow_id = any($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let workflows = sqlx::query("delete from workdo.workflows where id = any($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        Self::functions_unpin_in(&mut tx, &ids).await?;
        tx.commit().await?;
        Ok(Archived {
            workflows,
            steps,
            events,
            batches: 1,
            cursor: Some(last),
        })
    }

    /// Switch a schedule on or off.
    pub async fn schedule_enable(&self, name: &str, enabled: bool) -> Result<()> {
        let n = sqlx::query(
            "update workdo.schedules set enabled = $2, updated_at = now() where name = $1",
        )
        .bind(name)
        .bind(enabled)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::Schedule(format!("no schedule {name:?}")));
        }
        Ok(())
    }

    /// Delete a schedule.
    pub async fn schedule_delete(&self, name: &str) -> Result<()> {
        let n = sqlx::query("delete from workdo.schedules where name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::Schedule(format!("no schedule {name:?}")));
        }
        Ok(())
    }

    /// Every stored version of `name`, oldest first.
    pub async fn template_versions(&self, name: &str) -> Result<Vec<TemplateRow>> {
        let ids: Vec<i64> =
            sqlx::query_scalar("select id from workdo.templates where name = $1 order by id")
                .bind(name)
                .fetch_all(&self.pool)
                .await?;
        if ids.is_empty() {
            return Err(StoreError::UnknownTemplate(name.to_string()));
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.template_by_id(id).await?);
        }
        Ok(out)
    }

    /// Make the version of `name` whose SHA-256 starts with `sha` the current one.
    pub async fn template_use(&self, name: &str, sha: &str) -> Result<TemplateRow> {
        let mut tx = self.pool.begin().await?;
        super::templates::lock_name(&mut tx, name).await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "select id from workdo.templates where name = $1 and starts_with(sha256, $2)",
        )
        .bind(name)
        .bind(sha)
        .fetch_all(&mut *tx)
        .await?;
        let id = match ids.as_slice() {
            [one] => *one,
            [] => {
                // A name that names nothing is said as such (exit 2), not as a bad hash.
                let known: bool = sqlx::query_scalar(
                    "select exists (select 1 from workdo.templates where name = $1)",
                )
                .bind(name)
                .fetch_one(&mut *tx)
                .await?;
                if !known {
                    return Err(StoreError::UnknownTemplate(name.to_string()));
                }
                return Err(StoreError::Invalid {
                    field: "sha256",
                    value: sha.to_string(),
                    reason: "no version of the template has it",
                });
            }
            _ => {
                return Err(StoreError::Invalid {
                    field: "sha256",
                    value: sha.to_string(),
                    reason: "names several versions: give more of it",
                });
            }
        };
        super::templates::make_current(&mut tx, name, id).await?;
        tx.commit().await?;
        self.template_by_id(id).await
    }
}

/// How a facet's step ($2) names steps: itself, or for a generated step's bricklet step
/// (`generator/bricklet/step`, as the counts name it) every instance of it.
fn names_clause(step: &str) -> &'static str {
    if step.contains('/') && !step.contains('#') {
        "workdo.facet_name(s.name) = $2"
    } else {
        "s.name = $2"
    }
}

/// The template ($1) and step ($2) a facet names; either empty: any (one status across
/// templates, `/ui/steps?status=waiting`).
fn facet_clause(template: &str, step: &str) -> String {
    let t = if template.is_empty() {
        "$1::text = ''"
    } else {
        "s.template = $1"
    };
    let n = if step.is_empty() {
        "$2::text = ''"
    } else {
        names_clause(step)
    };
    format!("{t} and {n}")
}

/// The steps a facet names ($3 status; the template $1 and step $2 by [`facet_clause`]),
/// narrowed by lane ($4), milestone reached ($5) and property $6 = $7.
const STEPS_IN: &str = "status = $3 and active
    and ($4::text is null or lane = $4)
    and ($5::text is null or exists (select 1 from workdo.milestones m
                                      where m.object_id = s.object_id and m.name = $5))
    and ($6::text is null or exists (select 1 from workdo.objects o
                                      where o.id = s.object_id and o.properties ->> $6 = $7))";
