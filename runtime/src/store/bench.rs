//! `workdo bench`'s fixtures and checks, in the bench's own database (`workdo_bench`): the
//! yardstick queue it measures workdo against, emptying the tables between runs, and the
//! checks that make a fast wrong answer fail.

use sqlx::{ConnectOptions, Connection};

use super::{Result, Store, StoreError};

impl Store {
    /// Create the yardstick: a minimal SQL queue, a table with a partial index on ready rows
    /// ordered by priority then run_at.
    pub async fn bench_queue_create(&self) -> Result<()> {
        sqlx::query(
            "create table bench_queue (id bigint generated always as identity primary key,
                                       priority integer not null default 0,
                                       run_at timestamptz not null default now(),
                                       status text not null default 'ready')",
        )
        .execute(&self.pool)
        .await?;
        sqlx::query(
            "create index bench_queue_ready on bench_queue (priority desc, run_at, id) where status = 'ready'",
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Empty the yardstick queue and fill it with `jobs` ready rows.
    pub async fn bench_queue_fill(&self, jobs: i64) -> Result<()> {
        sqlx::query("truncate bench_queue")
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "insert into bench_queue (priority) select (g % 3) from generate_series(1, $1) g",
        )
        .bind(jobs)
        .execute(&self.pool)
        .await?;
        sqlx::query("analyze bench_queue")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The yardstick's claim: up to `batch` ready rows, `FOR UPDATE SKIP LOCKED`, one commit.
    pub async fn bench_queue_claim(&self, batch: i64) -> Result<Vec<i64>> {
        Ok(sqlx::query_scalar(
            "with c as (select id from bench_queue where status = 'ready'
                         order by priority desc, run_at, id limit $1 for update skip locked)
             update bench_queue q set status = 'running' from c where q.id = c.id returning q.id",
        )
        .bind(batch)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The yardstick's completion: mark claimed rows done, one commit.
    pub async fn bench_queue_complete(&self, ids: &[i64]) -> Result<()> {
        sqlx::query("update bench_queue set status = 'done' where id = any($1)")
            .bind(ids)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Empty every table a run writes (templates stay).
    pub async fn bench_reset(&self) -> Result<()> {
        sqlx::query(
            "truncate workdo.steps, workdo.workflows, workdo.events, workdo.milestones, workdo.objects,
                      workdo.alert_outbox, workdo.signals, workdo.alarms cascade",
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Register `ids` with the same document `name` (the dispatch scenario's observers read it).
    pub async fn bench_documents(&self, ids: &[String], name: &str, content: &str) -> Result<()> {
        sqlx::query(
            "with o as (insert into workdo.objects (id) select unnest($1::text[]) returning id)
             insert into workdo.documents (object_id, name, content) select id, $2, $3 from o",
        )
        .bind(ids)
        .bind(name)
        .bind(content)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// How late each fired alarm was (ms), from the `alarm_fired` events.
    pub async fn bench_alarm_late_ms(&self) -> Result<Vec<f64>> {
        Ok(sqlx::query_scalar(
            "select (detail ->> 'late_ms')::float8 from workdo.events where kind = 'alarm_fired'",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The sum of the `count` variable over the machine jobs, and how many jobs are in `state`.
    pub async fn bench_machine_totals(&self, state: &str) -> Result<(i64, i64)> {
        Ok(sqlx::query_as(
            "select coalesce(sum((machine -> 'variables' ->> 'count')::bigint), 0)::bigint,
                    count(*) filter (where machine ->> 'state' = $1)
               from workdo.workflows where machine is not null",
        )
        .bind(state)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Refresh the planner's statistics of the steps.
    pub async fn bench_analyze(&self) -> Result<()> {
        sqlx::query("analyze workdo.steps")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Every step that ran completed exactly once, and no step is unfinished: `expected`
    /// completions in the events, each of a distinct step.
    pub async fn bench_check_exactly_once(&self, expected: i64) -> Result<()> {
        let (events, distinct, unfinished): (i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from workdo.events where kind in ('completed', 'status_set') and status = 'completed'),
                    (select count(distinct (workflow_id, step)) from workdo.events
                      where kind in ('completed', 'status_set') and status = 'completed'),
                    (select count(*) from workdo.steps where status <> 'completed')",
        )
        .fetch_one(&self.pool)
        .await?;
        if events != expected || distinct != expected || unfinished != 0 {
            return Err(StoreError::Invalid {
                field: "bench check",
                value: format!(
                    "expected {expected} completions, saw {events} ({distinct} distinct), {unfinished} steps unfinished"
                ),
                reason: "a step was lost or completed twice",
            });
        }
        Ok(())
    }

    /// Completed workflows of `template`.
    pub async fn bench_workflows_completed(&self, template: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "select count(*) from workdo.workflows where template = $1 and status = 'completed'",
        )
        .bind(template)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Seconds from the start of `template`'s one completed workflow to its completion, as the
    /// database recorded them (no polling in the figure).
    pub async fn bench_workflow_seconds(&self, template: &str) -> Result<Option<f64>> {
        Ok(sqlx::query_scalar(
            "select extract(epoch from completed_at - created_at)::float8 from workdo.workflows
              where template = $1 and status = 'completed' order by id desc limit 1",
        )
        .bind(template)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Whether `object`'s workflow is completed (the object has one workflow).
    pub async fn bench_object_completed(&self, object: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "select status = 'completed' from workdo.workflows where object_id = $1",
        )
        .bind(object)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Wake latencies of `template`'s two-step chains, ms: from step `a`'s completion (its
    /// transaction's time) to step `b`'s claim.
    pub async fn bench_chain_wake_ms(&self, template: &str) -> Result<Vec<f64>> {
        Ok(sqlx::query_scalar(
            "select extract(epoch from b.started_at - a.finished_at)::float8 * 1000
               from workdo.steps a join workdo.steps b on b.workflow_id = a.workflow_id
              where a.template = $1 and a.name = 'a' and b.name = 'b'",
        )
        .bind(template)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The scale figure's queue: `waiting + ready` one-step workflows of `template` (its step
    /// `work`), spread evenly, `ready` of them ready. The rows are written directly, as a
    /// million starts through [`Store::workflow_start`] would take minutes: the waiting steps'
    /// `pending = 1` stands for a prerequisite the fixture does not create, so they never run.
    /// Only the bench's own database gets these rows. A million rows take tens of seconds by
    /// design: on a connection of its own that does not warn about slow statements.
    pub async fn bench_fill_waiting(&self, template: &str, waiting: i64, ready: i64) -> Result<()> {
        let tid: i64 =
            sqlx::query_scalar("select id from workdo.templates where name = $1 and is_current")
                .bind(template)
                .fetch_one(&self.pool)
                .await?;
        let mut setup = self.bench_setup_connection().await?;
        sqlx::query(
            "with o as (insert into workdo.objects (id) select 'scale:' || g from generate_series(1, $1 + $2) g returning id),
                  w as (insert into workdo.workflows (object_id, template, template_id, version, unfinished)
                        select id, $4, $3, 1, 1 from o returning id, object_id)
             insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts, pending, run_at)
             select w.id, w.object_id, $4, 1, 'default', 'work',
                    case when w.id % (($1 + $2) / $2) = 0 then 'ready' else 'waiting' end, 3,
                    case when w.id % (($1 + $2) / $2) = 0 then 0 else 1 end, now()
               from w",
        )
        .bind(waiting)
        .bind(ready)
        .bind(tid)
        .bind(template)
        .execute(&mut setup)
        .await?;
        setup.close().await?;
        // Written without counting them: their counts are made afresh now, not while measuring.
        self.step_counts_rollup().await?;
        Ok(())
    }

    /// `workflows` finished workflows of `template` (two completed steps and four events each),
    /// finished two days ago: history for the archive scenario, written directly (`workdo
    /// start` and completing them would take minutes at a million). Returns the events made.
    pub async fn bench_fill_finished(&self, template: &str, workflows: i64) -> Result<i64> {
        let tid: i64 =
            sqlx::query_scalar("select id from workdo.templates where name = $1 and is_current")
                .bind(template)
                .fetch_one(&self.pool)
                .await?;
        let mut setup = self.bench_setup_connection().await?;
        sqlx::query(
            "with o as (insert into workdo.objects (id) select 'hist:' || g from generate_series(1, $1) g returning id),
                  w as (insert into workdo.workflows (object_id, template, template_id, version, status, unfinished, completed_at, created_at)
                        select id, $3, $2, 1, 'completed', 0, now() - interval '2 days', now() - interval '2 days' from o
                        returning id, object_id),
                  s as (insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts, pending, run_at, attempts, finished_at)
                        select w.id, w.object_id, $3, 1, 'default', n, 'completed', 3, 0, now(), 1, now() - interval '2 days'
                          from w, unnest(array['a', 'b']) n returning 1)
             insert into workdo.events (object_id, workflow_id, template, version, step, kind, status, actor)
             select w.object_id, w.id, $3, 1, k.step, k.kind, k.status, 'bench'
               from w, (values ('a', 'started', 'started'), ('a', 'completed', 'completed'),
                               ('b', 'started', 'started'), ('b', 'completed', 'completed')) k(step, kind, status)",
        )
        .bind(workflows)
        .bind(tid)
        .bind(template)
        .execute(&mut setup)
        .await?;
        let events: i64 =
            sqlx::query_scalar("select count(*) from workdo.events where object_id like 'hist:%'")
                .fetch_one(&mut setup)
                .await?;
        sqlx::query("analyze workdo.workflows")
            .execute(&mut setup)
            .await?;
        sqlx::query("analyze workdo.events")
            .execute(&mut setup)
            .await?;
        setup.close().await?;
        self.step_counts_rollup().await?;
        Ok(events)
    }

    /// Empty the archive and remove the archive scenario's objects, for its next run.
    pub async fn bench_archive_clear(&self) -> Result<()> {
        sqlx::query("truncate workdo.archive")
            .execute(&self.pool)
            .await?;
        sqlx::query("delete from workdo.objects where id like 'hist:%'")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A connection of its own for filling fixtures, its statements not logged (they are slow
    /// by design).
    async fn bench_setup_connection(&self) -> Result<sqlx::PgConnection> {
        Ok(self
            .pool
            .connect_options()
            .as_ref()
            .clone()
            .disable_statement_logging()
            .connect()
            .await?)
    }
}
