//! Starting a template on objects: every check of a start, set-based for objects with no
//! per-object case, the workflows inserted in one statement, their first steps by `initial.rs`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{Postgres, Transaction};

use crate::model::status::Status;
use crate::model::template::Template;
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};
use crate::store::objects::object_registered;
use crate::store::{Result, Store, StoreError, TraceStart, check_lane, object_id};

pub use crate::store::requests::StartRequest;

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct WorkflowRow {
    pub id: i64,
    pub template: String,
    pub template_id: i64,
    /// The SHA-256 of the template version this workflow runs on (it is locked to it).
    pub template_sha256: String,
    pub version: i32,
    pub status: String,
    pub active: bool,
    pub priority: i32,
    pub lane: String,
    pub start_at: DateTime<Utc>,
    #[schema(value_type = Object)]
    pub context: Value,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    /// Dynamic dispatch: what each observer matched (`observed`: per rule, its operation,
    /// generator, bricklets and fragments), each generator's activation set (`actsets`) and what
    /// it composed (`composed`). Absent when the workflow has none.
    #[serde(skip_serializing_if = "no_dispatch")]
    #[schema(value_type = Object)]
    pub dispatch: Value,
}

/// A workflow that was started.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Started {
    pub workflow_id: i64,
    pub object_id: String,
    pub template: String,
    pub version: i32,
    /// Whether it replaced an earlier workflow of the same template and object version.
    pub replaced: bool,
    pub ready: Vec<String>,
    /// A machine job (whose start may have sent it signals to take).
    #[serde(skip)]
    pub machine: bool,
}

/// The largest a workflow's context may be when it starts, as JSON (64 KiB).
pub const MAX_CONTEXT_BYTES: usize = 64 * 1024;

#[derive(sqlx::FromRow)]
struct ObjectRow {
    version: i32,
}

impl Store {
    /// Start `req.template` (its current version) on every object in `req.objects`, in one
    /// transaction. An object not registered yet is registered. Starting the same template again
    /// for the same object version replaces its steps; a newer object version makes the steps of
    /// older versions inactive. Run again, up to three times, when the database aborts it to
    /// break a deadlock or for a serialization failure.
    pub async fn workflow_start(&self, req: &StartRequest) -> Result<Vec<Started>> {
        // A start the database aborts for another transaction's sake — a deadlock broken with a
        // runtime's commit that holds the object's steps and then updates the object, a
        // serialization failure — left nothing behind and means the same run again.
        let out = crate::store::again_on_conflict(|| async move {
            let mut tx = self.pool.begin().await?;
            let out = self.workflow_start_in(&mut tx, req).await?;
            tx.commit().await?;
            Ok(out)
        })
        .await?;
        // Machine jobs take the signals their start sent them, in order, now; only jobs whose
        // inbox holds any (one query: opening every job's inbox was four round trips a job).
        let jobs: Vec<i64> = out
            .iter()
            .filter(|s| s.machine)
            .map(|s| s.workflow_id)
            .collect();
        if !jobs.is_empty() {
            let waiting: std::collections::HashSet<i64> = sqlx::query_scalar(
                "select distinct workflow_id from workdo.signals
                  where workflow_id = any($1) and processed_at is null",
            )
            .bind(&jobs)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .collect();
            for id in jobs.into_iter().filter(|id| waiting.contains(id)) {
                self.inbox_run_job(id, 1000).await?;
            }
        }
        Ok(out)
    }

    /// [`Store::workflow_start`] inside a transaction of the caller's.
    pub async fn workflow_start_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        req: &StartRequest,
    ) -> Result<Vec<Started>> {
        check_lane(&req.lane)?;
        // A string too: the workflow service keeps one as it is given (its clients may send
        // one), and gives it back as JSON text.
        if !req.context.is_object() && !req.context.is_string() {
            return Err(StoreError::Invalid {
                field: "context",
                value: req.context.to_string().chars().take(80).collect(),
                reason: "must be a JSON object (or a string)",
            });
        }
        // Postgres stores no NUL in jsonb: said by name, not as its "unsupported Unicode escape".
        if let Some(at) = crate::model::nul_at(&req.context) {
            return Err(StoreError::Invalid {
                field: "context",
                value: if at.is_empty() {
                    "(the whole context)".into()
                } else {
                    at
                },
                reason: "holds a NUL character (\\u0000), which Postgres cannot store",
            });
        }
        // Every step of the workflow carries its context to its function, and the workflow
        // service's XML repeats it on every process: kept small.
        let size = req.context.to_string().len();
        if size > MAX_CONTEXT_BYTES {
            return Err(StoreError::Invalid {
                field: "context",
                value: format!("{size} bytes"),
                reason: "is over 64 KiB",
            });
        }
        if let Some(v) = req.version
            && v < 1
        {
            return Err(StoreError::Invalid {
                field: "version",
                value: v.to_string(),
                reason: "object versions start at 1",
            });
        }
        // Each id in its one spelling (`bc123df4567` is `druid:bc123df4567`).
        let objects = req
            .objects
            .iter()
            .map(|o| object_id(o))
            .collect::<Result<Vec<String>>>()?;
        // Through this transaction's connection (see `step_set`).
        let template = Self::template_current_in(&mut **tx, &req.template).await?;
        let mut events = EventBuf::default();
        let mut ready = ReadyKeys::default();
        // Objects needing no per-object case go through one set-based insert; re-creates,
        // version changes and repeated ids take the object-by-object path.
        let known: Vec<(String, i32, bool)> = sqlx::query_as(
            "select o.id, o.version,
                    exists (select 1 from workdo.workflows w
                             where w.object_id = o.id and w.template = $2 and w.version = coalesce($3, o.version))
               from workdo.objects o where o.id = any($1) order by o.id for update",
        )
        .bind(&objects)
        .bind(&req.template)
        .bind(req.version)
        .fetch_all(&mut **tx)
        .await?;
        let mut seen = std::collections::HashSet::new();
        let mut fresh = Vec::new();
        let mut slow = Vec::new();
        for o in &objects {
            let first = seen.insert(o.as_str());
            match known.iter().find(|k| &k.0 == o) {
                _ if !first => slow.push(o.clone()),
                None => fresh.push(Entry {
                    object: o.clone(),
                    version: req.version.unwrap_or(1),
                    new: true,
                    replaced: None,
                }),
                Some((_, v, exists)) if !exists && req.version.is_none_or(|r| r == *v) => fresh
                    .push(Entry {
                        object: o.clone(),
                        version: *v,
                        new: false,
                        replaced: None,
                    }),
                Some(_) => slow.push(o.clone()),
            }
        }
        let mut out = insert_workflows(
            tx,
            &mut events,
            req,
            template.id,
            &template.spec,
            &fresh,
            self.trace_start,
        )
        .await?;
        if !out.is_empty() && out.iter().any(|s| !s.ready.is_empty()) {
            ready.add(&req.template, &out[0].ready);
        }
        for object in &slow {
            let started = start_one(
                self,
                tx,
                &mut events,
                req,
                template.id,
                &template.spec,
                object,
            )
            .await?;
            ready.add(&req.template, &started.ready);
            out.push(started);
        }
        // Each new workflow runs the deployed functions current now, whatever comes later: those
        // its template names, and (with generators) those its loaded bricklets name.
        let mut deployed: Vec<String> = template
            .spec
            .deployed_functions()
            .into_iter()
            .filter_map(|(name, fixed)| fixed.is_none().then_some(name))
            .collect();
        if template.spec.steps.iter().any(|s| s.generate.is_some()) {
            for name in Self::bricklets_deployed_in(tx).await? {
                if !deployed.contains(&name) {
                    deployed.push(name);
                }
            }
        }
        if !deployed.is_empty() {
            let ids: Vec<i64> = out.iter().map(|s| s.workflow_id).collect();
            Self::functions_pin_in(tx, &ids, &deployed).await?;
        }
        if template.spec.machine.is_some() {
            for s in &out {
                self.machine_started(tx, &mut events, &mut ready, s.workflow_id, &template.spec)
                    .await?;
            }
        }
        events.flush(tx).await?;
        ready.notify(tx).await?;
        Ok(out)
    }
}

async fn start_one(
    store: &Store,
    tx: &mut Transaction<'_, Postgres>,
    events: &mut EventBuf,
    req: &StartRequest,
    template_id: i64,
    spec: &Template,
    object: &str,
) -> Result<Started> {
    let trace_start = store.trace_start;
    // Register on first sight (the workflow service keeps no separate registry).
    let existing: Option<ObjectRow> =
        sqlx::query_as("select version from workdo.objects where id = $1 for update")
            .bind(object)
            .fetch_optional(&mut **tx)
            .await?;
    let version = match (&existing, req.version) {
        (_, Some(v)) => v,
        (Some(o), None) => o.version,
        (None, None) => 1,
    };
    match existing {
        None => {
            sqlx::query("insert into workdo.objects (id, version) values ($1, $2)")
                .bind(object)
                .bind(version)
                .execute(&mut **tx)
                .await?;
            object_registered(events, object, version, &req.actor);
            crate::store::objects::registered_in(tx, &[object.to_string()], &[version]).await?;
        }
        Some(o) if version > o.version => {
            sqlx::query("update workdo.objects set version = $2, updated_at = now() where id = $1")
                .bind(object)
                .bind(version)
                .execute(&mut **tx)
                .await?;
            // A new object version: the older versions' work leaves the queues (their steps
            // locked first, as a commit locks steps before their workflows).
            crate::store::steps::lock_steps_of_object(tx, object, None, None, Some(version))
                .await?;
            sqlx::query("update workdo.workflows set active = false where object_id = $1 and version < $2 and active")
                .bind(object)
                .bind(version)
                .execute(&mut **tx)
                .await?;
            let n = sqlx::query("update workdo.steps set active = false, updated_at = now()
                  where workflow_id in (select id from workdo.workflows where object_id = $1 and version < $2)
                    and active")
                .bind(object)
                .bind(version)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            events.push(
                NewEvent::new(object, "versions_deactivated", &req.actor)
                    .version(version)
                    .detail(serde_json::json!({"older_than": version, "steps": n})),
            );
        }
        Some(o) if version < o.version => {
            return Err(StoreError::OldVersion {
                object: object.to_string(),
                asked: version,
                current: o.version,
            });
        }
        Some(_) => {}
    }
    // Re-create semantics: the same template on the same object version replaces its steps.
    crate::store::steps::lock_steps_of_object(tx, object, Some(&req.template), Some(version), None)
        .await?;
    // A restarted parent's children are cancelled, not left without a parent.
    let old: Option<i64> = sqlx::query_scalar(
        "select id from workdo.workflows where object_id = $1 and template = $2 and version = $3",
    )
    .bind(object)
    .bind(&req.template)
    .bind(version)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(old) = old {
        store.cancel_children_of(tx, &[old], &req.actor).await?;
    }
    let replaced: Option<i64> = sqlx::query_scalar(
        "delete from workdo.workflows where object_id = $1 and template = $2 and version = $3 returning id",
    )
    .bind(object)
    .bind(&req.template)
    .bind(version)
    .fetch_optional(&mut **tx)
    .await?;
    if let Some(old) = replaced {
        Store::functions_unpin_in(tx, &[old]).await?;
    }

    let mut started = insert_workflows(
        tx,
        events,
        req,
        template_id,
        spec,
        &[Entry {
            object: object.to_string(),
            version,
            new: false,
            replaced,
        }],
        trace_start,
    )
    .await?;
    started
        .pop()
        .ok_or_else(|| StoreError::UnknownObject(object.to_string()))
}

impl Store {
    /// Delete the object's workflows of `template` (all of them when `None`), optionally of one
    /// object version, with their steps. Returns how many workflows were deleted.
    pub async fn workflow_delete(
        &self,
        object: &str,
        template: Option<&str>,
        version: Option<i32>,
        actor: &str,
    ) -> Result<u64> {
        let mut tx = self.pool.begin().await?;
        crate::store::steps::lock_steps_of_object(&mut tx, object, template, version, None).await?;
        // What they forked is cancelled with them, not left without a parent.
        let doomed: Vec<i64> = sqlx::query_scalar(
            "select id from workdo.workflows
              where object_id = $1 and ($2::text is null or template = $2) and ($3::int is null or version = $3)",
        )
        .bind(object)
        .bind(template)
        .bind(version)
        .fetch_all(&mut *tx)
        .await?;
        self.cancel_children_of(&mut tx, &doomed, actor).await?;
        let deleted: Vec<(i64, String, i32)> = sqlx::query_as(
            "delete from workdo.workflows
              where object_id = $1 and ($2::text is null or template = $2) and ($3::int is null or version = $3)
             returning id, template, version",
        )
        .bind(object)
        .bind(template)
        .bind(version)
        .fetch_all(&mut *tx)
        .await?;
        // The milestones those workflows' steps reached go with them (the workflow service
        // computes a lifecycle from the step rows a delete removes); the events keep the story.
        let ids: Vec<i64> = deleted.iter().map(|(id, _, _)| *id).collect();
        Self::functions_unpin_in(&mut tx, &ids).await?;
        sqlx::query("delete from workdo.milestones where workflow_id = any($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await?;
        let mut events = EventBuf::default();
        for (id, t, v) in &deleted {
            events.push(
                NewEvent::new(object, "workflow_deleted", actor)
                    .workflow(*id)
                    .template(t)
                    .version(*v),
            );
        }
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(deleted.len() as u64)
    }
}

/// One workflow to insert: its object and version, whether the object must be registered first,
/// and the workflow it replaces (re-create semantics), if any.
pub(crate) struct Entry {
    object: String,
    version: i32,
    new: bool,
    replaced: Option<i64>,
}

/// Insert workflows of the template with their steps, bootstrap milestones and events: one
/// statement per table for all entries. Per-object cases (re-creation, a new object version) are
/// settled by the caller before.
///
/// Long on purpose: one statement per table for all the objects at once (workflows, steps,
/// milestones, events), in the order the rows refer to each other; each statement binds the same
/// per-object arrays.
async fn insert_workflows(
    tx: &mut Transaction<'_, Postgres>,
    events: &mut EventBuf,
    req: &StartRequest,
    template_id: i64,
    spec: &Template,
    fresh: &[Entry],
    trace_start: Option<TraceStart>,
) -> Result<Vec<Started>> {
    if fresh.is_empty() {
        return Ok(Vec::new());
    }
    let now = Utc::now();
    let start_at = req.start_at.unwrap_or(now);
    let init = crate::store::workflows::initial::initial_steps(spec, start_at > now);
    let objects: Vec<String> = fresh.iter().map(|f| f.object.clone()).collect();
    let versions: Vec<i32> = fresh.iter().map(|f| f.version).collect();
    let new: Vec<(String, i32)> = fresh
        .iter()
        .filter(|f| f.new)
        .map(|f| (f.object.clone(), f.version))
        .collect();
    if !new.is_empty() {
        let (ids, vs): (Vec<String>, Vec<i32>) = new.iter().cloned().unzip();
        sqlx::query(
            "insert into workdo.objects (id, version) select * from unnest($1::text[], $2::int[])",
        )
        .bind(&ids)
        .bind(&vs)
        .execute(&mut **tx)
        .await?;
        for (id, v) in &new {
            object_registered(events, id, *v, &req.actor);
        }
        crate::store::objects::registered_in(tx, &ids, &vs).await?;
    }
    let traces: Vec<Option<String>> = fresh
        .iter()
        .map(|f| trace_start.and_then(|t| t(&f.object, &req.template, f.version, &req.lane)))
        .collect();
    let rows: Vec<(i64, String, i32)> = sqlx::query_as(
        "insert into workdo.workflows
            (object_id, template, template_id, version, priority, lane, start_at, context, unfinished,
             status, completed_at, trace_context, parent_id)
         select t.o, $4, $5, t.v, $6, $7, $8, $9, $10,
                case when $10 = 0 then 'completed' else 'active' end,
                case when $10 = 0 then now() end, t.tc, $11
           from unnest($1::text[], $2::int[], $3::text[]) as t(o, v, tc)
         returning id, object_id, version",
    )
    .bind(&objects)
    .bind(&versions)
    .bind(&traces)
    .bind(&req.template)
    .bind(template_id)
    .bind(req.priority)
    .bind(&req.lane)
    .bind(start_at)
    .bind(&req.context)
    .bind(init.unfinished)
    .bind(req.parent)
    .fetch_all(&mut **tx)
    .await?;
    let (wids, wobjects, wversions): (Vec<i64>, Vec<String>, Vec<i32>) =
        rows.iter()
            .fold((Vec::new(), Vec::new(), Vec::new()), |mut acc, r| {
                acc.0.push(r.0);
                acc.1.push(r.1.clone());
                acc.2.push(r.2);
                acc
            });
    let given = (&req.template, &req.lane, req.priority, start_at);
    crate::store::workflows::initial::insert_steps(
        tx,
        &init,
        given,
        (&wids, &wobjects, &wversions),
    )
    .await?;
    let bootstrap: Vec<String> = spec
        .steps
        .iter()
        .filter(|s| s.initial_status == Some(Status::Completed))
        .filter_map(|s| s.lifecycle.clone())
        .collect();
    if !bootstrap.is_empty() {
        sqlx::query(
            "insert into workdo.milestones (object_id, version, name, workflow_id)
             select w.object_id, w.version, m.name, w.id
               from unnest($1::bigint[], $2::text[], $3::int[]) as w(id, object_id, version)
              cross join unnest($4::text[]) with ordinality as m(name, n)
              order by w.id, m.n",
        )
        .bind(&wids)
        .bind(&wobjects)
        .bind(&wversions)
        .bind(&bootstrap)
        .execute(&mut **tx)
        .await?;
    }
    let future = start_at > now;
    let replaced: std::collections::HashMap<&str, Option<i64>> = fresh
        .iter()
        .map(|f| (f.object.as_str(), f.replaced))
        .collect();
    let mut out = Vec::with_capacity(rows.len());
    for (id, object, version) in rows {
        let replaced = replaced.get(object.as_str()).copied().flatten();
        events.push(NewEvent::new(&object, if replaced.is_some() {
                "workflow_replaced"
            } else {
                "workflow_started"
            }, &req.actor).workflow(id).template(&req.template).version(version).detail(serde_json::json!({"template_id": template_id, "priority": req.priority, "lane": req.lane,
                               "start_at": start_at, "replaced_workflow": replaced})));
        out.push(Started {
            machine: spec.machine.is_some(),
            workflow_id: id,
            object_id: object,
            template: req.template.clone(),
            version,
            replaced: replaced.is_some(),
            ready: if future {
                Vec::new()
            } else {
                init.ready.clone()
            },
        });
    }
    Ok(out)
}

/// Whether a workflow has no dispatch state to show.
fn no_dispatch(v: &Value) -> bool {
    v.as_object().is_none_or(serde_json::Map::is_empty)
}
