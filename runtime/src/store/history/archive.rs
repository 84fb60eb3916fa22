//! Reading the archive (`workdo archive` moved finished workflows there, each with its steps
//! and events as one record): what an object's page lists and shows.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::store::{Result, Store};

/// An archived workflow, as an object's page lists it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ArchivedRow {
    pub workflow_id: i64,
    pub template: String,
    pub completed_at: Option<DateTime<Utc>>,
    pub archived_at: DateTime<Utc>,
}

impl Store {
    /// An object's archived workflows, newest first (at most `limit`).
    pub async fn archived_of(&self, object: &str, limit: i64) -> Result<Vec<ArchivedRow>> {
        Ok(sqlx::query_as(
            "select workflow_id, template, completed_at, archived_at from workdo.archive
              where object_id = $1 order by workflow_id desc limit $2",
        )
        .bind(object)
        .bind(limit.clamp(1, 10_000))
        .fetch_all(&self.pool)
        .await?)
    }

    /// One archived workflow: its object and its record (`workflow`, `steps`, `events`).
    pub async fn archived(&self, workflow_id: i64) -> Result<Option<(String, Value)>> {
        Ok(
            sqlx::query_as("select object_id, record from workdo.archive where workflow_id = $1")
                .bind(workflow_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }
}

impl Store {
    /// Delete up to `batch` workflows archived before `before` from `workdo.archive` (the
    /// archive's retention, `archive --purge-archived-before`). Returns how many went.
    pub async fn archive_purge_before(&self, before: DateTime<Utc>, batch: i64) -> Result<u64> {
        Ok(sqlx::query(
            "delete from workdo.archive where workflow_id in (
                select workflow_id from workdo.archive where archived_at < $1
                 order by archived_at limit $2 for update skip locked)",
        )
        .bind(before)
        .bind(batch)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }
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
            let done = crate::store::again_on_conflict(|| {
                self.archive_batch(before, batch, purge, cursor)
            })
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
}
