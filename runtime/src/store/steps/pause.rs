//! Paused queues (`workdo pause TEMPLATE:STEP`): while paused, no worker in any process claims
//! the step's ready steps (workdo.claim checks `workdo.paused_steps`), the Sidekiq hand-off
//! pushes none, and the workflow service's queue route answers an empty queue; steps keep
//! becoming ready and wait. Resuming wakes the step's workers at once.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::store::{READY_CHANNEL, Result, Store, StoreError};

/// A paused step.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Paused {
    pub template: String,
    pub step: String,
    pub paused_at: DateTime<Utc>,
    pub paused_by: String,
    pub reason: Option<String>,
}

/// The queue a step name is claimed by, which is what a pause names: a template step is its
/// own; a generated step's instance (`gen/b#2/s`) or its counted name (`gen/b/s`) is its
/// bricklet step `b/s` (every instance, as one worker claims them); a machine's call
/// (`call/f#3`) is `call/f`.
pub fn queue_key(step: &str) -> String {
    let strip = |p: &str| p.split('#').next().unwrap_or(p).to_string();
    match step.split('/').collect::<Vec<_>>().as_slice() {
        [one] => (*one).to_string(),
        [a, b] => format!("{}/{}", strip(a), strip(b)),
        [_, b, s] => format!("{}/{}", strip(b), strip(s)),
        _ => step.to_string(),
    }
}

/// The longest reason a pause keeps.
const REASON_MAX: usize = 500; // as its message says

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
        let step = &queue_key(step);
        self.queue_known(template, step).await?;
        if reason.is_some_and(|r| r.chars().count() > REASON_MAX) {
            return Err(StoreError::Invalid {
                field: "reason",
                value: reason.unwrap_or_default().chars().take(40).collect(),
                reason: "a pause's reason is at most 500 characters",
            });
        }
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

    /// Resume `template:step`, waking its workers. Returns whether it was paused. (A queue
    /// with no step left, its instances archived, can still be resumed; a name that was not
    /// paused must name a queue.)
    pub async fn step_resume(&self, template: &str, step: &str) -> Result<bool> {
        let step = &queue_key(step);
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
        // Nothing was paused there: a name that names no queue is a typo to say (exit 2, 404),
        // not "was not paused". (A paused queue whose steps are all archived resumes above.)
        if gone == 0 {
            self.queue_known(template, step).await?;
        }
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

    /// Whether `template:step` (or the queue it is claimed by) is paused.
    pub async fn step_paused(&self, template: &str, step: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "select exists (select 1 from workdo.paused_steps where template = $1 and step = $2)",
        )
        .bind(template)
        .bind(queue_key(step))
        .fetch_one(&self.pool)
        .await?)
    }

    /// Whether a queue key names something that can be claimed: a template step; a bricklet
    /// step of a bricklet loaded (or inline in the template) as `b/s`, before any instance
    /// exists too; a machine's function as `call/f`; or any step there is now.
    async fn queue_known(&self, template: &str, key: &str) -> Result<()> {
        let Some((b, st)) = key.split_once('/') else {
            return self.step_known(template, key).await;
        };
        let t = self.template_current(template).await?;
        let known = if b == "call" {
            t.spec
                .machine
                .as_ref()
                .is_some_and(|m| m.functions.contains_key(st))
        } else {
            let has = |br: &crate::model::spec::Bricklet| {
                br.name == b && br.steps.iter().any(|x| x.name == st)
            };
            t.spec.bricklets.iter().any(has)
                || self
                    .bricklet_list()
                    .await?
                    .iter()
                    .any(|r| r.name == b && r.spec.steps.iter().any(|x| x.name == st))
        };
        if known {
            Ok(())
        } else {
            self.step_known(template, key).await
        }
    }
}
