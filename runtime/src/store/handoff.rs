//! The hand-off outbox (`migrations/0016_handoff.sql`): which template steps are handed off to
//! Sidekiq robots, the rows their readiness makes (by a trigger, in the transaction that makes
//! a step ready), and a pusher's pass over them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Postgres, Transaction};

use super::{Result, Store, StoreError};

/// A readiness to push.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HandoffRow {
    pub id: i64,
    pub object_id: String,
    pub template: String,
    pub step: String,
    pub lane: String,
    pub attempts: i32,
}

/// A row as the admin page shows it.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct HandoffEntry {
    pub id: i64,
    pub object_id: String,
    pub template: String,
    pub step: String,
    pub lane: String,
    pub created_at: DateTime<Utc>,
    pub pushed_at: Option<DateTime<Utc>>,
    pub queue: Option<String>,
    pub jid: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
}

/// One pusher pass, in one transaction: the rows it reads stay locked (another pusher skips
/// them) until [`Handoff::commit`]; a crash before the commit pushes them again, never loses
/// them.
pub struct Handoff {
    tx: Transaction<'static, Postgres>,
}

impl Store {
    /// Hand off exactly `steps` (template, step) from now on, and give the steps of them that
    /// are ready now (and have no row for this readiness yet) their outbox rows.
    pub async fn handoff_steps_set(&self, steps: &[(String, String)]) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        // Steps made ready while this runs must be caught by the trigger or by the backfill
        // below, never by neither: writers of `steps` wait (SHARE conflicts with their ROW
        // EXCLUSIVE) until this commits, and those in flight finish before the backfill reads.
        sqlx::query("lock table workdo.steps in share mode")
            .execute(&mut *tx)
            .await?;
        sqlx::query("delete from workdo.handoff_steps")
            .execute(&mut *tx)
            .await?;
        let (t, s): (Vec<String>, Vec<String>) = steps.iter().cloned().unzip();
        sqlx::query(
            "insert into workdo.handoff_steps (template, step)
             select * from unnest($1::text[], $2::text[]) on conflict do nothing",
        )
        .bind(&t)
        .bind(&s)
        .execute(&mut *tx)
        .await?;
        // The triggers exist only while something is handed off: elsewhere, steps becoming
        // ready pay for no trigger call on the completion path. Their WHEN clauses keep every
        // other update of `steps` out of the function.
        let ddl: &[&str] = if steps.is_empty() {
            &[
                "drop trigger if exists steps_handoff_update on workdo.steps",
                "drop trigger if exists steps_handoff_insert on workdo.steps",
            ]
        } else {
            &[
                "create or replace trigger steps_handoff_update
                    after update of status on workdo.steps
                    for each row when (new.status = 'ready' and old.status is distinct from 'ready')
                    execute function workdo.handoff_enqueue()",
                "create or replace trigger steps_handoff_insert
                    after insert on workdo.steps
                    for each row when (new.status = 'ready')
                    execute function workdo.handoff_enqueue()",
            ]
        };
        for sql in ddl {
            sqlx::query(sqlx::AssertSqlSafe(*sql))
                .execute(&mut *tx)
                .await?;
        }
        let n = sqlx::query(
            "insert into workdo.handoff_outbox (step_id, ready_at, object_id, template, step, lane)
             select s.id, s.updated_at, s.object_id, s.template, s.name, s.lane
               from workdo.steps s
               join workdo.handoff_steps h on h.template = s.template and h.step = s.name
              where s.status = 'ready' and s.active
             on conflict (step_id, ready_at) do nothing",
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(n)
    }

    /// Begin a pusher pass.
    pub async fn handoff_begin(&self) -> Result<Handoff> {
        Ok(Handoff {
            tx: self.pool.begin().await?,
        })
    }
}

/// The latest push (`o`) of each handed-off step still ready (`queued` to the service's
/// clients) more than `$1` seconds after it, oldest push first, at most `$2`: read from the
/// ready steps, not from the outbox's history. The page's list and the pusher's sweep share it.
const QUEUED_OVER: &str = "from workdo.handoff_steps h
       join workdo.steps s on s.template = h.template and s.name = h.step
                          and s.status = 'ready' and s.active
       cross join lateral (select * from workdo.handoff_outbox o
                            where o.step_id = s.id order by o.id desc limit 1) o
      where o.pushed_at < now() - make_interval(secs => $1)
      order by o.pushed_at limit $2";

impl Store {
    /// Handed-off steps still ready (`queued`) more than `after` after their latest push,
    /// oldest push first: jobs lost in Redis, or robots not taking them (the page and
    /// `workdo status` show them; the pusher pushes them again).
    pub async fn handoff_queued_over(
        &self,
        after: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<HandoffEntry>> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select o.id, o.object_id, o.template, o.step, o.lane, o.created_at, o.pushed_at,
                    o.queue, o.jid, o.attempts, o.last_error {QUEUED_OVER}"
        )))
        .bind(after.as_secs_f64())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The latest rows, newest first, for the admin page.
    pub async fn handoff_list(&self, limit: i64) -> Result<Vec<HandoffEntry>> {
        Ok(sqlx::query_as(
            "select id, object_id, template, step, lane, created_at, pushed_at, queue, jid,
                    attempts, last_error
               from workdo.handoff_outbox order by id desc limit $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }
}

impl Handoff {
    /// Due rows not pushed yet, oldest first, locked (`SKIP LOCKED`).
    pub async fn due(&mut self, limit: i64) -> Result<Vec<HandoffRow>> {
        Ok(sqlx::query_as(
            "select id, object_id, template, step, lane, attempts from workdo.handoff_outbox
              where pushed_at is null and next_attempt_at <= now()
                and not exists (select 1 from workdo.paused_steps p
                                 where p.template = handoff_outbox.template
                                   and p.step = handoff_outbox.step)
              order by id limit $1 for update skip locked",
        )
        .bind(limit)
        .fetch_all(&mut *self.tx)
        .await?)
    }

    /// The latest pushes of handed-off steps still ready (`queued` to the service's clients)
    /// `after_secs` after they were pushed, oldest push first, locked (`SKIP LOCKED`): their
    /// jobs were lost in Redis (a restart without persistence) or never taken. Read from the
    /// ready steps, not from the outbox's history.
    pub async fn lost(&mut self, limit: i64, after_secs: f64) -> Result<Vec<HandoffRow>> {
        let ids: Vec<i64> =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("select o.id {QUEUED_OVER}")))
                .bind(after_secs)
                .bind(limit)
                .fetch_all(&mut *self.tx)
                .await?;
        Ok(sqlx::query_as(
            "select id, object_id, template, step, lane, attempts from workdo.handoff_outbox
              where id = any($1) and pushed_at < now() - make_interval(secs => $2)
              order by pushed_at for update skip locked",
        )
        .bind(&ids)
        .bind(after_secs)
        .fetch_all(&mut *self.tx)
        .await?)
    }

    /// Record that `row`, found lost, was pushed again to `queue` as job `jid`.
    pub async fn pushed_again(&mut self, row: &HandoffRow, queue: &str, jid: &str) -> Result<()> {
        sqlx::query(
            "insert into workdo.events (object_id, workflow_id, template, step, kind, actor, detail)
             select s.object_id, s.workflow_id, s.template, s.name, 'handoff_pushed_again',
                    'handoff', $2
               from workdo.handoff_outbox o join workdo.steps s on s.id = o.step_id
              where o.id = $1",
        )
        .bind(row.id)
        .bind(serde_json::json!({"queue": queue, "jid": jid, "pushes": row.attempts + 1}))
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Row `id` was pushed to `queue` as job `jid`.
    pub async fn pushed(&mut self, id: i64, queue: &str, jid: &str) -> Result<()> {
        sqlx::query(
            "update workdo.handoff_outbox set pushed_at = now(), queue = $2, jid = $3,
                    attempts = attempts + 1, last_error = null
              where id = $1",
        )
        .bind(id)
        .bind(queue)
        .bind(jid)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Row `id` could not be pushed: try again after `delay_secs`.
    pub async fn failed(&mut self, id: i64, error: &str, delay_secs: f64) -> Result<()> {
        sqlx::query(
            "update workdo.handoff_outbox set attempts = attempts + 1, last_error = $2,
                    next_attempt_at = now() + make_interval(secs => $3)
              where id = $1",
        )
        .bind(id)
        .bind(error)
        .bind(delay_secs)
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

/// The name of the hand-off setting in `workdo.settings`.
const HANDOFF_SETTING: &str = "handoff";

/// Where ready robot steps are handed off, as the database says (`workdo handoff`).
pub const HANDOFF_TARGETS: [&str; 1] = ["sidekiq"];

impl Store {
    /// Whether ready robot steps are handed off (to Sidekiq): the setting `serve`, `up` and
    /// `worker` share. On, the workflow service's routes call a ready step `queued` (handed to
    /// a robot queue); off, `waiting`, listed by `?waiting=` for robots that poll.
    ///
    /// # Errors
    /// When the database cannot be read.
    pub async fn handoff_enabled(&self) -> Result<bool> {
        Ok(self.handoff_target().await?.is_some())
    }

    /// The hand-off target (`sidekiq`), or `None` when no hand-off is in use.
    ///
    /// # Errors
    /// When the database cannot be read.
    pub async fn handoff_target(&self) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("select value from workdo.settings where name = $1")
                .bind(HANDOFF_SETTING)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Turn the hand-off on (to `target`, one of [`HANDOFF_TARGETS`]) or off (`None`), logged
    /// with who did it; `true` when the setting changed.
    ///
    /// # Errors
    /// An unknown target, named; or the database.
    pub async fn handoff_set(&self, target: Option<&str>, actor: &str) -> Result<bool> {
        if let Some(t) = target
            && !HANDOFF_TARGETS.contains(&t)
        {
            return Err(StoreError::Invalid {
                field: "hand-off target",
                value: t.to_string(),
                reason: "the hand-off goes to sidekiq",
            });
        }
        let mut tx = self.pool.begin().await?;
        let changed = match target {
            Some(t) => sqlx::query(
                "insert into workdo.settings (name, value) values ($1, $2)
                 on conflict (name) do update set value = excluded.value, updated_at = now()
                 where settings.value is distinct from excluded.value",
            )
            .bind(HANDOFF_SETTING)
            .bind(t)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
            None => sqlx::query("delete from workdo.settings where name = $1")
                .bind(HANDOFF_SETTING)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
        } > 0;
        tx.commit().await?;
        if changed {
            tracing::info!(target = ?target, actor, "hand-off setting changed");
        }
        Ok(changed)
    }
}
