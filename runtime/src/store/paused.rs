//! Paused queues (`workdo pause TEMPLATE:STEP`): while paused, no worker in any process claims
//! the step's ready steps (workdo.claim checks `workdo.paused_steps`), the Sidekiq hand-off
//! pushes none, and the workflow service's queue route answers an empty queue; steps keep
//! becoming ready and wait. Resuming wakes the step's workers at once.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{READY_CHANNEL, Result, Store};

/// A paused step.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Paused {
    pub template: String,
    pub step: String,
    pub paused_at: DateTime<Utc>,
    pub paused_by: String,
    pub reason: Option<String>,
}

impl Store {
    /// Pause `template:step` (a template step, or a generated step's `bricklet/step`). Returns
    /// whether it was running before (pausing a paused step keeps its first pause).
    pub async fn step_pause(
        &self,
        template: &str,
        step: &str,
        actor: &str,
        reason: Option<&str>,
    ) -> Result<bool> {
        self.step_known(template, step).await?;
        let new = sqlx::query(
            "insert into workdo.paused_steps (template, step, paused_by, reason)
             values ($1, $2, $3, $4) on conflict do nothing",
        )
        .bind(template)
        .bind(step)
        .bind(actor)
        .bind(reason)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(new == 1)
    }

    /// Resume `template:step`, waking its workers. Returns whether it was paused.
    pub async fn step_resume(&self, template: &str, step: &str) -> Result<bool> {
        self.step_known(template, step).await?;
        let mut tx = self.pool.begin().await?;
        let gone = sqlx::query("delete from workdo.paused_steps where template = $1 and step = $2")
            .bind(template)
            .bind(step)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        // Idle workers of the step wait for this notification; it names their key.
        sqlx::query("select pg_notify($1, $2)")
            .bind(READY_CHANNEL)
            .bind(format!("{template}:{step}"))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone == 1)
    }

    /// Every paused step, by template and step.
    pub async fn paused_list(&self) -> Result<Vec<Paused>> {
        Ok(sqlx::query_as(
            "select template, step, paused_at, paused_by, reason from workdo.paused_steps
              order by template, step",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Whether `template:step` is paused.
    pub async fn step_paused(&self, template: &str, step: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "select exists (select 1 from workdo.paused_steps where template = $1 and step = $2)",
        )
        .bind(template)
        .bind(step)
        .fetch_one(&self.pool)
        .await?)
    }
}
