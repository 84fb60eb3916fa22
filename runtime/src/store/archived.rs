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
