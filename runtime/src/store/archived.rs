//! Reading the archive (`workdo archive` moved finished workflows there, each with its steps
//! and events as one record): what an object's page lists and shows.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{Result, Store};

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
