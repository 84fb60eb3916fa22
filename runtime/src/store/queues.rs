//! WorkDo's queues: objects waiting at a step whose named steps are done, steps in error, and
//! the lanes with work — for a template step, a generated step, or every instance of a
//! bricklet's step.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{QueueEntry, Result, StepRow, Store, StoreError};

/// A named queue (`workdo queues define`): objects waiting at `template:step` whose
/// `completed` steps are done and whose properties contain `properties`, optionally in one lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct NamedQueue {
    pub name: String,
    pub template: String,
    pub step: String,
    /// `TEMPLATE:STEP` that must be completed (or skipped).
    pub completed: Vec<String>,
    #[schema(value_type = Object)]
    pub properties: Value,
    pub lane: Option<String>,
}

/// Which steps a queue's `step` names: a template step by name; a name with a `/` — a generated
/// step (`GENERATOR/BRICKLET#N/STEP`) or a machine's call step — by name, or every instance
/// of a bricklet's step (`BRICKLET/STEP`, or `call/FUNCTION`) by its claim key.
/// One read of a queue ([`Store::queue_waiting_as`]).
struct QueueRead<'a> {
    template: &'a str,
    step: &'a str,
    completed: &'a [(String, String)],
    lane: Option<&'a str>,
    properties: &'a Value,
    limit: i64,
    /// Ready steps too (workdo's own words), or only those still waiting (the service's, with
    /// the hand-off in use).
    ready_too: bool,
}

fn step_predicate(step: &str) -> &'static str {
    if step.contains('/') {
        // A human step of a bricklet has no claim key (no worker claims it): every instance of
        // it is found by the name it is counted under (`BRICKLET/STEP`, issue 47).
        "(s.name = $2 or s.queue = $1 || ':' || $2
          or (s.queue is null and s.generated is not null
              and workdo.ready_key(s.template, s.name) = $1 || ':' || $2))"
    } else {
        "s.name = $2"
    }
}

/// The statement of a queue read ([`Store::queue_waiting_with`]); binds: template, step, lane,
/// the completed scopes' templates and steps, limit, properties. Public for the test that
/// holds its plan to the live rows (`tests/engine/engine_queues.rs`).
///
/// Each status is its own arm of an OR, so that each is found through the partial index that
/// holds it (`steps_open` for waiting, scheduled and retrying, `steps_claim` for ready): a
/// list of statuses that no one partial index covers had the planner walk every row of the
/// step, finished ones included, so the read grew with history (issue 47).
pub fn queue_sql(step: &str, ready_too: bool, filtered: bool) -> String {
    let property_predicate = if filtered {
        "and s.object_id in (select o.id from workdo.objects o where o.properties @> $7)"
    } else {
        "and $7::jsonb is null"
    };
    let statuses = if ready_too {
        "(s.status = 'waiting' or s.status = 'ready'
              or (s.status = 'scheduled' and s.run_at <= now())
              or (s.status = 'retrying' and s.run_at <= now()))"
    } else {
        "(s.status = 'waiting' or s.status = 'scheduled')"
    };
    format!(
        "select s.object_id, s.version, s.lane,
                case when s.status in ('scheduled', 'retrying') then 'ready' else s.status end as status,
                s.priority, s.run_at
           from workdo.steps s
          where s.template = $1 and {} and s.active
            and {statuses}
            and ($3::text is null or s.lane = $3)
            and (select count(distinct (r.template, r.name))
                   from unnest($4::text[], $5::text[]) as r(template, name)
                   join workdo.workflows cw
                     on cw.object_id = s.object_id and cw.template = r.template and cw.active
                   join workdo.steps c on c.workflow_id = cw.id and c.name = r.name
                  where c.status in ('completed', 'skipped'))
                = (select count(distinct (t, n)) from unnest($4::text[], $5::text[]) as q(t, n))
            {property_predicate}
          order by s.priority desc, s.run_at, s.id
          limit $6",
        step_predicate(step)
    )
}

impl Store {
    /// Objects whose step `template:step` waits (in the queue or for its prerequisites) and whose
    /// steps in `completed` (pairs of template and step) are all completed or skipped; active
    /// versions only; optionally one lane. Highest priority first, then longest waiting. A
    /// future-dated or retrying step whose time has come counts as ready here, as it is once
    /// the runtime's maintenance promotes it: the read writes nothing.
    pub async fn queue_waiting(
        &self,
        template: &str,
        step: &str,
        completed: &[(String, String)],
        lane: Option<&str>,
        limit: i64,
    ) -> Result<Vec<QueueEntry>> {
        self.queue_waiting_with(template, step, completed, lane, &Value::Null, limit)
            .await
    }

    /// The objects with `template`'s `step` completed, in any version, in id order: the
    /// workflow service's `?completed=STEP&workflow=WF` without `waiting=` (its stats reporters
    /// count preserved objects with it).
    pub async fn objects_completed_at(
        &self,
        template: &str,
        step: &str,
        limit: i64,
    ) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "select distinct s.object_id from workdo.steps s
              where s.template = $1 and s.name = $2 and s.status = 'completed'
              order by s.object_id limit $3",
        )
        .bind(template)
        .bind(step)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// [`Store::queue_waiting`], only objects whose properties contain `properties` (a JSON
    /// object; `null` or `{}` for all): the seed's queues on object conditions (an embargo
    /// date, a content type). The objects are found through the `objects_properties` GIN
    /// index, not by reading every queued object's properties.
    pub async fn queue_waiting_with(
        &self,
        template: &str,
        step: &str,
        completed: &[(String, String)],
        lane: Option<&str>,
        properties: &Value,
        limit: i64,
    ) -> Result<Vec<QueueEntry>> {
        self.queue_waiting_as((template, step), completed, lane, properties, limit, true)
            .await
    }

    /// [`Store::queue_waiting_with`], or with `ready_too` false in the workflow service's words
    /// with the Sidekiq hand-off in use: a ready step is `queued` there (handed to a robot
    /// queue), so only steps still waiting for their prerequisites or their start time are
    /// listed, as the service lists them (`objects_for_step_spec.rb` 24, 109).
    pub async fn queue_waiting_as(
        &self,
        (template, step): (&str, &str),
        completed: &[(String, String)],
        lane: Option<&str>,
        properties: &Value,
        limit: i64,
        ready_too: bool,
    ) -> Result<Vec<QueueEntry>> {
        let read = QueueRead {
            template,
            step,
            completed,
            lane,
            properties,
            limit,
            ready_too,
        };
        self.queue_read(read).await
    }

    async fn queue_read(&self, q: QueueRead<'_>) -> Result<Vec<QueueEntry>> {
        let (ct, cs): (Vec<String>, Vec<String>) = q.completed.iter().cloned().unzip();
        let filtered = q.properties.as_object().is_some_and(|m| !m.is_empty());
        // SQL NULL when unfiltered (a JSON `null` would be a value).
        let properties: Option<&Value> = filtered.then_some(q.properties);
        let sql = queue_sql(q.step, q.ready_too, filtered);
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(q.template)
            .bind(q.step)
            .bind(q.lane)
            .bind(&ct)
            .bind(&cs)
            .bind(q.limit)
            .bind(properties)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }

    /// Every step `queued` in the workflow service's words, oldest first: with the hand-off in
    /// use, the ready steps of any template (not a skip-queue step, whose ready is not
    /// "queued"); with or without it, steps a robot set `queued` itself. Never one of a paused
    /// queue. With `older_than`, only those queued before it (`all_queued?hours-ago=N`).
    pub async fn queue_all_queued(
        &self,
        older_than: Option<DateTime<Utc>>,
        limit: i64,
        handoff: bool,
    ) -> Result<Vec<StepRow>> {
        Ok(sqlx::query_as(
            "select s.* from workdo.steps s
              where s.active
                and (s.status = 'queued'
                     or (s.status = 'ready' and $3
                         and not exists (
                               select 1 from workdo.workflows w
                                 join workdo.templates t on t.id = w.template_id,
                                      jsonb_array_elements(t.spec -> 'steps') st
                                where w.id = s.workflow_id and st ->> 'name' = s.name
                                  and (st ->> 'skip_queue')::boolean)))
                and not exists (select 1 from workdo.paused_steps p
                                 where p.template = s.template
                                   and p.step = coalesce(substr(s.queue, length(s.template) + 2), s.name))
                and ($2::timestamptz is null or s.updated_at < $2)
              order by s.run_at, s.id limit $1",
        )
        .bind(limit)
        .bind(older_than)
        .bind(handoff)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Objects whose step `template:step` is in `error` (active versions).
    pub async fn queue_errors(
        &self,
        template: &str,
        step: &str,
        limit: i64,
    ) -> Result<Vec<StepRow>> {
        let sql = format!(
            "select s.* from workdo.steps s
              where s.template = $1 and {} and s.active and s.status in ('error', 'exception')
              order by s.updated_at desc limit $3",
            step_predicate(step)
        );
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(template)
            .bind(step)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }

    /// Lanes that have queued work for `template:step`.
    pub async fn queue_lanes(
        &self,
        template: &str,
        step: &str,
        ready_too: bool,
    ) -> Result<Vec<String>> {
        // A paused queue has no work for its robots in any lane.
        if self.step_paused(template, step).await? {
            return Ok(Vec::new());
        }
        let statuses = if ready_too {
            "(s.status = 'waiting' or s.status = 'ready')"
        } else {
            "s.status = 'waiting'"
        };
        let sql = format!(
            "select distinct s.lane from workdo.steps s
              where s.template = $1 and {} and s.active and {statuses}
              order by s.lane",
            step_predicate(step)
        );
        let rows = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(template)
            .bind(step)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
    }

    /// Define (or redefine) a named queue. Its step must be known now.
    ///
    /// # Errors
    /// An invalid name, an unknown step, or a `completed` entry that is not `TEMPLATE:STEP`.
    pub async fn queue_define(&self, q: &NamedQueue) -> Result<()> {
        let valid = |n: &str| {
            !n.is_empty()
                && n.len() <= 100
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !valid(&q.name) {
            return Err(StoreError::Invalid {
                field: "name",
                value: q.name.clone(),
                reason: "a queue's name is 1-100 letters, digits, '-', '_' or '.'",
            });
        }
        if !q.properties.is_object() {
            return Err(StoreError::Invalid {
                field: "properties",
                value: q.properties.to_string(),
                reason: "properties must be a JSON object",
            });
        }
        // A lane is one a step could be in: `--lane ''` named none and listed nothing, ever.
        if let Some(lane) = &q.lane {
            super::check_lane(lane)?;
        }
        self.step_known(&q.template, &q.step).await?;
        for c in &q.completed {
            let Some((t, s)) = c.split_once(':') else {
                return Err(StoreError::Invalid {
                    field: "completed",
                    value: c.clone(),
                    reason: "give TEMPLATE:STEP",
                });
            };
            self.step_known(t, s).await?;
        }
        sqlx::query(
            "insert into workdo.queues (name, template, step, completed, properties, lane)
             values ($1, $2, $3, $4, $5, $6)
             on conflict (name) do update set template = excluded.template, step = excluded.step,
                 completed = excluded.completed, properties = excluded.properties,
                 lane = excluded.lane, updated_at = now()",
        )
        .bind(&q.name)
        .bind(&q.template)
        .bind(&q.step)
        .bind(&q.completed)
        .bind(&q.properties)
        .bind(&q.lane)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The named queues, by name.
    pub async fn queue_list(&self) -> Result<Vec<NamedQueue>> {
        Ok(sqlx::query_as(
            "select name, template, step, completed, properties, lane from workdo.queues order by name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// A named queue.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] naming it when there is none.
    pub async fn queue_named(&self, name: &str) -> Result<NamedQueue> {
        let found: Option<NamedQueue> = sqlx::query_as(
            "select name, template, step, completed, properties, lane from workdo.queues where name = $1",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        found.ok_or_else(|| StoreError::UnknownQueue(name.to_string()))
    }

    /// What waits in a named queue now.
    ///
    /// # Errors
    /// An unknown queue, or the database refused.
    pub async fn queue_named_waiting(&self, name: &str, limit: i64) -> Result<Vec<QueueEntry>> {
        let q = self.queue_named(name).await?;
        // A paused step has no work under any of its names: the runtime's named-queue workers,
        // `/workflow_queue?queue=` and `/api/queues/NAME` kept handing it out.
        if self.step_paused(&q.template, &q.step).await? {
            return Ok(Vec::new());
        }
        let completed: Vec<(String, String)> = q
            .completed
            .iter()
            .filter_map(|c| c.split_once(':'))
            .map(|(t, s)| (t.to_string(), s.to_string()))
            .collect();
        self.queue_waiting_with(
            &q.template,
            &q.step,
            &completed,
            q.lane.as_deref(),
            &q.properties,
            limit,
        )
        .await
    }

    /// Delete a named queue; whether there was one.
    pub async fn queue_delete(&self, name: &str) -> Result<bool> {
        Ok(sqlx::query("delete from workdo.queues where name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected()
            > 0)
    }
}
