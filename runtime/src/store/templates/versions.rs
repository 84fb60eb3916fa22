//! A template's versions, and one made current again.

use crate::store::templates::save::TemplateRow;
use crate::store::{Result, Store, StoreError};

impl Store {
    /// Every stored version of `name`, oldest first.
    pub async fn template_versions(&self, name: &str) -> Result<Vec<TemplateRow>> {
        let ids: Vec<i64> =
            sqlx::query_scalar("select id from workdo.templates where name = $1 order by id")
                .bind(name)
                .fetch_all(&self.pool)
                .await?;
        if ids.is_empty() {
            return Err(StoreError::UnknownTemplate(name.to_string()));
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(self.template_by_id(id).await?);
        }
        Ok(out)
    }

    /// Make the version of `name` whose SHA-256 starts with `sha` the current one.
    pub async fn template_use(&self, name: &str, sha: &str) -> Result<TemplateRow> {
        let mut tx = self.pool.begin().await?;
        crate::store::templates::save::lock_name(&mut tx, name).await?;
        let ids: Vec<i64> = sqlx::query_scalar(
            "select id from workdo.templates where name = $1 and starts_with(sha256, $2)",
        )
        .bind(name)
        .bind(sha)
        .fetch_all(&mut *tx)
        .await?;
        let id = match ids.as_slice() {
            [one] => *one,
            [] => {
                // A name that names nothing is said as such (exit 2), not as a bad hash.
                let known: bool = sqlx::query_scalar(
                    "select exists (select 1 from workdo.templates where name = $1)",
                )
                .bind(name)
                .fetch_one(&mut *tx)
                .await?;
                if !known {
                    return Err(StoreError::UnknownTemplate(name.to_string()));
                }
                return Err(StoreError::Invalid {
                    field: "sha256",
                    value: sha.to_string(),
                    reason: "no version of the template has it",
                });
            }
            _ => {
                return Err(StoreError::Invalid {
                    field: "sha256",
                    value: sha.to_string(),
                    reason: "names several versions: give more of it",
                });
            }
        };
        crate::store::templates::save::make_current(&mut tx, name, id).await?;
        tx.commit().await?;
        self.template_by_id(id).await
    }
}
