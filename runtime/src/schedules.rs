//! Cron schedules that start workflows: calendar work, run on time, once.
//!
//! A schedules file (or a template's `schedules:`) declares entries:
//!
//! ```yaml
//! schedules:
//!   - name: nightly-embargo-release
//!     cron: "0 0 3 * * *"          # sec min hour day-of-month month day-of-week [year]
//!     timezone: America/Los_Angeles # optional, default UTC
//!     start: embargoReleaseWF
//!     objects: { property: embargo_until, before: now }
//!   - name: weekly-audit
//!     cron: "0 0 4 * * Sun"
//!     start: preservationAuditWF
//!     objects: { ids: [druid:bb123cd4567, druid:cd234ef5678] }
//!     restart: true                 # start again even where the workflow exists
//! ```
//!
//! Each tick fires once even with several runtimes: the row is claimed with `SKIP LOCKED` and
//! its next fire time advances in the transaction that starts the workflows. The next fire time
//! is computed from *now*, so ticks missed during downtime fire once, not once each.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
}

/// Which objects a schedule starts its workflow on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum Objects {
    Ids { ids: Vec<String> },
    Before { property: String, before: String },
    Equals { property: String, equals: Value },
}

/// One schedule entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    pub name: String,
    pub cron: String,
    #[serde(default)]
    pub timezone: Option<String>,
    /// The template to start (in a template's own `schedules:`, the template itself).
    #[serde(default)]
    pub start: Option<String>,
    pub objects: Objects,
    #[serde(default)]
    pub restart: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    schedules: Vec<ScheduleSpec>,
}

impl ScheduleSpec {
    fn tz(&self) -> Result<Tz, String> {
        let name = self.timezone.as_deref().unwrap_or("UTC");
        Tz::from_str(name)
            .map_err(|_| format!("schedule {}: unknown time zone {name:?}", self.name))
    }

    fn schedule(&self) -> Result<cron::Schedule, String> {
        cron::Schedule::from_str(&self.cron).map_err(|e| {
            format!(
                "schedule {}: cron {:?}: {e} (six or seven fields: sec min hour day-of-month month day-of-week [year])",
                self.name, self.cron
            )
        })
    }

    /// Check the entry; `default_template` fills a missing `start`.
    ///
    /// # Errors
    /// A message naming the schedule and what is wrong with it.
    pub fn validate(&mut self, default_template: Option<&str>) -> Result<(), String> {
        if self.name.trim().is_empty() || self.name.len() > 200 {
            return Err(format!(
                "schedule name {:?} must be 1-200 characters",
                self.name
            ));
        }
        if self.start.is_none() {
            self.start = default_template.map(String::from);
        }
        if self.start.as_deref().is_none_or(str::is_empty) {
            return Err(format!("schedule {}: `start` names no template", self.name));
        }
        self.schedule()?;
        self.tz()?;
        if let Objects::Before { before, .. } = &self.objects
            && before != "now"
            && DateTime::parse_from_rfc3339(before).is_err()
        {
            return Err(format!(
                "schedule {}: before={before:?} is neither `now` nor an RFC 3339 time",
                self.name
            ));
        }
        Ok(())
    }

    /// The first fire time after `after`, in UTC.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let tz = self.tz().ok()?;
        let schedule = self.schedule().ok()?;
        schedule
            .after(&after.with_timezone(&tz))
            .next()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// Parse a schedules file (`schedules: [...]`).
///
/// # Errors
/// Malformed YAML (with its line) or an invalid entry, naming the file.
pub fn parse_file(origin: &str, source: &str) -> Result<Vec<ScheduleSpec>, ScheduleError> {
    let invalid = |message: String| ScheduleError::Invalid {
        origin: origin.to_string(),
        message,
    };
    let file: File = serde_norway::from_str(source).map_err(|e| invalid(e.to_string()))?;
    let mut out = file.schedules;
    for s in &mut out {
        s.validate(None).map_err(invalid)?;
    }
    Ok(out)
}

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
}

/// What firing did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Fired {
    pub schedule: String,
    pub tick: Option<DateTime<Utc>>,
    pub started: usize,
}

impl Store {
    /// Create or update schedules. A schedule whose timing changed gets a new next fire time;
    /// an unchanged one keeps its own.
    pub async fn schedules_put(
        &self,
        specs: &[ScheduleSpec],
        origin: &str,
    ) -> Result<usize, ScheduleError> {
        let mut tx = self.pool().begin().await?;
        for s in specs {
            let next = s
                .next_after(Utc::now())
                .ok_or_else(|| ScheduleError::Invalid {
                    origin: origin.into(),
                    message: format!("schedule {} never fires", s.name),
                })?;
            let objects = serde_json::to_value(&s.objects).unwrap_or(Value::Null);
            sqlx::query(
                "insert into workdo.schedules (name, cron, timezone, template, objects, restart, next_fire_at, origin)
                 values ($1, $2, $3, $4, $5, $6, $7, $8)
                 on conflict (name) do update set
                    next_fire_at = case when (schedules.cron, schedules.timezone) is distinct from (excluded.cron, excluded.timezone)
                                        then excluded.next_fire_at else schedules.next_fire_at end,
                    cron = excluded.cron, timezone = excluded.timezone, template = excluded.template,
                    objects = excluded.objects, restart = excluded.restart, origin = excluded.origin,
                    enabled = true, updated_at = now()",
            )
            .bind(&s.name)
            .bind(&s.cron)
            .bind(s.timezone.as_deref().unwrap_or("UTC"))
            .bind(s.start.as_deref().unwrap_or_default())
            .bind(&objects)
            .bind(s.restart)
            .bind(next)
            .bind(origin)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(specs.len())
    }

    pub async fn schedules_list(&self) -> Result<Vec<ScheduleRow>, ScheduleError> {
        Ok(sqlx::query_as(
            "select name, cron, timezone, template, objects, restart, enabled, next_fire_at, last_fired_at
               from workdo.schedules order by next_fire_at, name",
        )
        .fetch_all(self.pool())
        .await?)
    }

    /// Fire every due schedule once: start its workflows and move its next fire time past now,
    /// in one transaction per schedule.
    pub async fn schedules_fire_due(&self) -> Result<Vec<Fired>, ScheduleError> {
        let mut fired = Vec::new();
        loop {
            let mut tx = self.pool().begin().await?;
            let due: Option<ScheduleRow> = sqlx::query_as(
                "select name, cron, timezone, template, objects, restart, enabled, next_fire_at, last_fired_at
                   from workdo.schedules
                  where enabled and next_fire_at <= now()
                  order by next_fire_at limit 1 for update skip locked",
            )
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = due else { break };
            let spec = ScheduleSpec {
                name: row.name.clone(),
                cron: row.cron.clone(),
                timezone: Some(row.timezone.clone()),
                start: Some(row.template.clone()),
                objects: serde_json::from_value(row.objects.clone()).map_err(|e| {
                    ScheduleError::Invalid {
                        origin: format!("schedule {}", row.name),
                        message: format!("stored objects selector unreadable: {e}"),
                    }
                })?,
                restart: row.restart,
            };
            let objects = select_objects(&mut tx, &spec, &row.template).await?;
            let mut started = 0;
            if !objects.is_empty() {
                let mut req = crate::store::StartRequest::new(&row.template, &[]);
                req.objects = objects;
                req.actor = format!("schedule:{}", row.name);
                started = self.workflow_start_in(&mut tx, &req).await?.len();
            }
            let next = spec.next_after(Utc::now());
            sqlx::query(
                "update workdo.schedules set last_fired_at = now(), next_fire_at = coalesce($2, 'infinity'),
                        enabled = $2 is not null
                  where name = $1",
            )
            .bind(&row.name)
            .bind(next)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "insert into workdo.events (kind, actor, detail) values ('schedule_fired', $1, $2)",
            )
            .bind(format!("schedule:{}", row.name))
            .bind(serde_json::json!({"schedule": row.name, "tick": row.next_fire_at, "started": started, "next": next}))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            fired.push(Fired {
                schedule: row.name,
                tick: Some(row.next_fire_at),
                started,
            });
        }
        Ok(fired)
    }
}

/// The objects a schedule starts on now; without `restart`, those already having the workflow
/// for their current version are left out.
async fn select_objects(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    spec: &ScheduleSpec,
    template: &str,
) -> Result<Vec<String>, ScheduleError> {
    let candidates: Vec<(String, Value)> = match &spec.objects {
        Objects::Ids { ids } => {
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
        .filter(|(_, props)| match &spec.objects {
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
    if !spec.restart && !chosen.is_empty() {
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

/// RFC 3339, or a plain date (midnight UTC).
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|d| d.and_utc())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    #[test]
    fn next_fire_times_respect_the_time_zone() {
        let mut s = ScheduleSpec {
            name: "n".into(),
            cron: "0 0 3 * * *".into(),
            timezone: Some("America/Los_Angeles".into()),
            start: Some("aWF".into()),
            objects: Objects::Ids { ids: vec![] },
            restart: false,
        };
        s.validate(None).expect("valid");
        // 03:00 in Los Angeles in November (PST, UTC-8) is 11:00 UTC.
        assert_eq!(
            s.next_after(at("2026-11-22T04:00:00Z")),
            Some(at("2026-11-22T11:00:00Z"))
        );
        s.timezone = None;
        assert_eq!(
            s.next_after(at("2026-11-22T04:00:00Z")),
            Some(at("2026-11-23T03:00:00Z"))
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let e = parse_file("s.yaml", "schedules:\n  - name: x\n    cron: \"every day\"\n    start: aWF\n    objects: { ids: [] }\n")
            .expect_err("bad cron")
            .to_string();
        assert!(
            e.starts_with("s.yaml: schedule x: cron \"every day\""),
            "{e}"
        );
        let e = parse_file("s.yaml", "schedules:\n  - name: y\n    cron: \"0 * * * * *\"\n    timezone: Mars/Olympus\n    start: aWF\n    objects: { ids: [] }\n")
            .expect_err("bad tz")
            .to_string();
        assert!(e.contains("unknown time zone \"Mars/Olympus\""), "{e}");
        let e = parse_file(
            "s.yaml",
            "schedules:\n  - name: z\n    cron: \"0 * * * * *\"\n    objects: { ids: [] }\n",
        )
        .expect_err("no template")
        .to_string();
        assert!(e.contains("`start` names no template"), "{e}");
        let ok = parse_file(
            "s.yaml",
            "schedules:\n  - name: e\n    cron: \"0 0 3 * * *\"\n    start: embargoReleaseWF\n    objects: { property: embargo_until, before: now }\n",
        )
        .expect("valid");
        assert_eq!(
            ok[0].objects,
            Objects::Before {
                property: "embargo_until".into(),
                before: "now".into()
            }
        );
    }

    #[test]
    fn plain_dates_and_times_parse() {
        assert_eq!(parse_time("2026-01-02"), Some(at("2026-01-02T00:00:00Z")));
        assert_eq!(
            parse_time("2026-01-02T10:00:00+01:00"),
            Some(at("2026-01-02T09:00:00Z"))
        );
        assert_eq!(parse_time("soon"), None);
    }
}
