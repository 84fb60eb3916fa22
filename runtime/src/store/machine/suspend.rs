//! Suspending and resuming a machine job: a suspended job takes no signals until resumed.

use serde::Serialize;
use serde_json::json;

use super::inbox::notify_signals;
use super::row::load_job;
use crate::store::history::events::{EventBuf, NewEvent};
use crate::store::{Result, Store, StoreError};

/// What suspending or resuming a job did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Suspension {
    pub workflow_id: i64,
    pub suspended: bool,
    /// False when the job already was as asked (nothing changed).
    pub changed: bool,
    /// On resuming: the signals that had waited, taken now (signal, where it led or why not).
    #[schema(value_type = Vec<Vec<String>>)]
    pub taken: Vec<(String, String)>,
}

impl Store {
    /// Suspend (`suspend`) or resume job `id`. A suspended job takes no signals — given ones,
    /// its own, its alarms' and its children's wait in its inbox — until it is resumed; resuming
    /// takes what waited, in order. Each writes an event (`job_suspended`, `job_resumed`).
    ///
    /// # Errors
    /// [`StoreError::SignalRefused`] when `id` is not a machine job that is still running.
    pub async fn machine_suspend(&self, id: i64, suspend: bool, actor: &str) -> Result<Suspension> {
        let mut tx = self.pool.begin().await?;
        let job = load_job(&mut tx, id, " for update").await?;
        let Some(job) = job.filter(|j| j.machine.is_some() && j.status != "completed") else {
            return Err(StoreError::SignalRefused(format!(
                "workflow {id} is not a machine job that is still running"
            )));
        };
        let record = job.record().unwrap_or_default();
        let was = record.suspended;
        if was == suspend {
            tx.commit().await?;
            return Ok(Suspension {
                workflow_id: id,
                suspended: suspend,
                changed: false,
                taken: Vec::new(),
            });
        }
        sqlx::query(
            "update workdo.workflows set machine = machine || jsonb_build_object('suspended', $2::boolean)
              where id = $1",
        )
        .bind(id)
        .bind(suspend)
        .execute(&mut *tx)
        .await?;
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from workdo.signals where workflow_id = $1 and processed_at is null",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let mut events = EventBuf::default();
        events.push(
            NewEvent::new(
                &job.object_id,
                if suspend {
                    "job_suspended"
                } else {
                    "job_resumed"
                },
                actor,
            )
            .workflow(job.id)
            .template(&job.template)
            .version(job.version)
            .detail(json!({"state": record.state, "waiting": waiting})),
        );
        events.flush(&mut tx).await?;
        if !suspend {
            notify_signals(&mut tx, &[id]).await?;
        }
        tx.commit().await?;
        let taken = if suspend {
            Vec::new()
        } else {
            self.inbox_run_job(id, 1000).await?
        };
        Ok(Suspension {
            workflow_id: id,
            suspended: suspend,
            changed: true,
            taken,
        })
    }
}
