//! Registering objects, their properties and documents, and the observers a changed document
//! puts back to work.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};

use crate::store::history::events::{EventBuf, NewEvent};
use crate::store::{Result, Store, StoreError, object_id};

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
    /// Returns, for each, whether it was new. A transaction the database aborts to break a
    /// deadlock (with a commit of the runtime's over the same workflows) or a serialization
    /// failure is run again, up to three times: it is an upsert, and nothing of it committed.
    pub async fn objects_put(&self, objects: &[NewObject], actor: &str) -> Result<Vec<bool>> {
        crate::store::again_on_conflict(|| self.objects_put_once(objects, actor)).await
    }

    async fn objects_put_once(&self, objects: &[NewObject], actor: &str) -> Result<Vec<bool>> {
        let mut tx = self.pool.begin().await?;
        let mut events = EventBuf::default();
        let mut created = Vec::with_capacity(objects.len());
        let mut replaced = Vec::new();
        for o in objects {
            let id = &object_id(&o.id)?;
            let props = serde_json::to_value(&o.properties).unwrap_or(Value::Null);
            check_storable(id, &props, &o.documents)?;
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
            let changed = documents_put(&mut tx, id, &o.documents).await?;
            let mut detail =
                json!({ "properties": props, "documents": o.documents.keys().collect::<Vec<_>>() });
            // Documents given as they already were are kept, and wake no observer: say which.
            let unchanged: Vec<&String> = o
                .documents
                .keys()
                .filter(|d| !changed.contains(d))
                .collect();
            if !unchanged.is_empty() {
                detail["unchanged"] = json!(unchanged);
            }
            if !changed.is_empty() {
                replaced.push((id.to_string(), changed));
            }
            events.push(
                NewEvent::new(
                    id,
                    if new {
                        "object_registered"
                    } else {
                        "object_updated"
                    },
                    actor,
                )
                .detail(detail),
            );
            if new {
                registered_in(&mut tx, std::slice::from_ref(id), &[1]).await?;
            }
            created.push(new);
        }
        self.observers_watch(&mut tx, &replaced, None, actor)
            .await?;
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// Observers that `watch` a document whose content just changed (`replaced`: objects and
    /// their documents) observe it again, in the objects' workflows still running, in the
    /// transaction that changes it (a crash between the two would lose the observation): one
    /// that has run is put back in its queue at once; one running now is marked in its
    /// workflow's record, and its own commit puts it back (it may have read the document
    /// before). `except`: the step whose result wrote the documents, which does not wake
    /// itself (an observer that writes its own document would run for ever).
    ///
    /// The observers' steps are locked first, then the workflows, each in id order — the order
    /// every commit takes. The step's lock also keeps a claim from taking a queued observer,
    /// and reading the document this transaction replaces, until it commits; the workflow's,
    /// which an observer's commit holds from reading the record to committing, orders the
    /// mark and that commit.
    pub(crate) async fn observers_watch(
        &self,
        tx: &mut sqlx::PgConnection,
        replaced: &[(String, Vec<String>)],
        except: Option<i64>,
        actor: &str,
    ) -> Result<()> {
        if replaced.is_empty() {
            return Ok(());
        }
        // An object named twice in one call: its documents together.
        let mut by_object: HashMap<&str, Vec<&str>> = HashMap::new();
        for (object, documents) in replaced {
            by_object
                .entry(object.as_str())
                .or_default()
                .extend(documents.iter().map(String::as_str));
        }
        let objects: Vec<&str> = by_object.keys().copied().collect();
        let running: Vec<(i64, String, i64, String)> = sqlx::query_as(
            "select w.id, w.object_id, w.template_id, t.sha256
               from workdo.workflows w join workdo.templates t on t.id = w.template_id
              where w.object_id = any($1) and w.active and w.status <> 'completed'",
        )
        .bind(&objects)
        .fetch_all(&mut *tx)
        .await?;
        let (mut workflows, mut names) = (Vec::new(), Vec::new());
        for (workflow, object, template_id, sha256) in running {
            let Some(documents) = by_object.get(object.as_str()) else {
                continue;
            };
            // Through this transaction's connection (a second from the pool could wait for
            // ever), and from the cache after the first time. A version this binary cannot
            // read watches nothing here; the document is written all the same.
            let spec = match self.spec_by_id(&mut *tx, template_id, &sha256).await {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::warn!(workflow, error = %e, "cannot read the template to wake its watching observers");
                    continue;
                }
            };
            for s in &spec.steps {
                if s.observe
                    .as_ref()
                    .is_some_and(|o| o.watch && documents.contains(&o.document.as_str()))
                {
                    workflows.push(workflow);
                    names.push(s.name.clone());
                }
            }
        }
        if workflows.is_empty() {
            return Ok(());
        }
        let found: Vec<(i64, i64, String, String)> = sqlx::query_as(
            "select s.id, s.workflow_id, s.name, s.status
               from workdo.steps s
               join unnest($1::bigint[], $2::text[]) as w(id, name)
                 on s.workflow_id = w.id and s.name = w.name
              where s.id is distinct from $3
              order by s.id for update of s",
        )
        .bind(&workflows)
        .bind(&names)
        .bind(except)
        .fetch_all(&mut *tx)
        .await?;
        // Their workflows, locked, and only those still running: one whose last step completed
        // while this waited for an observer's lock stays completed (reopening it would tell a
        // parent its child was done, then not).
        let mut ids: Vec<i64> = found.iter().map(|(_, w, _, _)| *w).collect();
        ids.sort_unstable();
        ids.dedup();
        let running: HashSet<i64> = sqlx::query_scalar(
            "select id from workdo.workflows
              where id = any($1) and status <> 'completed' order by id for update",
        )
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        let (mut again, mut marked_workflows, mut marked) = (Vec::new(), Vec::new(), Vec::new());
        for (id, workflow, name, status) in found {
            match status.as_str() {
                _ if !running.contains(&workflow) => {}
                "completed" => again.push(crate::store::steps::bulk::retried(id)),
                "started" => {
                    marked_workflows.push(workflow);
                    marked.push(name);
                }
                _ => {}
            }
        }
        let marked: Vec<&str> = marked.iter().map(String::as_str).collect();
        set_observe_again(&mut *tx, &marked_workflows, &marked, true).await?;
        Self::steps_apply(tx, &again, &format!("document:{actor}")).await?;
        Ok(())
    }
}

/// Mark (`on`) or unmark observers `names[i]` of workflows `workflows[i]` in their workflows'
/// `dispatch` records (`observe_again`): a marked observer's result goes back to its queue
/// instead of completing (`results::stale_observations`).
pub(crate) async fn set_observe_again(
    conn: &mut sqlx::PgConnection,
    workflows: &[i64],
    names: &[&str],
    on: bool,
) -> Result<()> {
    if workflows.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "update workdo.workflows w
            set dispatch = jsonb_set(w.dispatch, '{observe_again}',
                                     (coalesce(w.dispatch -> 'observe_again', '[]') - t.names)
                                     || case when $3 then to_jsonb(t.names) else '[]' end)
           from (select id, array_agg(name) as names
                   from unnest($1::bigint[], $2::text[]) as u(id, name) group by id) t
          where w.id = t.id",
    )
    .bind(workflows)
    .bind(names)
    .bind(on)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Replace (or add) named documents of an object. Returns the names of those whose content
/// changed (a document written again as it was changes nothing, and wakes no observer).
pub(crate) async fn documents_put(
    conn: &mut sqlx::PgConnection,
    object: &str,
    documents: &BTreeMap<String, String>,
) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    for (name, content) in documents {
        let written: Option<String> = sqlx::query_scalar(
            "insert into workdo.documents (object_id, name, content) values ($1, $2, $3)
             on conflict (object_id, name) do update
                set content = excluded.content, updated_at = now()
              where workdo.documents.content is distinct from excluded.content
             returning name",
        )
        .bind(object)
        .bind(name)
        .bind(content)
        .fetch_optional(&mut *conn)
        .await?;
        changed.extend(written);
    }
    Ok(changed)
}

/// The event recording that an object (version) was registered.
/// What Postgres cannot store or a reader could not name, said by name before it is sent: a
/// NUL character in a property (key or value), in a document's name or content, and a
/// document without a name (`--document =f.xml`).
fn check_storable(
    id: &str,
    props: &Value,
    documents: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    if let Some(at) = crate::model::nul_at(props) {
        return Err(StoreError::Invalid {
            field: "properties",
            value: format!("{id}: {at}"),
            reason: "holds a NUL character (\\u0000), which Postgres cannot store",
        });
    }
    for (name, content) in documents {
        if name.trim().is_empty() {
            return Err(StoreError::Invalid {
                field: "document",
                value: format!("{id}: (no name)"),
                reason: "a document needs a name (NAME=FILE)",
            });
        }
        if name.contains('\0') || content.contains('\0') {
            return Err(StoreError::Invalid {
                field: "document",
                value: format!("{id}: {}", name.replace('\0', "\\0")),
                reason: "holds a NUL character (\\u0000), which Postgres cannot store",
            });
        }
    }
    Ok(())
}

/// The `registered` milestone of objects just created (seed 000's first milestone), with no
/// workflow: workdo's own views show it; the workflow service's lifecycle, which records
/// `registered` only through the step that declares it, leaves it out.
pub(crate) async fn registered_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ids: &[String],
    versions: &[i32],
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "insert into workdo.milestones (object_id, version, name)
         select * , 'registered' from unnest($1::text[], $2::int[])",
    )
    .bind(ids)
    .bind(versions)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub(crate) fn object_registered(events: &mut EventBuf, id: &str, version: i32, actor: &str) {
    events.push(NewEvent::new(id, "object_registered", actor).version(version));
}
