//! Objects: registering them, their properties and their documents.

use std::collections::BTreeMap;

use serde_json::Value;

use super::events::{EventBuf, NewEvent};
use super::{Result, Store, object_id};

impl Store {
    /// One named document of an object, if it has it.
    pub async fn document(&self, object: &str, name: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "select content from workdo.documents where object_id = $1 and name = $2",
        )
        .bind(object)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Register an object, or merge `properties` into an existing one and replace the named
    /// documents. Returns whether it was new.
    pub async fn object_put(
        &self,
        id: &str,
        properties: &BTreeMap<String, Value>,
        documents: &BTreeMap<String, String>,
        actor: &str,
    ) -> Result<bool> {
        let id = &object_id(id)?;
        let mut tx = self.pool.begin().await?;
        let props = serde_json::to_value(properties).unwrap_or(Value::Null);
        let created: bool = sqlx::query_scalar(
            "insert into workdo.objects (id, properties) values ($1, jsonb_strip_nulls($2))
             on conflict (id) do update
                set properties = (workdo.objects.properties || $2)
                                 - array(select key from jsonb_each($2) where value = 'null'::jsonb),
                    updated_at = now()
             returning (xmax = 0)",
        )
        .bind(id)
        .bind(&props)
        .fetch_one(&mut *tx)
        .await?;
        documents_put(&mut tx, id, documents).await?;
        let mut events = EventBuf::default();
        events.push(NewEvent::new(id, if created { "object_registered" } else { "object_updated" }, actor).detail(serde_json::json!({ "properties": props, "documents": documents.keys().collect::<Vec<_>>() })));
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(created)
    }
}

/// Replace (or add) named documents of an object.
pub(crate) async fn documents_put(
    conn: &mut sqlx::PgConnection,
    object: &str,
    documents: &BTreeMap<String, String>,
) -> Result<()> {
    for (name, content) in documents {
        sqlx::query(
            "insert into workdo.documents (object_id, name, content) values ($1, $2, $3)
             on conflict (object_id, name) do update
                set content = excluded.content, updated_at = now()",
        )
        .bind(object)
        .bind(name)
        .bind(content)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The event recording that an object (version) was registered.
pub(super) fn object_registered(events: &mut EventBuf, id: &str, version: i32, actor: &str) {
    events.push(NewEvent::new(id, "object_registered", actor).version(version));
}
