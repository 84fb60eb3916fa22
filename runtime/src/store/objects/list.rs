//! Objects page by page, found by id or property, and deleted with their workflows.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::store::history::events::{EventBuf, NewEvent};
use crate::store::{Result, Store, StoreError};

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

    /// Delete object `id` with its documents, workflows, steps and milestones (its events stay:
    /// the log is append-only, and says it was deleted). Run again when the database aborts it
    /// for another transaction's sake: at REPEATABLE READ, a start that has just committed a
    /// workflow on the object makes the workflows' cascade fail with a serialization error,
    /// and the delete run again takes that workflow too.
    pub async fn object_delete(&self, id: &str, actor: &str) -> Result<()> {
        crate::store::again_on_conflict(|| self.object_delete_once(id, actor)).await
    }

    async fn object_delete_once(&self, id: &str, actor: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        // The object, then its workflows' steps, then (the delete) its workflows: the order a
        // start re-creating a workflow and `objects_put` take them in.
        sqlx::query("select 1 from workdo.objects where id = $1 for update")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        crate::store::steps::lock_steps_of_object(&mut tx, id, None, None, None).await?;
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
}
