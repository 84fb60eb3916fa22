//! The demo's reports: progress and summary of one demo run (objects whose property
//! `demo_run` is the run's number).

use serde_json::json;

use super::{Result, Store};

/// One template step's progress in a run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DemoProgress {
    pub template: String,
    pub name: String,
    pub total: i64,
    pub finished: i64,
    pub errors: i64,
    /// Ready, started, scheduled or retrying: not done yet.
    pub running: i64,
}

/// One template step's summary in a run.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DemoSummary {
    pub template: String,
    pub name: String,
    pub completed: i64,
    pub skipped: i64,
    pub errors: i64,
    pub retries: i64,
    pub deferrals: i64,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
}

/// A run's totals.
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoTotals {
    /// Steps completed by a function (bootstrap steps start completed and ran nothing).
    pub ran: i64,
    pub workflows_completed: i64,
    /// Workflows stopped at a step in error.
    pub workflows_failed: i64,
}

impl Store {
    /// Progress per template step of demo run `run`.
    pub async fn demo_progress(&self, run: u32) -> Result<Vec<DemoProgress>> {
        Ok(sqlx::query_as(
            "select s.template, s.name, count(*) as total,
                    count(*) filter (where s.status in ('completed', 'skipped')) as finished,
                    count(*) filter (where s.status in ('error', 'exception')) as errors,
                    count(*) filter (where s.status in ('ready', 'started', 'scheduled', 'retrying')) as running
               from workdo.steps s join workdo.objects o on o.id = s.object_id
              where s.active and o.properties -> 'demo_run' = $1
              group by s.template, s.name
              order by s.template desc, min(s.id)",
        )
        .bind(json!(run))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Summary per template step of demo run `run`.
    pub async fn demo_summary(&self, run: u32) -> Result<Vec<DemoSummary>> {
        Ok(sqlx::query_as(
            "with s as (
            select s.* from workdo.steps s join workdo.objects o on o.id = s.object_id
             where s.active and o.properties -> 'demo_run' = $1
         ), e as (
            select e.template, e.step,
                   count(*) filter (where e.kind = 'failed_retrying') as retries,
                   count(*) filter (where e.kind = 'deferred') as deferrals
              from workdo.events e join workdo.objects o on o.id = e.object_id
             where o.properties -> 'demo_run' = $1 and e.kind in ('failed_retrying', 'deferred')
             group by 1, 2
         )
         select s.template, s.name,
                count(*) filter (where s.status = 'completed') as completed,
                count(*) filter (where s.status = 'skipped') as skipped,
                count(*) filter (where s.status in ('error', 'exception')) as errors,
                coalesce(max(e.retries), 0) as retries,
                coalesce(max(e.deferrals), 0) as deferrals,
                percentile_cont(0.5) within group (order by s.elapsed)
                    filter (where s.status = 'completed') as p50,
                percentile_cont(0.95) within group (order by s.elapsed)
                    filter (where s.status = 'completed') as p95
           from s left join e on e.template = s.template and e.step = s.name
          group by s.template, s.name
          order by s.template desc, min(s.id)",
        )
        .bind(json!(run))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Totals of demo run `run`.
    pub async fn demo_totals(&self, run: u32) -> Result<DemoTotals> {
        let ran: i64 = sqlx::query_scalar(
            "select count(*) from workdo.events e join workdo.objects o on o.id = e.object_id
          where o.properties -> 'demo_run' = $1 and e.kind = 'completed'",
        )
        .bind(json!(run))
        .fetch_one(&self.pool)
        .await?;
        let (workflows_completed, workflows_failed): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where w.status = 'completed'),
                count(*) filter (where w.status = 'active' and exists (
                    select 1 from workdo.steps s where s.workflow_id = w.id and s.status in ('error', 'exception')))
           from workdo.workflows w join workdo.objects o on o.id = w.object_id
          where w.active and o.properties -> 'demo_run' = $1",
        )
        .bind(json!(run))
        .fetch_one(&self.pool)
        .await?;
        Ok(DemoTotals {
            ran,
            workflows_completed,
            workflows_failed,
        })
    }
}
