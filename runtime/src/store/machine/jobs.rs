//! Around a job's transitions: alarms coming due, what a job looks like, explicit migration.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::inbox::notify_signals;
use super::row::MachineRecord;
use crate::model::machine;
use crate::store::history::events::{EventBuf, NewEvent};
use crate::store::{Result, Store, StoreError};

/// A due alarm: id, job, signal, object, template, object version, due time.
type DueAlarm = (i64, i64, String, String, String, i32, DateTime<Utc>);

/// A machine job as `show` and the API give it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MachineView {
    pub state: String,
    #[schema(value_type = Object)]
    pub variables: Value,
    /// The signals its state accepts (its own, then the global ones).
    pub accepts: Vec<String>,
    /// Alarms set and not yet fired or cancelled: `{signal, due_at, state}`.
    #[schema(value_type = Vec<Object>)]
    pub alarms: Vec<Value>,
    /// Workflows it forked: `{workflow_id, template, object, status}`.
    #[schema(value_type = Vec<Object>)]
    pub children: Vec<Value>,
    pub parent: Option<i64>,
    /// Suspended: it takes no signals until resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Ended because its parent ended (or was restarted or deleted), not by reaching a final
    /// state of its own: its workflow reads `completed`, and this says how.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// Signals in its inbox not taken yet, oldest first: `{signal, actor, at}`.
    #[schema(value_type = Vec<Object>)]
    pub inbox: Vec<Value>,
}

impl Store {
    /// The template version a workflow is locked to, if the workflow exists.
    pub async fn workflow_template_id(&self, id: i64) -> Result<Option<i64>> {
        Ok(
            sqlx::query_scalar("select template_id from workdo.workflows where id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// The machine template (name) and access rules of job `workflow_id`; `None` when it is not
    /// a machine job. What the API and the admin page check before a signal.
    pub async fn machine_access(
        &self,
        workflow_id: i64,
    ) -> Result<Option<(String, machine::Access)>> {
        let Some(template_id) = self.workflow_template_id(workflow_id).await? else {
            return Ok(None);
        };
        let spec = self.template_by_id(template_id).await?.spec;
        Ok(spec
            .machine
            .map(|m| (spec.name, m.access.unwrap_or_default())))
    }

    /// Fire due alarms (claimed with `SKIP LOCKED`, so each fires once however many runtimes
    /// run): each becomes a signal in its job's inbox, in one transaction. Returns how many.
    pub async fn machine_alarms_fire(&self, limit: i64) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let due: Vec<DueAlarm> = sqlx::query_as(
            "select a.id, a.workflow_id, a.signal, w.object_id, w.template, w.version, a.due_at
               from workdo.alarms a join workdo.workflows w on w.id = a.workflow_id
              where a.fired_at is null and a.cancelled_at is null and a.due_at <= now()
              order by a.due_at limit $1 for update of a skip locked",
        )
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        if due.is_empty() {
            return Ok(0);
        }
        let mut events = EventBuf::default();
        let mut jobs = Vec::new();
        for (id, job, signal, object, template, version, due_at) in &due {
            sqlx::query("update workdo.alarms set fired_at = now() where id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let data = json!({"alarm": id, "due_at": due_at});
            super::inbox::insert_signal(&mut tx, *job, signal, &data, "alarm").await?;
            events.push(
                NewEvent::new(object, "alarm_fired", "alarm")
                    .workflow(*job)
                    .template(template)
                    .version(*version)
                    .detail(json!({"signal": signal, "due_at": due_at,
                                   "late_ms": (Utc::now() - *due_at).num_milliseconds()})),
            );
            jobs.push(*job);
        }
        events.flush(&mut tx).await?;
        notify_signals(&mut tx, &jobs).await?;
        tx.commit().await?;
        Ok(due.len())
    }

    /// When the next alarm is due, if any is set.
    pub async fn machine_next_alarm(&self) -> Result<Option<DateTime<Utc>>> {
        let next: Option<DateTime<Utc>> = sqlx::query_scalar(
            "select min(due_at) from workdo.alarms where fired_at is null and cancelled_at is null",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(next)
    }

    /// Job `workflow_id`'s state, variables, accepted signals, alarms, children and parent;
    /// `None` for a workflow that is not a machine job.
    pub async fn machine_view(&self, workflow_id: i64) -> Result<Option<MachineView>> {
        let row: Option<(Option<Value>, Option<i64>, i64)> = sqlx::query_as(
            "select machine, parent_id, template_id from workdo.workflows where id = $1",
        )
        .bind(workflow_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some((Some(record), parent, template_id)) = row else {
            return Ok(None);
        };
        let spec = self.template_by_id(template_id).await?.spec;
        let record = MachineRecord::read(&record);
        let state = record.state.to_string();
        let accepts = spec
            .machine
            .as_ref()
            .map(|m| machine::accepted(m, &state))
            .unwrap_or_default();
        let alarms: Vec<Value> = sqlx::query_scalar(
            "select jsonb_build_object('signal', signal, 'due_at', due_at, 'state', state)
               from workdo.alarms
              where workflow_id = $1 and fired_at is null and cancelled_at is null order by due_at",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?;
        let children: Vec<Value> = sqlx::query_scalar(
            "select jsonb_build_object('workflow_id', id, 'template', template, 'object', object_id,
                                       'status', case when (machine ->> 'cancelled')::boolean
                                                      then 'cancelled' else status end,
                                       'state', machine ->> 'state')
               from workdo.workflows where parent_id = $1 order by id",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?;
        let inbox: Vec<Value> = sqlx::query_scalar(
            "select jsonb_build_object('signal', signal, 'actor', actor, 'at', created_at)
               from workdo.signals
              where workflow_id = $1 and processed_at is null order by id limit 100",
        )
        .bind(workflow_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(MachineView {
            state,
            variables: Value::Object(record.variables()),
            accepts,
            alarms,
            children,
            parent,
            suspended: record.suspended,
            cancelled: record.cancelled,
            inbox,
        }))
    }

    /// Explicit migration: move `template`'s active jobs (or only `workflow`) to the version
    /// whose SHA-256 starts with `to`, their states renamed by `map`. Refused, listing them,
    /// when a job's state is neither in the new description nor mapped. Returns how many moved.
    pub async fn machine_migrate(
        &self,
        template: &str,
        to: &str,
        map: &BTreeMap<String, String>,
        workflow: Option<i64>,
        actor: &str,
    ) -> Result<usize> {
        // A SHA-256 as printed, in either case; an empty prefix named every version.
        let to = to.trim().to_ascii_lowercase();
        if to.is_empty() || !to.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::MigrationRefused(format!(
                "--to must be a version's SHA-256 or the start of one (hex digits), not {to:?}"
            )));
        }
        let to = to.as_str();
        let versions: Vec<(i64, String)> = sqlx::query_as(
            "select id, sha256 from workdo.templates
              where name = $1 and kind = 'machine' and starts_with(sha256, $2)",
        )
        .bind(template)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        let (target_id, sha) = match versions.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(StoreError::MigrationRefused(format!(
                    "{template} has no machine version with SHA-256 {to}…"
                )));
            }
            _ => {
                return Err(StoreError::MigrationRefused(format!(
                    "{to} names {} versions of {template}; give more of the SHA-256",
                    versions.len()
                )));
            }
        };
        let target = self.template_by_id(target_id).await?.spec;
        let Some(m) = &target.machine else {
            return Err(StoreError::MigrationRefused(format!(
                "{template} is not a machine"
            )));
        };
        let mut tx = self.pool.begin().await?;
        let jobs: Vec<(i64, String, i32, Value)> = sqlx::query_as(
            "select id, object_id, version, machine from workdo.workflows
              where template = $1 and machine is not null and active and status = 'active'
                and ($2::bigint is null or id = $2)
              order by id for no key update",
        )
        .bind(template)
        .bind(workflow)
        .fetch_all(&mut *tx)
        .await?;
        let mut missing = std::collections::BTreeSet::new();
        let mut finals = std::collections::BTreeSet::new();
        for (_, _, _, record) in &jobs {
            let state = MachineRecord::read(record).state;
            let to_state = map.get(state).map(String::as_str).unwrap_or(state);
            match m.states.get(to_state) {
                None => {
                    missing.insert(state.to_string());
                }
                // A migration moves a job, it does not end it: a job put in a final state this
                // way stayed active, its alarms pending, accepting no signal.
                Some(s) if s.is_final => {
                    finals.insert(to_state.to_string());
                }
                Some(_) => {}
            }
        }
        if !missing.is_empty() {
            return Err(StoreError::MigrationRefused(format!(
                "states {} are not in {template} {} and not mapped (--map OLD=NEW)",
                missing.into_iter().collect::<Vec<_>>().join(", "),
                &sha[..12]
            )));
        }
        if !finals.is_empty() {
            return Err(StoreError::MigrationRefused(format!(
                "final states {} in {template} {}: a job ends by a transition, not by a migration (--map it to a state that is not final)",
                finals.into_iter().collect::<Vec<_>>().join(", "),
                &sha[..12]
            )));
        }
        // The new version's variables a job does not have yet start at their declared values:
        // without them its first transition that read one rolled back, and every one after.
        let defaults = Value::Object(m.variables.clone().into_iter().collect());
        let mut events = EventBuf::default();
        for (id, object, version, record) in &jobs {
            let from = MachineRecord::read(record).state;
            let state = map.get(from).cloned().unwrap_or_else(|| from.to_string());
            sqlx::query(
                "update workdo.workflows
                    set template_id = $2,
                        machine = jsonb_set(
                            jsonb_set(machine, '{state}', to_jsonb($3::text)), '{variables}',
                            $4::jsonb || coalesce(machine -> 'variables', '{}'::jsonb))
                  where id = $1",
            )
            .bind(id)
            .bind(target_id)
            .bind(&state)
            .bind(&defaults)
            .execute(&mut *tx)
            .await?;
            if state != from {
                sqlx::query(
                    "update workdo.alarms set state = $3
                      where workflow_id = $1 and state = $2 and cancelled_at is null",
                )
                .bind(id)
                .bind(from)
                .bind(&state)
                .execute(&mut *tx)
                .await?;
            }
            events.push(
                NewEvent::new(object, "migrated", actor)
                    .workflow(*id)
                    .template(template)
                    .version(*version)
                    .detail(json!({"to_sha256": sha, "from_state": from, "state": state,
                                   "map": map})),
            );
        }
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(jobs.len())
    }
}
