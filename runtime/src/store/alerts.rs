//! The alert outbox: rows written by `workdo.apply` when a step goes into `error` (and by the
//! stuck-step monitor), claimed by the sender with `SKIP LOCKED`, marked sent in the transaction
//! that claimed them. The throttle table keeps the last mail per template step.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};

use serde::Serialize;

use super::{Result, Store};

/// An alert outbox row, for the admin page.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct OutboxEntry {
    pub id: i64,
    pub created_at: DateTime<Utc>,
    pub kind: String,
    pub template: Option<String>,
    pub step: Option<String>,
    pub object_id: Option<String>,
    pub status: String,
    pub attempts: i32,
    pub last_error: Option<String>,
}

/// A pending outbox row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRow {
    pub id: i64,
    /// `step_error` or `stuck`.
    pub kind: String,
    pub template: Option<String>,
    pub step: Option<String>,
    pub recipients: Vec<String>,
    pub payload: Value,
    pub attempts: i32,
}

/// A row folded while its template step's mail was throttled.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FoldedRow {
    pub id: i64,
    pub template: String,
    pub step: String,
    pub recipients: Vec<String>,
    pub payload: Value,
}

/// What becomes of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxMark {
    Sent,
    /// Throttled: waits for the template step's digest.
    Folded,
    /// Sent as part of a digest.
    Digested,
}

impl OutboxMark {
    fn as_str(self) -> &'static str {
        match self {
            OutboxMark::Sent => "sent",
            OutboxMark::Folded => "folded",
            OutboxMark::Digested => "digested",
        }
    }
}

/// One sender pass over the outbox, in one transaction: the rows it reads stay locked (other
/// senders skip them) until [`Outbox::commit`], so a crash mid-pass sends them again rather
/// than losing them.
pub struct Outbox {
    tx: Transaction<'static, Postgres>,
}

impl Store {
    /// Begin a sender pass.
    pub async fn outbox_begin(&self) -> Result<Outbox> {
        Ok(Outbox {
            tx: self.pool.begin().await?,
        })
    }

    /// Rows not yet sent (pending or folded).
    pub async fn outbox_unsent(&self) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from workdo.alert_outbox where status in ('pending', 'folded')",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The stuck-step monitor: unless one was raised within `interval`, add one outbox row
    /// listing steps `started` longer than `started_for`, or `ready` longer than `ready_for`
    /// among `bound` (`template:step`, the steps that have workers). Returns whether it did.
    pub async fn outbox_raise_stuck(
        &self,
        interval: Duration,
        started_for: Duration,
        ready_for: Duration,
        bound: &[String],
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let interval = chrono::Duration::from_std(interval).unwrap_or_default();
        if last_sent(&mut tx, "monitor:stuck")
            .await?
            .is_some_and(|t| Utc::now() - t < interval)
        {
            return Ok(false);
        }
        let rows: Vec<(String, String, String, String, DateTime<Utc>)> = sqlx::query_as(
            "select 'started', object_id, template, name, coalesce(started_at, updated_at) from workdo.steps
              where status = 'started' and active and coalesce(started_at, updated_at) < now() - make_interval(secs => $1)
             union all
             select 'ready', object_id, template, name, run_at from workdo.steps
              where status = 'ready' and active and run_at < now() - make_interval(secs => $2)
                and template || ':' || name = any($3)
             order by 5 limit 200",
        )
        .bind(started_for.as_secs_f64())
        .bind(ready_for.as_secs_f64())
        .bind(bound)
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            return Ok(false);
        }
        let entry = |r: &(String, String, String, String, DateTime<Utc>)| json!({"object": r.1, "template": r.2, "step": r.3, "since": r.4.to_rfc3339()});
        let payload = json!({
            "started": rows.iter().filter(|r| r.0 == "started").map(entry).collect::<Vec<_>>(),
            "ready": rows.iter().filter(|r| r.0 == "ready").map(entry).collect::<Vec<_>>(),
            "started_threshold": format!("{}s", started_for.as_secs()),
            "ready_threshold": format!("{}s", ready_for.as_secs()),
        });
        sqlx::query("insert into workdo.alert_outbox (kind, payload) values ('stuck', $1)")
            .bind(&payload)
            .execute(&mut *tx)
            .await?;
        set_sent(&mut tx, "monitor:stuck").await?;
        tx.commit().await?;
        Ok(true)
    }
}

impl Outbox {
    /// Up to `limit` pending rows that are due, oldest first, locked for this pass.
    pub async fn due(&mut self, limit: i64) -> Result<Vec<OutboxRow>> {
        Ok(sqlx::query_as(
            "select id, kind, template, step, recipients, payload, attempts from workdo.alert_outbox
              where status = 'pending' and next_attempt_at <= now()
              order by id limit $1 for update skip locked",
        )
        .bind(limit)
        .fetch_all(&mut *self.tx)
        .await?)
    }

    /// Every folded row, locked for this pass.
    pub async fn folded(&mut self) -> Result<Vec<FoldedRow>> {
        Ok(sqlx::query_as(
            "select id, coalesce(template, '') as template, coalesce(step, '') as step, recipients, payload
               from workdo.alert_outbox
              where status = 'folded' order by id for update skip locked",
        )
        .fetch_all(&mut *self.tx)
        .await?)
    }

    /// When the throttle `key` last let a mail through.
    pub async fn last_sent(&mut self, key: &str) -> Result<Option<DateTime<Utc>>> {
        last_sent(&mut self.tx, key).await
    }

    /// Record that the throttle `key` let a mail through now.
    pub async fn set_sent(&mut self, key: &str) -> Result<()> {
        set_sent(&mut self.tx, key).await
    }

    pub async fn mark(&mut self, ids: &[i64], mark: OutboxMark) -> Result<()> {
        sqlx::query(
            "update workdo.alert_outbox set status = $2,
                    sent_at = case when $2 in ('sent', 'digested') then now() else sent_at end
              where id = any($1)",
        )
        .bind(ids)
        .bind(mark.as_str())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// A failed send: count the attempt, keep the error, try again after `delay` — or, when
    /// `delay` is `None` (the mail can never be delivered), end the row `failed`.
    pub async fn delay(&mut self, id: i64, error: &str, delay: Option<Duration>) -> Result<()> {
        sqlx::query(
            "update workdo.alert_outbox set attempts = attempts + 1, last_error = $2,
                    status = case when $3::float8 is null then 'failed' else status end,
                    next_attempt_at = now() + make_interval(secs => coalesce($3, 0))
              where id = $1",
        )
        .bind(id)
        .bind(error)
        .bind(delay.map(|d| d.as_secs_f64()))
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    pub async fn commit(self) -> Result<()> {
        self.tx.commit().await?;
        Ok(())
    }
}

async fn last_sent(tx: &mut Transaction<'_, Postgres>, key: &str) -> Result<Option<DateTime<Utc>>> {
    Ok(sqlx::query_scalar(
        "select last_sent_at from workdo.alert_throttle where key = $1 for update",
    )
    .bind(key)
    .fetch_optional(&mut **tx)
    .await?)
}

async fn set_sent(tx: &mut Transaction<'_, Postgres>, key: &str) -> Result<()> {
    sqlx::query(
        "insert into workdo.alert_throttle (key, last_sent_at) values ($1, now())
         on conflict (key) do update set last_sent_at = now()",
    )
    .bind(key)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The outbox as the admin page shows it.
impl Store {
    /// Mail in the outbox still pending with no attempt, created before `before`: nothing has
    /// tried to send it.
    pub async fn outbox_untried(&self, before: DateTime<Utc>) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from workdo.alert_outbox
              where status = 'pending' and attempts = 0 and created_at < $1",
        )
        .bind(before)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The alert outbox, newest first, from the `offset`th.
    pub async fn outbox_recent(&self, limit: i64, offset: i64) -> Result<Vec<OutboxEntry>> {
        Ok(sqlx::query_as(
            "select id, created_at, kind, template, step, object_id, status, attempts, last_error
               from workdo.alert_outbox order by id desc limit $1 offset $2",
        )
        .bind(limit.clamp(1, 10_000))
        .bind(offset.max(0))
        .fetch_all(&self.pool)
        .await?)
    }
}
