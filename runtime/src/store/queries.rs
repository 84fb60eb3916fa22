//! Reads: queues as queries, facets, an object's view, and why a step is not running.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{Result, StepRow, Store, StoreError};
use crate::store::workflows::WorkflowRow;

/// One object in a WorkDo-style queue.
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct QueueEntry {
    pub object_id: String,
    pub version: i32,
    pub lane: String,
    pub status: String,
    pub priority: i32,
    pub run_at: DateTime<Utc>,
}

/// Count of active steps per template, step and status (`scheduled` shown apart from `ready`).
#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Facet {
    pub template: String,
    pub step: String,
    pub status: String,
    pub count: i64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WorkflowView {
    #[serde(flatten)]
    pub workflow: WorkflowRow,
    pub steps: Vec<StepRow>,
    /// A machine job's state, variables, accepted signals, alarms, children and parent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<super::MachineView>,
    /// The deployed function each step runs: its version and hash, as the workflow pinned them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<crate::store::templates::functions::StepFunction>,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Milestone {
    pub name: String,
    pub version: i32,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct EventRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub workflow_id: Option<i64>,
    pub template: Option<String>,
    pub version: Option<i32>,
    pub step: Option<String>,
    pub kind: String,
    pub status: Option<String>,
    pub attempt: Option<i32>,
    pub actor: Option<String>,
    #[schema(value_type = Option<Object>)]
    pub detail: Option<Value>,
}

/// Everything about one object.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ObjectView {
    pub id: String,
    pub version: i32,
    #[schema(value_type = Object)]
    pub properties: Value,
    pub documents: Vec<String>,
    pub workflows: Vec<WorkflowView>,
    pub milestones: Vec<Milestone>,
    pub events: Vec<EventRow>,
}

/// Why a step is (not) running.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    pub step: StepRow,
    /// One line per reason.
    pub reasons: Vec<String>,
}

impl Store {
    /// An object with its workflows, steps, milestones and its last `events` events.
    pub async fn object_view(&self, id: &str, events: i64) -> Result<ObjectView> {
        let obj: Option<(String, i32, Value)> =
            sqlx::query_as("select id, version, properties from workdo.objects where id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        let (id, version, properties) = obj.ok_or_else(|| StoreError::UnknownObject(id.into()))?;
        let documents = sqlx::query_scalar(
            "select name from workdo.documents where object_id = $1 order by name",
        )
        .bind(&id)
        .fetch_all(&self.pool)
        .await?;
        let workflows: Vec<WorkflowRow> = sqlx::query_as(
            "select w.id, w.template, w.template_id, t.sha256 as template_sha256, w.version,
                    w.status, w.active, w.priority, w.lane, w.start_at, w.context, w.created_at,
                    w.completed_at, w.dispatch
               from workdo.workflows w join workdo.templates t on t.id = w.template_id
              where w.object_id = $1 order by w.version, w.created_at, w.id",
        )
        .bind(&id)
        .fetch_all(&self.pool)
        .await?;
        let steps: Vec<StepRow> = sqlx::query_as(
            "select s.* from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
              where w.object_id = $1 order by s.workflow_id, s.id",
        )
        .bind(&id)
        .fetch_all(&self.pool)
        .await?;
        let mut views = Vec::with_capacity(workflows.len());
        for w in workflows {
            let steps: Vec<StepRow> = steps
                .iter()
                .filter(|s| s.workflow_id == w.id)
                .cloned()
                .collect();
            views.push(WorkflowView {
                functions: self.workflow_step_functions(&w, &steps).await?,
                steps,
                machine: self.machine_view(w.id).await?,
                workflow: w,
            });
        }
        let workflows = views;
        let milestones = self.milestones(&id).await?;
        let mut events: Vec<EventRow> = sqlx::query_as(
            "select id, at, workflow_id, template, version, step, kind, status, attempt, actor, detail
               from workdo.events where object_id = $1 order by id desc limit $2",
        )
        .bind(&id)
        .bind(events)
        .fetch_all(&self.pool)
        .await?;
        events.reverse();
        Ok(ObjectView {
            id,
            version,
            properties,
            documents,
            workflows,
            milestones,
            events,
        })
    }

    /// Lifecycle milestones of an object, oldest first: each (name, version) once, when it
    /// was first reached (`registered` is recorded when the object is created, and again by a
    /// step that declares it).
    pub async fn milestones(&self, id: &str) -> Result<Vec<Milestone>> {
        let rows = sqlx::query_as(
            "select name, version, at from (
                select distinct on (name, version) name, version, at, id
                  from workdo.milestones where object_id = $1 order by name, version, at, id) m
              order by at, id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// The milestones the object's workflows' steps reached, oldest first: the workflow
    /// service's lifecycle, which has no `registered` of its own for a new object.
    pub async fn milestones_of_steps(&self, id: &str) -> Result<Vec<Milestone>> {
        Ok(sqlx::query_as(
            "select name, version, at from workdo.milestones
              where object_id = $1 and workflow_id is not null order by at, id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The workflow service's "active" lifecycle of `object` at `version`: every step of that
    /// version that carries a lifecycle milestone, finished or not (dated when it finished, or
    /// when it was created), but only while some step of that version is unfinished; nothing
    /// once the version is done.
    pub async fn milestones_active(&self, id: &str, version: i32) -> Result<Vec<Milestone>> {
        let rows = sqlx::query_as(
            "select s.lifecycle as name, s.version,
                    case when s.status in ('completed', 'skipped') then s.updated_at
                         else w.created_at end as at
               from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
              where s.object_id = $1 and s.version = $2 and s.lifecycle is not null
                and exists (select 1 from workdo.steps u
                             where u.object_id = $1 and u.version = $2
                               and u.status not in ('completed', 'skipped'))
              order by at, s.id",
        )
        .bind(id)
        .bind(version)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Which of `object`, `template`, the object's workflow of it, or its `step` does not exist:
    /// the error for a step that was not found, naming the first thing missing.
    pub async fn missing(&self, object: &str, template: &str, step: &str) -> StoreError {
        let found: Result<(bool, bool, bool)> = sqlx::query_as(
            "select exists (select 1 from workdo.objects where id = $1),
                    exists (select 1 from workdo.templates where name = $2),
                    exists (select 1 from workdo.workflows where object_id = $1 and template = $2)",
        )
        .bind(object)
        .bind(template)
        .fetch_one(&self.pool)
        .await
        .map_err(StoreError::from);
        match found {
            Err(e) => e,
            Ok((false, _, _)) => StoreError::UnknownObject(object.into()),
            Ok((_, false, _)) => StoreError::UnknownTemplate(template.into()),
            Ok((_, _, false)) => StoreError::UnknownWorkflow {
                object: object.into(),
                template: template.into(),
            },
            Ok(_) => StoreError::UnknownStep {
                template: template.into(),
                step: step.into(),
            },
        }
    }

    /// That `template` is loaded and its current version has `step`.
    ///
    /// # Errors
    /// [`StoreError::UnknownTemplate`] or [`StoreError::UnknownStep`].
    pub async fn step_known(&self, template: &str, step: &str) -> Result<()> {
        let current = self.template_current(template).await?;
        // Generated steps (`GENERATOR/BRICKLET#N/STEP`, every instance as `BRICKLET/STEP`) and a
        // machine's call steps (`call/FUNCTION#N`, all as `call/FUNCTION`) have a `/`, which
        // no template step's name may: known once there is one.
        if step.contains('/') {
            let exists: bool = sqlx::query_scalar(
                "select exists (select 1 from workdo.steps
                                 where template = $1 and (name = $2 or queue = $1 || ':' || $2
                                   or (queue is null and generated is not null
                                       and workdo.ready_key(template, name) = $1 || ':' || $2)))",
            )
            .bind(template)
            .bind(step)
            .fetch_one(&self.pool)
            .await?;
            if exists {
                return Ok(());
            }
        }
        if current.spec.step(step).is_none() {
            return Err(StoreError::UnknownStep {
                template: template.into(),
                step: step.into(),
            });
        }
        Ok(())
    }

    /// Explain what keeps a step from running (or that nothing does).
    ///
    /// Long on purpose: one reason per way a step can be held back, checked in the order a person
    /// would ask; split, the one explanation would be scattered over helpers that each need the
    /// whole step.
    pub async fn why(&self, object: &str, template: &str, step: &str) -> Result<Why> {
        let row: Option<StepRow> = sqlx::query_as(
            "select s.* from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
              where w.object_id = $1 and w.template = $2 and s.name = $3
              order by s.active desc, s.version desc limit 1",
        )
        .bind(object)
        .bind(template)
        .bind(step)
        .fetch_optional(&self.pool)
        .await?;
        let Some(s) = row else {
            return Err(self.missing(object, template, step).await);
        };
        let mut reasons = Vec::new();
        if !s.active {
            reasons.push(format!(
                "inactive: object version {} superseded it; queues only see the current version",
                s.version
            ));
        }
        let workflow: (i64, DateTime<Utc>) =
            sqlx::query_as("select template_id, start_at from workdo.workflows where id = $1")
                .bind(s.workflow_id)
                .fetch_one(&self.pool)
                .await?;
        let spec = self.template_by_id(workflow.0).await?.spec;
        let spec_step = spec.step(&s.name);
        match s.status.as_str() {
            "waiting" => {
                let prereqs: Vec<(String, String)> = sqlx::query_as(
                    "select name, status from workdo.steps
                      where workflow_id = $1 and name = any($2) order by name",
                )
                .bind(s.workflow_id)
                .bind(&s.prereqs)
                .fetch_all(&self.pool)
                .await?;
                for (name, status) in prereqs
                    .iter()
                    .filter(|(_, st)| st != "completed" && st != "skipped")
                {
                    reasons.push(format!("waiting for prerequisite {name} ({status})"));
                }
            }
            "scheduled" => reasons.push(format!(
                "scheduled: not before {} (workflow start {})",
                s.run_at.to_rfc3339(),
                workflow.1.to_rfc3339()
            )),
            "retrying" => reasons.push(format!(
                "retrying: attempt {} of {} failed ({}); next attempt at {}",
                s.attempts,
                s.max_attempts,
                s.error_message.as_deref().unwrap_or("no message"),
                s.run_at.to_rfc3339()
            )),
            "ready" => {
                // A generated step waits in its bricklet step's queue, shared by every instance.
                let queue = s
                    .queue
                    .clone()
                    .unwrap_or_else(|| format!("{}:{}", s.template, s.name));
                let ahead: i64 = sqlx::query_scalar(
                    "select count(*) from workdo.steps
                      where (case when $6::text is null then template = $1 and name = $2
                                  else queue = $6 end)
                        and status = 'ready' and active
                        and (priority > $3 or (priority = $3 and (run_at, id) < ($4, $5)))",
                )
                .bind(&s.template)
                .bind(&s.name)
                .bind(s.priority)
                .bind(s.run_at)
                .bind(s.id)
                .bind(&s.queue)
                .fetch_one(&self.pool)
                .await?;
                reasons.push(format!(
                    "ready since {}, priority {}, {ahead} ahead of it in the {queue} queue",
                    s.run_at.to_rfc3339(),
                    s.priority,
                ));
                let paused: Option<(String, Option<String>)> = sqlx::query_as(
                    "select paused_by, reason from workdo.paused_steps
                      where template || ':' || step = $1",
                )
                .bind(&queue)
                .fetch_optional(&self.pool)
                .await?;
                if let Some((by, reason)) = paused {
                    reasons.push(format!(
                        "the {queue} queue is paused (by {by}{}): no worker claims until `workdo resume {queue}`",
                        reason.map(|r| format!(": {r}")).unwrap_or_default()
                    ));
                }
                if s.generated.is_some() && s.queue.is_none() {
                    reasons.push(
                        "no function: a human (or external robot) task, completed through the API, CLI or web page"
                            .into(),
                    );
                }
                match spec_step {
                    Some(st) if st.skip_queue => reasons.push(
                        "skip-queue: no worker runs it; it is set through the API, CLI or web page"
                            .into(),
                    ),
                    Some(st) if !st.is_run() => reasons.push(
                        "no function: a human (or external robot) task, completed through the API, CLI or web page"
                            .into(),
                    ),
                    _ if s.generated.is_some() && s.queue.is_none() => {}
                    _ => reasons.push(format!("waiting for a worker running {queue}")),
                }
            }
            "started" => reasons.push(match (&s.lease_owner, s.lease_expires_at) {
                (Some(owner), Some(exp)) => format!(
                    "running: attempt {} of {}, leased by {owner} until {}",
                    s.attempts,
                    s.max_attempts,
                    exp.to_rfc3339()
                ),
                _ => "marked started from outside; waiting for its robot to report".into(),
            }),
            "error" | "exception" => reasons.push(format!(
                "{} after {} of {} attempts: {}; `workdo retry --object {} --template {} --step {}` puts it back",
                s.status,
                s.attempts,
                s.max_attempts,
                s.error_message.as_deref().unwrap_or("no message"),
                s.object_id,
                s.template,
                s.name
            )),
            "completed" | "skipped" => reasons.push(format!("finished: {}", s.status)),
            other => reasons.push(format!(
                "in intermediate status {other:?}: waiting for its function or a person to move it on"
            )),
        }
        Ok(Why { step: s, reasons })
    }

    /// One workflow with its steps.
    pub async fn workflow_view(&self, id: i64) -> Result<WorkflowView> {
        let workflow: Option<WorkflowRow> = sqlx::query_as(
            "select w.id, w.template, w.template_id, t.sha256 as template_sha256, w.version,
                    w.status, w.active, w.priority, w.lane, w.start_at, w.context, w.created_at,
                    w.completed_at, w.dispatch
               from workdo.workflows w join workdo.templates t on t.id = w.template_id
              where w.id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let workflow = workflow.ok_or_else(|| StoreError::Invalid {
            field: "workflow id",
            value: id.to_string(),
            reason: "no such workflow",
        })?;
        let steps: Vec<StepRow> =
            sqlx::query_as("select * from workdo.steps where workflow_id = $1 order by id")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        let machine = self.machine_view(workflow.id).await?;
        let functions = self.workflow_step_functions(&workflow, &steps).await?;
        Ok(WorkflowView {
            workflow,
            steps,
            machine,
            functions,
        })
    }

    /// Events of an object or of a workflow, oldest first, after event id `after` (paging);
    /// only those of `kinds` when any are given.
    pub async fn events(
        &self,
        object: Option<&str>,
        workflow: Option<i64>,
        after: i64,
        limit: i64,
        kinds: &[String],
    ) -> Result<Vec<EventRow>> {
        // A workflow's events are found through its object's (the index on events).
        let by_workflow: Option<String> = match (object, workflow) {
            (None, Some(w)) => {
                let o: Option<String> =
                    sqlx::query_scalar("select object_id from workdo.workflows where id = $1")
                        .bind(w)
                        .fetch_optional(&self.pool)
                        .await?;
                match o {
                    Some(o) => Some(o),
                    None => return Ok(Vec::new()),
                }
            }
            _ => None,
        };
        let object = object.or(by_workflow.as_deref());
        Ok(sqlx::query_as(
            "select id, at, workflow_id, template, version, step, kind, status, attempt, actor, detail
               from workdo.events
              where ($1::text is null or object_id = $1)
                and ($2::bigint is null or workflow_id = $2)
                and id > $3
                and (cardinality($5::text[]) = 0 or kind = any($5))
              order by id
              limit $4",
        )
        .bind(object)
        .bind(workflow)
        .bind(after)
        .bind(limit.clamp(1, 1000))
        .bind(kinds)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The object workflow `id` is of, if the workflow exists.
    pub async fn workflow_object(&self, id: i64) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("select object_id from workdo.workflows where id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The kinds of event an object's history holds, by name.
    pub async fn event_kinds(&self, object: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "select distinct kind from workdo.events where object_id = $1 order by kind",
        )
        .bind(object)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Whether the object is registered.
    pub async fn object_exists(&self, id: &str) -> Result<bool> {
        Ok(
            sqlx::query_scalar("select exists (select 1 from workdo.objects where id = $1)")
                .bind(id)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// The object's workflows (all versions), with their steps.
    pub async fn object_workflows(
        &self,
        id: &str,
        template: Option<&str>,
    ) -> Result<Vec<WorkflowView>> {
        let mut view = self.object_view(id, 0).await?;
        if let Some(t) = template {
            view.workflows.retain(|w| w.workflow.template == t);
        }
        Ok(view.workflows)
    }

    /// Ready steps per template step and lane, with the age in seconds of the oldest.
    pub async fn queue_depths(&self) -> Result<Vec<(String, String, String, i64, f64)>> {
        Ok(sqlx::query_as(
            "select template, workdo.facet_name(name), lane, count(*),
                    extract(epoch from now() - min(run_at))::float8
               from workdo.steps where status = 'ready' and active
              group by 1, 2, 3",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}
