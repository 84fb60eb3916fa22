//! A facet's steps, errors grouped by message, and timings: the page's reads of steps.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::store::{Result, Store};

/// Steps in error that share a template step and a message: the admin page's errors view.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ErrorGroup {
    pub template: String,
    pub step: String,
    pub message: String,
    pub count: i64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    /// One of the group's error texts (e.g. a stack trace).
    pub text: Option<String>,
    /// The latest message of the group as written (`message` has its numbers masked as `#`).
    pub example: String,
    pub ids: Vec<i64>,
}

/// Elapsed and wait times of one template step over a window (seconds).
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Timing {
    pub template: String,
    pub step: String,
    pub finished: i64,
    pub elapsed_p50: Option<f64>,
    pub elapsed_p95: Option<f64>,
    pub elapsed_p99: Option<f64>,
    pub wait_p50: Option<f64>,
    pub wait_p95: Option<f64>,
    pub wait_p99: Option<f64>,
}

impl Store {
    /// A page of the active steps of a template step in a status, narrowed by `filter`, most
    /// recently changed first: `limit` from `offset`.
    pub async fn steps_in(
        &self,
        template: &str,
        step: &str,
        status: &str,
        filter: &crate::store::FacetFilter,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<crate::store::StepRow>> {
        let (key, value) = filter.property_parts();
        let names = facet_clause(template, step);
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select * from workdo.steps s where {names} and {STEPS_IN}
              order by updated_at desc, id limit $8 offset $9"
        )))
        .bind(template)
        .bind(step)
        .bind(status)
        .bind(filter.lane.as_deref())
        .bind(filter.milestone.as_deref())
        .bind(key)
        .bind(value)
        .bind(limit.clamp(1, 10_000))
        .bind(offset.max(0))
        .fetch_all(&self.pool)
        .await?)
    }

    /// How many steps [`Store::steps_in`] pages through, and (`ids`) at most `ids_limit` of
    /// their ids, for acting on all of them: one scan for both.
    pub async fn steps_in_all(
        &self,
        template: &str,
        step: &str,
        status: &str,
        filter: &crate::store::FacetFilter,
        ids_limit: i64,
    ) -> Result<(i64, Vec<i64>)> {
        let (key, value) = filter.property_parts();
        let names = facet_clause(template, step);
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select count(*), coalesce((array_agg(s.id order by s.id) filter (where $8 > 0))[1:$8], '{{}}')
               from workdo.steps s where {names} and {STEPS_IN}"
        )))
        .bind(template)
        .bind(step)
        .bind(status)
        .bind(filter.lane.as_deref())
        .bind(filter.milestone.as_deref())
        .bind(key)
        .bind(value)
        .bind(ids_limit.max(0))
        .fetch_one(&self.pool)
        .await?)
    }

    /// Active steps in error, grouped by template step and message with its numbers masked (26
    /// messages differing by a barcode or an id are one group), biggest group first.
    pub async fn errors_grouped(&self) -> Result<Vec<ErrorGroup>> {
        Ok(sqlx::query_as(
            "select template, name as step,
                    regexp_replace(coalesce(error_message, ''), '\\m[0-9]+\\M', '#', 'g') as message,
                    count(*) as count, min(updated_at) as first, max(updated_at) as last,
                    (array_agg(error_text order by updated_at desc))[1] as text,
                    (array_agg(coalesce(error_message, '') order by updated_at desc))[1] as example,
                    array_agg(id order by id) as ids
               from workdo.steps where status in ('error', 'exception') and active
              group by template, name, regexp_replace(coalesce(error_message, ''), '\\m[0-9]+\\M', '#', 'g')
              order by count(*) desc, template, name",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Per template step, over the steps finished in the last `hours`: elapsed (the function's
    /// time) and wait (ready to started) at p50, p95 and p99.
    pub async fn timings(&self, hours: f64) -> Result<Vec<Timing>> {
        Ok(sqlx::query_as(
            "select template, workdo.facet_name(name) as step, count(*) as finished,
                    percentile_cont(0.5) within group (order by elapsed) as elapsed_p50,
                    percentile_cont(0.95) within group (order by elapsed) as elapsed_p95,
                    percentile_cont(0.99) within group (order by elapsed) as elapsed_p99,
                    percentile_cont(0.5) within group (order by extract(epoch from started_at - run_at)) as wait_p50,
                    percentile_cont(0.95) within group (order by extract(epoch from started_at - run_at)) as wait_p95,
                    percentile_cont(0.99) within group (order by extract(epoch from started_at - run_at)) as wait_p99
               from workdo.steps
              where finished_at > now() - make_interval(secs => $1) and status = 'completed'
              group by template, workdo.facet_name(name) order by template, 2",
        )
        .bind(hours * 3600.0)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// How a facet's step ($2) names steps: itself, or for a generated step's bricklet step
/// (`generator/bricklet/step`, as the counts name it) every instance of it.
fn names_clause(step: &str) -> &'static str {
    if step.contains('/') && !step.contains('#') {
        "workdo.facet_name(s.name) = $2"
    } else {
        "s.name = $2"
    }
}

/// The template ($1) and step ($2) a facet names; either empty: any (one status across
/// templates, `/ui/steps?status=waiting`).
fn facet_clause(template: &str, step: &str) -> String {
    let t = if template.is_empty() {
        "$1::text = ''"
    } else {
        "s.template = $1"
    };
    let n = if step.is_empty() {
        "$2::text = ''"
    } else {
        names_clause(step)
    };
    format!("{t} and {n}")
}

/// The steps a facet names ($3 status; the template $1 and step $2 by [`facet_clause`]),
/// narrowed by lane ($4), milestone reached ($5) and property $6 = $7.
const STEPS_IN: &str = "status = $3 and active
    and ($4::text is null or lane = $4)
    and ($5::text is null or exists (select 1 from workdo.milestones m
                                      where m.object_id = s.object_id and m.name = $5))
    and ($6::text is null or exists (select 1 from workdo.objects o
                                      where o.id = s.object_id and o.properties ->> $6 = $7))";
