//! Cron schedules as stored: loading, listing, and firing due ticks once however many runtimes
//! run (the row is claimed with `SKIP LOCKED`; its next fire time moves in the transaction that
//! starts its workflows). The spec itself is [`crate::model::schedule`].

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{Postgres, Transaction};

use crate::model::schedule::{Objects, ScheduleSpec, parse_time};
use crate::store::{Result, Store, StoreError};

/// A schedule as stored.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ScheduleRow {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub template: String,
    pub objects: Value,
    pub restart: bool,
    pub enabled: bool,
    pub next_fire_at: DateTime<Utc>,
    pub last_fired_at: Option<DateTime<Utc>>,
    /// A signal schedule's signal (then `template` is the machine whose jobs get it).
    pub signal: Option<String>,
    /// …and the state those jobs must be in.
    pub state: Option<String>,
}

impl ScheduleRow {
    /// What it does when it fires: the template it starts, or `signal S to M in STATE`.
    pub fn does(&self) -> String {
        match &self.signal {
            Some(sig) => format!(
                "signal {sig} to {}{}",
                self.template,
                self.state
                    .as_deref()
                    .map(|s| format!(" in {s}"))
                    .unwrap_or_default()
            ),
            None => self.template.clone(),
        }
    }
}

/// What firing did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Fired {
    pub schedule: String,
    pub tick: Option<DateTime<Utc>>,
    pub started: usize,
    /// Jobs a signal schedule signalled.
    pub signalled: usize,
}

impl Store {
    /// Create or update schedules. A schedule whose timing changed gets a new next fire time;
    /// an unchanged one keeps its own.
    pub async fn schedules_put(&self, specs: &[ScheduleSpec], origin: &str) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        schedules_put_in(&mut tx, specs, origin).await?;
        tx.commit().await?;
        Ok(specs.len())
    }

    pub async fn schedules_list(&self) -> Result<Vec<ScheduleRow>> {
        Ok(sqlx::query_as(
            "select name, cron, timezone, template, objects, restart, enabled, next_fire_at, last_fired_at,
                    signal, state
               from workdo.schedules order by next_fire_at, name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Fire schedule `name` now, as if its tick had come: it starts (or signals) what it would,
    /// through the same path as a due tick, so it fires once however many runtimes run; its next
    /// regular tick stays where the cron puts it. A disabled schedule is not fired.
    pub async fn schedule_fire_now(&self, name: &str) -> Result<Vec<Fired>> {
        let mut tx = self.pool.begin().await?;
        let row: Option<ScheduleRow> = sqlx::query_as(
            "select name, cron, timezone, template, objects, restart, enabled, next_fire_at, last_fired_at,
                    signal, state
               from workdo.schedules where name = $1 for update",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Err(StoreError::Schedule(format!("no schedule {name:?}")));
        };
        if !row.enabled {
            return Err(StoreError::Schedule(format!(
                "schedule {name:?} is disabled: enable it first (workdo schedules enable {name})"
            )));
        }
        // Fired in a savepoint: a failure is recorded (`schedule_failed`) and leaves the
        // schedule's next tick where it was — a fire by hand that failed takes no tick away.
        let mut attempt = sqlx::Acquire::begin(&mut *tx).await?;
        match self.fire_one(&mut attempt, &row).await {
            Ok((started, signalled)) => {
                attempt.commit().await?;
                let done = serde_json::json!({"started": started, "signalled": signalled, "by_hand": true});
                next_tick(&mut tx, &row, "schedule_fired", done).await?;
                tx.commit().await?;
                Ok(vec![Fired {
                    schedule: row.name,
                    tick: Some(row.next_fire_at),
                    started,
                    signalled,
                }])
            }
            Err(e) => {
                attempt.rollback().await?;
                if e.is_refusal() && !e.is_conflict() {
                    sqlx::query(
                        "insert into workdo.events (kind, actor, detail) values ($1, $2, $3)",
                    )
                    .bind("schedule_failed")
                    .bind(format!("schedule:{}", row.name))
                    .bind(
                        serde_json::json!({"schedule": row.name, "error": e.to_string(),
                                                 "by_hand": true, "next": row.next_fire_at}),
                    )
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                }
                Err(e)
            }
        }
    }

    /// Fire every due schedule once: start its workflows and move its next fire time past now,
    /// in one transaction per schedule.
    pub async fn schedules_fire_due(&self) -> Result<Vec<Fired>> {
        self.fire_due(None).await
    }

    /// Every due schedule, once each.
    async fn fire_due(&self, only: Option<&str>) -> Result<Vec<Fired>> {
        let mut fired = Vec::new();
        loop {
            let mut tx = self.pool.begin().await?;
            let due: Option<ScheduleRow> = sqlx::query_as(
                "select name, cron, timezone, template, objects, restart, enabled, next_fire_at, last_fired_at,
                        signal, state
                   from workdo.schedules
                  where enabled and next_fire_at <= now() and ($1::text is null or name = $1)
                  order by next_fire_at limit 1 for update skip locked",
            )
            .bind(only)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = due else { break };
            // One schedule that cannot fire (an object id it names is refused, its template is
            // gone) is recorded and moved to its next tick, and the others fire: it used to stay
            // due, first in line, and stop every schedule behind it on every pass. It fires in a
            // savepoint, so that its failure is recorded under the lock that claimed its tick.
            let mut attempt = sqlx::Acquire::begin(&mut *tx).await?;
            match self.fire_one(&mut attempt, &row).await {
                Ok((started, signalled)) => {
                    attempt.commit().await?;
                    let done = serde_json::json!({"started": started, "signalled": signalled});
                    next_tick(&mut tx, &row, "schedule_fired", done).await?;
                    tx.commit().await?;
                    fired.push(Fired {
                        schedule: row.name,
                        tick: Some(row.next_fire_at),
                        started,
                        signalled,
                    });
                }
                // A conflict (a start racing on a new object) is not this schedule's fault:
                // it stays due and fires on the next pass.
                Err(e) if e.is_refusal() && !e.is_conflict() => {
                    attempt.rollback().await?;
                    tracing::warn!(schedule = %row.name, error = %e, "a schedule could not fire; moved to its next tick");
                    let why = serde_json::json!({"error": e.to_string()});
                    next_tick(&mut tx, &row, "schedule_failed", why).await?;
                    tx.commit().await?;
                    if only.is_some() {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(fired)
    }

    /// What schedule `row` does at its tick: signal its jobs, or start its workflows. Returns
    /// how many it started and how many jobs it signalled.
    async fn fire_one(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        row: &ScheduleRow,
    ) -> Result<(usize, usize)> {
        let mut spec = row.timing();
        if row.objects.as_object().is_none_or(|o| !o.is_empty()) {
            spec.objects = Some(serde_json::from_value(row.objects.clone()).map_err(|e| {
                StoreError::Schedule(format!(
                    "schedule {}: stored objects selector unreadable: {e}",
                    row.name
                ))
            })?);
        }
        if let Some(signal) = &row.signal {
            let narrowed = match &spec.objects {
                Some(_) => Some(select_objects(tx, &spec, "").await?),
                None => None,
            };
            let jobs: Vec<i64> = sqlx::query_scalar(
                "insert into workdo.signals (workflow_id, signal, data, actor)
                 select id, $2, jsonb_build_object('schedule', $4::text), 'schedule:' || $4
                   from workdo.workflows
                  where template = $1 and active and machine is not null
                    and status <> 'completed'
                    and ($3::text is null or machine ->> 'state' = $3)
                    and ($5::text[] is null or object_id = any($5))
                  order by id
                 returning workflow_id",
            )
            .bind(&row.template)
            .bind(signal)
            .bind(&row.state)
            .bind(&row.name)
            .bind(&narrowed)
            .fetch_all(&mut **tx)
            .await?;
            crate::store::machine::notify_signals(tx, &jobs).await?;
            return Ok((0, jobs.len()));
        }
        let objects = select_objects(tx, &spec, &row.template).await?;
        if objects.is_empty() {
            return Ok((0, 0));
        }
        let mut req = crate::store::StartRequest::new(&row.template, &[]);
        req.objects = objects;
        req.actor = format!("schedule:{}", row.name);
        Ok((self.workflow_start_in(tx, &req).await?.len(), 0))
    }
}

impl ScheduleRow {
    /// Its timing as a spec (no objects: they are read when it fires).
    fn timing(&self) -> ScheduleSpec {
        ScheduleSpec {
            name: self.name.clone(),
            cron: self.cron.clone(),
            timezone: Some(self.timezone.clone()),
            start: Some(self.template.clone()),
            objects: None,
            restart: self.restart,
            signal: None,
            jobs: None,
        }
    }
}

/// Move schedule `row` past this tick to its next (disabled when it has none; its last fire
/// time now when it fired), with the event `kind` and its `detail`.
async fn next_tick(
    tx: &mut Transaction<'_, Postgres>,
    row: &ScheduleRow,
    kind: &str,
    mut detail: Value,
) -> Result<()> {
    let next = row.timing().next_after(Utc::now());
    sqlx::query(
        "update workdo.schedules
            set next_fire_at = coalesce($2, 'infinity'), enabled = $2 is not null,
                last_fired_at = case when $3 then now() else last_fired_at end
          where name = $1",
    )
    .bind(&row.name)
    .bind(next)
    .bind(kind == "schedule_fired")
    .execute(&mut **tx)
    .await?;
    detail["schedule"] = row.name.clone().into();
    detail["tick"] = serde_json::json!(row.next_fire_at);
    detail["next"] = serde_json::json!(next);
    sqlx::query("insert into workdo.events (kind, actor, detail) values ($1, $2, $3)")
        .bind(kind)
        .bind(format!("schedule:{}", row.name))
        .bind(detail)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// [`Store::schedules_put`] in the caller's transaction (a template load saves its inline
/// schedules with its templates).
pub(crate) async fn schedules_put_in(
    tx: &mut Transaction<'_, Postgres>,
    specs: &[ScheduleSpec],
    origin: &str,
) -> Result<()> {
    for s in specs {
        if let Some(template) = s
            .start
            .as_deref()
            .or(s.jobs.as_ref().map(|j| j.template.as_str()))
        {
            let known: bool = sqlx::query_scalar(
                "select exists (select 1 from workdo.templates where name = $1)",
            )
            .bind(template)
            .fetch_one(&mut **tx)
            .await?;
            if !known {
                return Err(StoreError::Schedule(format!(
                    "{origin}: schedule {} starts {template:?}, which is not a loaded template (load it first; nothing was saved)",
                    s.name
                )));
            }
        }
        let next = s.next_after(Utc::now()).ok_or_else(|| {
            StoreError::Schedule(format!("{origin}: schedule {} never fires", s.name))
        })?;
        let objects = match &s.objects {
            Some(o) => serde_json::to_value(o).unwrap_or_else(|_| serde_json::json!({})),
            None => serde_json::json!({}),
        };
        let template = s
            .start
            .clone()
            .or(s.jobs.as_ref().map(|j| j.template.clone()))
            .unwrap_or_default();
        sqlx::query(
            "insert into workdo.schedules (name, cron, timezone, template, objects, restart, next_fire_at, origin, signal, state)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             on conflict (name) do update set
                next_fire_at = case when (schedules.cron, schedules.timezone) is distinct from (excluded.cron, excluded.timezone)
                                    then excluded.next_fire_at else schedules.next_fire_at end,
                cron = excluded.cron, timezone = excluded.timezone, template = excluded.template,
                objects = excluded.objects, restart = excluded.restart, origin = excluded.origin,
                signal = excluded.signal, state = excluded.state,
                enabled = true, updated_at = now()",
        )
        .bind(&s.name)
        .bind(&s.cron)
        .bind(s.timezone.as_deref().unwrap_or("UTC"))
        .bind(&template)
        .bind(&objects)
        .bind(s.restart)
        .bind(next)
        .bind(origin)
        .bind(&s.signal)
        .bind(s.jobs.as_ref().and_then(|j| j.state.as_deref()))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The objects a schedule starts on now; without `restart`, those already having the workflow
/// for their current version are left out.
async fn select_objects(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    spec: &ScheduleSpec,
    template: &str,
) -> Result<Vec<String>> {
    let Some(selector) = &spec.objects else {
        return Ok(Vec::new());
    };
    let candidates: Vec<(String, Value)> = match selector {
        Objects::Ids { ids } => {
            // Schedules stored before ids were normalized at load: normalized here too.
            let ids = &ids
                .iter()
                .map(|i| crate::store::object_id(i))
                .collect::<Result<Vec<_>>>()?;
            let found: Vec<(String, Value)> =
                sqlx::query_as("select id, properties from workdo.objects where id = any($1)")
                    .bind(ids)
                    .fetch_all(&mut **tx)
                    .await?;
            // Ids not registered yet are registered by starting the workflow.
            let mut all: Vec<(String, Value)> =
                ids.iter().map(|i| (i.clone(), Value::Null)).collect();
            all.retain(|(i, _)| !found.iter().any(|(f, _)| f == i));
            all.extend(found);
            all
        }
        Objects::Before { property, .. } | Objects::Equals { property, .. } => {
            sqlx::query_as(
                "select id, properties from workdo.objects where properties ? $1 order by id",
            )
            .bind(property)
            .fetch_all(&mut **tx)
            .await?
        }
    };
    let now = Utc::now();
    let mut chosen: Vec<String> = candidates
        .into_iter()
        .filter(|(_, props)| match selector {
            Objects::Ids { .. } => true,
            Objects::Equals { property, equals } => props.get(property) == Some(equals),
            Objects::Before { property, before } => {
                let limit = if before == "now" {
                    Some(now)
                } else {
                    DateTime::parse_from_rfc3339(before)
                        .ok()
                        .map(|t| t.with_timezone(&Utc))
                };
                let value = props
                    .get(property)
                    .and_then(Value::as_str)
                    .and_then(parse_time);
                matches!((value, limit), (Some(v), Some(l)) if v < l)
            }
        })
        .map(|(id, _)| id)
        .collect();
    if !spec.restart && !chosen.is_empty() && !template.is_empty() {
        let existing: Vec<String> = sqlx::query_scalar(
            "select w.object_id from workdo.workflows w join workdo.objects o on o.id = w.object_id
              where w.template = $1 and w.version = o.version and w.object_id = any($2)",
        )
        .bind(template)
        .bind(&chosen)
        .fetch_all(&mut **tx)
        .await?;
        chosen.retain(|c| !existing.contains(c));
    }
    Ok(chosen)
}

impl Store {
    /// Switch a schedule on or off.
    pub async fn schedule_enable(&self, name: &str, enabled: bool) -> Result<()> {
        let n = sqlx::query(
            "update workdo.schedules set enabled = $2, updated_at = now() where name = $1",
        )
        .bind(name)
        .bind(enabled)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::Schedule(format!("no schedule {name:?}")));
        }
        Ok(())
    }

    /// Delete a schedule.
    pub async fn schedule_delete(&self, name: &str) -> Result<()> {
        let n = sqlx::query("delete from workdo.schedules where name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::Schedule(format!("no schedule {name:?}")));
        }
        Ok(())
    }
}
