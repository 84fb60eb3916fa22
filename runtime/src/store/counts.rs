//! Counts: steps per template, step and status, and completions and failures per minute,
//! kept from what each statement changes (migrations/0014_step_counts.sql) rather than
//! counted by scanning `steps`.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Facet, Result, Store};

/// A CTE for the FROM of a statement that inserts steps: it sets `workdo.steps_counted` for the
/// rest of the transaction before the statement ends, where the insert trigger looks, so that
/// the steps are counted by the statement's own deltas ([`count_inserted`], [`count_started`])
/// and not marked for a recount (`migrations/engine/70_counts.sql`).
macro_rules! steps_counted {
    () => {
        "counted as materialized (select set_config('workdo.steps_counted', 'on', true) as flag)"
    };
}
pub(super) use steps_counted;

/// The deltas of the steps a CTE `ins` inserted (returning template, name, status, id, active).
macro_rules! count_inserted {
    () => {
        " insert into workdo.step_count_deltas (template, name, status, n, first_id)
          select template, workdo.facet_name(name), status, count(*), min(id)
            from ins where active group by 1, 2, 3"
    };
}
pub(super) use count_inserted;

/// Count the steps of one start: every workflow it made has the same steps in the same
/// statuses, so the first one's rows times the workflows, without reading the others back.
pub(super) async fn count_started(
    conn: &mut sqlx::PgConnection,
    first_workflow: i64,
    workflows: usize,
) -> Result<()> {
    sqlx::query(
        "insert into workdo.step_count_deltas (template, name, status, n, first_id)
         select template, workdo.facet_name(name), status, count(*) * $2, min(id)
           from workdo.steps where workflow_id = $1 and active group by 1, 2, 3",
    )
    .bind(first_workflow)
    .bind(workflows as i64)
    .execute(conn)
    .await?;
    Ok(())
}

/// Completed steps and failed attempts of one template in one minute.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Throughput {
    pub minute: DateTime<Utc>,
    pub template: String,
    pub completed: i64,
    pub failed: i64,
}

/// Completions and failed attempts of one step in one minute.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct StepThroughput {
    pub minute: DateTime<Utc>,
    pub template: String,
    pub step: String,
    pub completed: i64,
    pub failed: i64,
}

/// What the overview narrows to: a template, a lane, objects that reached a milestone,
/// objects whose property `.0` reads `.1` (as text, so `barcode=3610…` matches the string).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FacetFilter {
    pub template: Option<String>,
    pub lane: Option<String>,
    pub milestone: Option<String>,
    pub property: Option<(String, String)>,
}

impl FacetFilter {
    /// Whether anything but the template narrows it (then the counts cannot answer).
    pub fn narrows(&self) -> bool {
        self.lane.is_some() || self.milestone.is_some() || self.property.is_some()
    }

    pub(super) fn property_parts(&self) -> (Option<&str>, Option<&str>) {
        match &self.property {
            Some((k, v)) => (Some(k.as_str()), Some(v.as_str())),
            None => (None, None),
        }
    }
}

/// The most count deltas a reader folds before it reads ([`Store::facets`]).
const READER_FOLDS_AT_MOST: i64 = 10_000;

impl Store {
    /// Facets within `filter`: from the counts when only a template narrows them, else by
    /// counting the steps that match (a lane, a milestone or a property narrows the scan).
    pub async fn facets_where(&self, filter: &FacetFilter) -> Result<Vec<Facet>> {
        if !filter.narrows() {
            return self.facets(filter.template.as_deref()).await;
        }
        let (key, value) = filter.property_parts();
        let rows = sqlx::query_as(
            "select template, workdo.facet_name(name) as step, status, count(*) as count
               from workdo.steps s
              where active and ($1::text is null or template = $1)
                and ($2::text is null or lane = $2)
                and ($3::text is null or exists (select 1 from workdo.milestones m
                                                  where m.object_id = s.object_id and m.name = $3))
                and ($4::text is null or exists (select 1 from workdo.objects o
                                                  where o.id = s.object_id
                                                    and o.properties ->> $4 = $5))
              group by 1, 2, 3
              order by template, min(min(id)) over (partition by template, workdo.facet_name(name)), status",
        )
        .bind(filter.template.as_deref())
        .bind(filter.lane.as_deref())
        .bind(filter.milestone.as_deref())
        .bind(key)
        .bind(value)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Template × step × status counts over active steps, from the counts the triggers keep
    /// (migrations/0014_step_counts.sql): folded counts plus the deltas not folded yet, exact
    /// at this statement's snapshot; no scan of `steps` — unless an insert that did not count
    /// itself left a `recount` mark not yet folded (`migrations/engine/70_counts.sql`), when
    /// the steps are counted by a scan, in the same statement, so that the answer is still exact.
    pub async fn facets(&self, template: Option<&str>) -> Result<Vec<Facet>> {
        self.fold_for_a_reader().await?;
        let rows = sqlx::query_as(
            "with marked as (select exists (select 1 from workdo.step_count_deltas
                                             where template = '' and status = 'recount') as m)
             select template, name as step, status, sum(n)::bigint as count
               from (select template, name, status, n, first_id from workdo.step_counts
                      where not (select m from marked)
                     union all
                     select template, name, status, n, first_id from workdo.step_count_deltas
                      where not (select m from marked)
                     union all
                     select * from workdo.step_counts_scan() where (select m from marked)) c
              where ($1::text is null or template = $1)
              group by template, name, status
             having sum(n) <> 0
              order by template, min(min(first_id)) over (partition by template, name), status",
        )
        .bind(template)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    /// Fold what is cheap to fold before reading, so that the deltas a reader adds stay few
    /// when no runtime folds them: never a recount, which scans `steps` — that is the
    /// maintenance loop's ([`Store::step_counts_rollup`]), not a request's.
    ///
    /// Bounded: past [`READER_FOLDS_AT_MOST`] delta rows (a bulk change — a million workflows
    /// archived — with no runtime folding) the reader folds nothing and reads the deltas with
    /// the counts, as it always can; the first `workdo status` after such a change took 10 s
    /// folding them for everyone. The maintenance loop (or `serve`'s) folds them.
    async fn fold_for_a_reader(&self) -> Result<()> {
        let many: bool = sqlx::query_scalar(
            "select count(*) > $1 from (select 1 from workdo.step_count_deltas limit $1 + 1) d",
        )
        .bind(READER_FOLDS_AT_MOST)
        .fetch_one(&self.pool)
        .await?;
        if many {
            return Ok(());
        }
        sqlx::query("select workdo.step_counts_rollup(p_recount => false)")
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Fold the step-count deltas committed so far into the counts and the throughput table,
    /// counting the steps afresh if an insert left a mark; how many delta rows were folded, or
    /// `None` when another session was folding. Without a statement timeout: a recount scans
    /// `steps`, and under an operator's `statement_timeout` shorter than that scan the mark
    /// would never be folded.
    pub async fn step_counts_rollup(&self) -> Result<Option<i64>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("set local statement_timeout = 0")
            .execute(&mut *tx)
            .await?;
        let folded = sqlx::query_scalar("select workdo.step_counts_rollup()")
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(folded)
    }

    /// How long the head of each queue (the step a worker claims next: highest priority, then
    /// longest ready) has waited, in seconds, for the given (template, step) rows of the
    /// overview (a generated step's row is its bricklet step's queue), optionally in one lane.
    /// One index probe each, however many steps are ready.
    pub async fn queue_heads(
        &self,
        rows: &[(String, String)],
        lane: Option<&str>,
    ) -> Result<std::collections::HashMap<(String, String), f64>> {
        let mut out = std::collections::HashMap::new();
        for (template, step) in rows {
            // A generated step's instances are claimed by their queue (`steps_claim_queue`),
            // a template step's by its name (`steps_claim`): the same order either way.
            let (by, key) = if step.contains('/') {
                ("queue = $1 || ':' || $2", super::queue_key(step))
            } else {
                ("name = $2", step.clone())
            };
            let age: Option<f64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "select extract(epoch from now() - run_at)::float8 from workdo.steps
                  where template = $1 and {by} and status = 'ready' and active
                    and ($3::text is null or lane = $3)
                  order by priority desc, run_at, id limit 1"
            )))
            .bind(template)
            .bind(key)
            .bind(lane)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(age) = age {
                out.insert((template.clone(), step.clone()), age);
            }
        }
        Ok(out)
    }

    /// Per step and minute, the completions and failed attempts of the last `minutes`
    /// minutes (the overview's sparklines).
    pub async fn throughput_by_step(&self, minutes: i32) -> Result<Vec<StepThroughput>> {
        Ok(sqlx::query_as(
            "select minute, template, name as step, completed, failed
               from workdo.step_throughput
              where minute >= date_trunc('minute', now()) - make_interval(mins => $1)
              order by template, name, minute",
        )
        .bind(minutes)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Completed and failed attempts per minute and template over the last `minutes`
    /// minutes, oldest first (minutes with neither are absent).
    pub async fn throughput(&self, minutes: i32) -> Result<Vec<Throughput>> {
        self.fold_for_a_reader().await?;
        let rows = sqlx::query_as(
            "select minute, template, sum(completed)::bigint as completed,
                    sum(failed)::bigint as failed
               from workdo.step_throughput
              where minute >= date_trunc('minute', now()) - make_interval(mins => $1)
              group by minute, template
              order by minute, template",
        )
        .bind(minutes)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }
}
