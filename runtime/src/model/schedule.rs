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
//! A schedule may instead send a signal to the jobs of a machine, optionally only those in one
//! state (and, with `objects`, only those objects):
//!
//! ```yaml
//!   - name: nudge-reviewers
//!     cron: "0 0 9 * * Mon-Fri"
//!     signal: remind
//!     jobs: { template: loanReviewWF, state: Notified }
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

/// A schedules file that cannot be used, with what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct ScheduleError {
    pub origin: String,
    pub message: String,
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
    /// Which objects: required to start workflows; with `signal`, narrows the jobs signalled.
    #[serde(default)]
    pub objects: Option<Objects>,
    #[serde(default)]
    pub restart: bool,
    /// Send this signal to jobs (`jobs`) instead of starting workflows.
    #[serde(default)]
    pub signal: Option<String>,
    /// The jobs a `signal` goes to.
    #[serde(default)]
    pub jobs: Option<Jobs>,
}

/// The machine jobs a signal schedule signals: those of `template` still running, in `state`
/// when given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jobs {
    pub template: String,
    #[serde(default)]
    pub state: Option<String>,
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
        cron::Schedule::from_str(&with_seconds(&self.cron)).map_err(|e| {
            format!(
                "schedule {}: cron {:?}: {e} (five fields as in crontab: min hour day-of-month month day-of-week; or six or seven with seconds first and a year last)",
                self.name, self.cron
            )
        })
    }

    /// Check the entry; `default_template` fills a missing `start`.
    ///
    /// # Errors
    /// A message naming the schedule and what is wrong with it.
    pub fn validate(&mut self, default_template: Option<&str>) -> Result<(), String> {
        // Postgres stores no NUL: said by field here, not as its escape error at save.
        let whole = serde_json::to_value(&*self).unwrap_or_default();
        if let Some(at) = crate::model::nul_at(&whole) {
            return Err(format!(
                "schedule {:?}: {at} holds a NUL character (\\u0000), which Postgres cannot store",
                self.name.replace('\0', "\\0")
            ));
        }
        if self.name.trim().is_empty() || self.name.len() > 200 {
            return Err(format!(
                "schedule name {:?} must be 1-200 characters",
                self.name
            ));
        }
        if let Some(signal) = &self.signal {
            if self.start.is_some() {
                return Err(format!(
                    "schedule {}: give `start` (start workflows) or `signal` (signal jobs), not both",
                    self.name
                ));
            }
            if signal.trim().is_empty() {
                return Err(format!("schedule {}: `signal` is empty", self.name));
            }
            if self.jobs.is_none() {
                self.jobs = default_template.map(|t| Jobs {
                    template: t.to_string(),
                    state: None,
                });
            }
            if self.jobs.as_ref().is_none_or(|j| j.template.is_empty()) {
                return Err(format!(
                    "schedule {}: `signal` needs `jobs: {{template: MACHINE, state: STATE}}`",
                    self.name
                ));
            }
        } else {
            if self.jobs.is_some() {
                return Err(format!("schedule {}: `jobs` goes with `signal`", self.name));
            }
            if self.start.is_none() {
                self.start = default_template.map(String::from);
            }
            if self.start.as_deref().is_none_or(str::is_empty) {
                return Err(format!("schedule {}: `start` names no template", self.name));
            }
            if self.objects.is_none() {
                return Err(format!(
                    "schedule {}: `objects` says which objects to start on",
                    self.name
                ));
            }
        }
        self.schedule()?;
        self.tz()?;
        // Ids in their one spelling, as every start stores them: a bare druid was never found
        // among the stored `druid:` ids, so each tick restarted the workflow, progress wiped;
        // and an id no start accepts stopped the schedule at every tick.
        if let Some(Objects::Ids { ids }) = &mut self.objects {
            for id in ids.iter_mut() {
                *id = super::object_id::normalize(id)
                    .map_err(|e| format!("schedule {}: object {id:?}: {e}", self.name))?;
            }
        }
        if let Some(Objects::Before { before, .. }) = &self.objects
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

/// A crontab line (five fields: minute hour day-of-month month day-of-week, Sunday 0 or 7) as
/// the `cron` crate reads it: seconds `0` first, and numbered week days as names (the crate
/// counts Sunday as 1). Six or seven fields are left as they are.
pub fn with_seconds(cron: &str) -> String {
    let fields: Vec<&str> = cron.split_whitespace().collect();
    if fields.len() != 5 {
        return cron.to_string();
    }
    const DAYS: [&str; 8] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let day = |d: &str| -> String {
        d.parse::<usize>()
            .ok()
            .and_then(|n| DAYS.get(n))
            .map_or_else(|| d.to_string(), |name| (*name).to_string())
    };
    let dow: Vec<String> = fields[4]
        .split(',')
        .map(|item| {
            let (range, step) = match item.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (item, None),
            };
            let range = match range.split_once('-') {
                Some((a, b)) => format!("{}-{}", day(a), day(b)),
                None => day(range),
            };
            match step {
                Some(s) => format!("{range}/{s}"),
                None => range,
            }
        })
        .collect();
    format!(
        "0 {} {} {} {} {}",
        fields[0],
        fields[1],
        fields[2],
        fields[3],
        dow.join(",")
    )
}

/// Parse a schedules file (`schedules: [...]`).
///
/// # Errors
/// Malformed YAML (with its line) or an invalid entry, naming the file.
pub fn parse_file(origin: &str, source: &str) -> Result<Vec<ScheduleSpec>, ScheduleError> {
    let invalid = |message: String| ScheduleError {
        origin: origin.to_string(),
        message,
    };
    let file: File = serde_norway::from_str(source).map_err(|e| invalid(e.to_string()))?;
    let mut out = file.schedules;
    for s in &mut out {
        s.validate(None).map_err(invalid)?;
    }
    if let Some(name) = duplicate_name(&out) {
        return Err(invalid(format!(
            "schedule {name:?} is named twice: one would silently replace the other"
        )));
    }
    Ok(out)
}

/// A name two of `specs` share, if any.
pub fn duplicate_name(specs: &[ScheduleSpec]) -> Option<&str> {
    let mut seen = std::collections::HashSet::new();
    specs
        .iter()
        .map(|s| s.name.as_str())
        .find(|n| !seen.insert(*n))
}

/// RFC 3339, or a plain date (midnight UTC).
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
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
            objects: Some(Objects::Ids { ids: vec![] }),
            restart: false,
            signal: None,
            jobs: None,
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
            Some(Objects::Before {
                property: "embargo_until".into(),
                before: "now".into()
            })
        );
        let nudge = parse_file(
            "s.yaml",
            "schedules:\n  - name: n\n    cron: \"0 0 9 * * *\"\n    signal: remind\n    jobs: { template: loanReviewWF, state: Notified }\n",
        )
        .expect("a signal schedule");
        assert_eq!(
            nudge[0].jobs.as_ref().map(|j| j.template.as_str()),
            Some("loanReviewWF")
        );
        let e = parse_file(
            "s.yaml",
            "schedules:\n  - name: n\n    cron: \"0 0 9 * * *\"\n    signal: remind\n",
        )
        .expect_err("no jobs")
        .to_string();
        assert!(e.contains("`signal` needs `jobs"), "{e}");
        let e = parse_file(
            "s.yaml",
            "schedules:\n  - name: n\n    cron: \"0 0 9 * * *\"\n    start: aWF\n",
        )
        .expect_err("no objects")
        .to_string();
        assert!(e.contains("`objects` says which objects"), "{e}");
    }

    #[test]
    fn crontab_lines_with_five_fields_are_read_as_crontab_means_them() {
        assert_eq!(with_seconds("0 3 * * *"), "0 0 3 * * *");
        assert_eq!(with_seconds("30 9 * * 1-5"), "0 30 9 * * Mon-Fri");
        assert_eq!(with_seconds("0 0 * * 0,7"), "0 0 0 * * Sun,Sun");
        assert_eq!(with_seconds("*/15 * * * */2"), "0 */15 * * * */2");
        assert_eq!(
            with_seconds("0 0 3 * * *"),
            "0 0 3 * * *",
            "six fields untouched"
        );
        let mut s = ScheduleSpec {
            name: "n".into(),
            cron: "30 9 * * 1-5".into(),
            timezone: None,
            start: Some("aWF".into()),
            objects: Some(Objects::Ids { ids: vec![] }),
            restart: false,
            signal: None,
            jobs: None,
        };
        s.validate(None).expect("a crontab line is valid");
        // Friday 2026-11-27 10:00 UTC: next is Monday 09:30.
        assert_eq!(
            s.next_after(at("2026-11-27T10:00:00Z")),
            Some(at("2026-11-30T09:30:00Z"))
        );
        s.cron = "0 3 * * 0".into();
        // Sunday is 0 in crontab: the next Sunday 03:00 after Friday.
        assert_eq!(
            s.next_after(at("2026-11-27T10:00:00Z")),
            Some(at("2026-11-29T03:00:00Z"))
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
