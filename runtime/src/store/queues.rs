//! WorkDo's queues: objects waiting at a step whose named steps are done, steps in error, and
//! the lanes with work — for a template step, a generated step, or every instance of a
//! bricklet's step.

use super::{QueueEntry, Result, StepRow, Store};

/// Which steps a queue's `step` names: a template step by name; a name with a `/` — a generated
/// step (`GENERATOR/BRICKLET#N/STEP`) or a machine's call step — by name, or every instance
/// of a bricklet's step (`BRICKLET/STEP`, or `call/FUNCTION`) by its claim key.
fn step_predicate(step: &str) -> &'static str {
    if step.contains('/') {
        "(s.name = $2 or s.queue = $1 || ':' || $2)"
    } else {
        "s.name = $2"
    }
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
        let (ct, cs): (Vec<String>, Vec<String>) = completed.iter().cloned().unzip();
        let sql = format!(
            "select s.object_id, s.version, s.lane,
                    case when s.status in ('scheduled', 'retrying') then 'ready' else s.status end as status,
                    s.priority, s.run_at
               from workdo.steps s
              where s.template = $1 and {} and s.active
                and (s.status in ('waiting', 'ready')
                     or (s.status in ('scheduled', 'retrying') and s.run_at <= now()))
                and ($3::text is null or s.lane = $3)
                and (select count(distinct (r.template, r.name))
                       from unnest($4::text[], $5::text[]) as r(template, name)
                       join workdo.workflows cw
                         on cw.object_id = s.object_id and cw.template = r.template and cw.active
                       join workdo.steps c on c.workflow_id = cw.id and c.name = r.name
                      where c.status in ('completed', 'skipped'))
                    = (select count(distinct (t, n)) from unnest($4::text[], $5::text[]) as q(t, n))
              order by s.priority desc, s.run_at, s.id
              limit $6",
            step_predicate(step)
        );
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(template)
            .bind(step)
            .bind(lane)
            .bind(&ct)
            .bind(&cs)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows)
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
              where s.template = $1 and {} and s.active and s.status = 'error'
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
    pub async fn queue_lanes(&self, template: &str, step: &str) -> Result<Vec<String>> {
        let sql = format!(
            "select distinct s.lane from workdo.steps s
              where s.template = $1 and {} and s.active and (s.status = 'waiting' or s.status = 'ready')
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
}
