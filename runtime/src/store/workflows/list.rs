//! Workflows page by page, and one deleted by id.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::store::history::events::{EventBuf, NewEvent};
use crate::store::{Result, Store, StoreError};

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

impl Store {
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

    /// Delete workflow `id` with its steps.
    ///
    /// # Errors
    /// [`StoreError::UnknownWorkflow`] when there is none.
    pub async fn workflow_delete_by_id(&self, id: i64, actor: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        crate::store::steps::lock_steps_of_workflow(&mut tx, id).await?;
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
}
