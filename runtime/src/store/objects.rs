//! Objects: registering them, their properties and their documents.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::events::{EventBuf, NewEvent};
use super::{Result, Store, object_id};

/// An object to register or update: its id, properties to merge (a null removes one) and
/// documents to replace.
#[derive(Debug, Clone, Default)]
pub struct NewObject {
    pub id: String,
    pub properties: BTreeMap<String, Value>,
    pub documents: BTreeMap<String, String>,
}

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
        let one = NewObject {
            id: id.to_string(),
            properties: properties.clone(),
            documents: documents.clone(),
        };
        Ok(self.objects_put(std::slice::from_ref(&one), actor).await?[0])
    }

    /// Register or update many objects in one transaction: all of them or (an error) none.
    /// Returns, for each, whether it was new.
    pub async fn objects_put(&self, objects: &[NewObject], actor: &str) -> Result<Vec<bool>> {
        let mut tx = self.pool.begin().await?;
        let mut events = EventBuf::default();
        let mut created = Vec::with_capacity(objects.len());
        for o in objects {
            let id = &object_id(&o.id)?;
            let props = serde_json::to_value(&o.properties).unwrap_or(Value::Null);
            let new: bool = sqlx::query_scalar(
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
            documents_put(&mut tx, id, &o.documents).await?;
            events.push(NewEvent::new(id, if new { "object_registered" } else { "object_updated" }, actor).detail(serde_json::json!({ "properties": props, "documents": o.documents.keys().collect::<Vec<_>>() })));
            created.push(new);
        }
        for o in objects.iter().filter(|o| !o.documents.is_empty()) {
            self.observers_watch(&mut tx, &object_id(&o.id)?, &o.documents, actor)
                .await?;
        }
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// Observers that `watch` a document just replaced observe it again, in the object's
    /// workflows still running, in the transaction that replaces it (a crash between the two
    /// would lose the observation): one that has run is put back in its queue at once; one
    /// running now is marked in its workflow's record, and its own commit puts it back (it may
    /// have read the document before). The workflow's row, which that commit holds from
    /// reading the record to committing, orders the two. Returns how many were put back or
    /// marked.
    pub(super) async fn observers_watch(
        &self,
        tx: &mut sqlx::PgConnection,
        object: &str,
        documents: &BTreeMap<String, String>,
        actor: &str,
    ) -> Result<usize> {
        let running: Vec<(i64, i64)> = sqlx::query_as(
            "select id, template_id from workdo.workflows
              where object_id = $1 and active and status <> 'completed' order by id",
        )
        .bind(object)
        .fetch_all(&mut *tx)
        .await?;
        let mut again = Vec::new();
        let mut marked = 0;
        for (workflow, template_id) in running {
            let spec = self.template_by_id(template_id).await?.spec;
            let watching: Vec<String> = spec
                .steps
                .iter()
                .filter(|s| {
                    s.observe
                        .as_ref()
                        .is_some_and(|o| o.watch && documents.contains_key(&o.document))
                })
                .map(|s| s.name.clone())
                .collect();
            if watching.is_empty() {
                continue;
            }
            let record: Option<Value> = sqlx::query_scalar(
                "select dispatch from workdo.workflows where id = $1 for update",
            )
            .bind(workflow)
            .fetch_optional(&mut *tx)
            .await?;
            let found: Vec<(i64, String, String)> = sqlx::query_as(
                "select id, name, status from workdo.steps
                  where workflow_id = $1 and name = any($2) and status in ('completed', 'started')",
            )
            .bind(workflow)
            .bind(&watching)
            .fetch_all(&mut *tx)
            .await?;
            let mut running_now = Vec::new();
            for (id, name, status) in found {
                if status == "completed" {
                    again.push(id);
                } else {
                    running_now.push(name);
                }
            }
            if running_now.is_empty() {
                continue;
            }
            let mut record = record.filter(Value::is_object).unwrap_or_else(|| json!({}));
            let mut names: Vec<String> = record["observe_again"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            for n in running_now {
                if !names.contains(&n) {
                    names.push(n);
                    marked += 1;
                }
            }
            record["observe_again"] = json!(names);
            sqlx::query("update workdo.workflows set dispatch = $2 where id = $1")
                .bind(workflow)
                .bind(&record)
                .execute(&mut *tx)
                .await?;
        }
        let changes: Vec<super::Change> =
            again.iter().map(|id| super::bulk::retried(*id)).collect();
        let applied = Self::steps_apply(tx, &changes, &format!("document:{actor}")).await?;
        Ok(applied.changed.len() + marked)
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
