//! A start's step rows: the template's steps as they start, inserted for every workflow of the
//! start in one statement, and counted (`migrations/engine/70_counts.sql`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Postgres, Transaction};

use crate::model::status::Status;
use crate::model::template::Template;
use crate::store::Result;
use crate::store::counts::{count_inserted, count_started, steps_counted};

/// A template's steps as they start, as arrays for `unnest`. Static: derived from the template
/// and whether the start lies in the future.
pub(crate) struct InitialSteps {
    names: Vec<String>,
    statuses: Vec<String>,
    /// Arrays of arrays must be rectangular in Postgres: prerequisites travel as JSON.
    prereqs: Vec<Value>,
    pendings: Vec<i32>,
    attempts: Vec<i32>,
    limits: Vec<i32>,
    lifecycles: Vec<Option<String>>,
    pub(crate) ready: Vec<String>,
    pub(crate) unfinished: i32,
}

pub(crate) fn initial_steps(spec: &Template, future: bool) -> InitialSteps {
    let finished: std::collections::HashSet<&str> = spec
        .steps
        .iter()
        .filter(|s| s.initial_status.as_ref().is_some_and(Status::is_finished))
        .map(|s| s.name.as_str())
        .collect();
    let mut out = InitialSteps {
        names: Vec::new(),
        statuses: Vec::new(),
        prereqs: Vec::new(),
        pendings: Vec::new(),
        attempts: Vec::new(),
        limits: Vec::new(),
        lifecycles: Vec::new(),
        ready: Vec::new(),
        // A machine job is one unit of unfinished work until it reaches a final state.
        unfinished: if spec.machine.is_some() {
            1
        } else {
            spec.steps.len() as i32 - finished.len() as i32
        },
    };
    for s in &spec.steps {
        let pending = s
            .prereqs
            .iter()
            .filter(|p| !finished.contains(p.as_str()))
            .count() as i32;
        let status = match &s.initial_status {
            Some(st) => st.clone(),
            None if pending > 0 => Status::Waiting,
            None if future => Status::Scheduled,
            None => Status::Ready,
        };
        if status == Status::Ready {
            out.ready.push(s.name.clone());
        }
        out.names.push(s.name.clone());
        out.attempts.push(i32::from(status == Status::Completed));
        out.statuses.push(status.as_str().to_string());
        out.prereqs
            .push(serde_json::to_value(&s.prereqs).unwrap_or(Value::Null));
        out.pendings.push(pending);
        out.limits.push(s.error_limit.min(i32::MAX as u32) as i32);
        out.lifecycles.push(s.lifecycle.clone());
    }
    out
}

/// Most workflows of one start whose steps the insert counts itself, by reading its rows back
/// (RETURNING). A larger start counts the first workflow's rows times the workflows in one more
/// statement: a round trip more, which a start of one workflow felt (-4.5% starts one by one),
/// where reading 18,000 rows back cost a bulk start 5-10 ms more (BENCHMARKS.md, stop 35).
const COUNTED_IN_THE_INSERT: usize = 16;

/// The template's steps, decoded once, and the flag that says this transaction counts them.
macro_rules! template_steps {
    () => {
        concat!(
            "with ",
            steps_counted!(),
            ", t as materialized (
                select n, name, status, array(select jsonb_array_elements_text(prereqs)) as prereqs,
                       pending, attempts, max_attempts, lifecycle
                  from unnest($8::text[], $9::text[], $10::jsonb[], $11::int[], $12::int[], $13::int[], $14::text[])
                       with ordinality as t(name, status, prereqs, pending, attempts, max_attempts, lifecycle, n)
             )"
        )
    };
}

/// Every workflow's steps in (workflow, step) order, so that the (workflow_id, name) index
/// grows at its right edge.
macro_rules! insert_steps {
    () => {
        "insert into workdo.steps
            (workflow_id, object_id, template, version, lane, name, status, prereqs, pending,
             priority, run_at, attempts, max_attempts, lifecycle, finished_at)
         select w.id, w.object_id, $4, w.version, $5, t.name, t.status, t.prereqs, t.pending,
                $6, $7, t.attempts, t.max_attempts, t.lifecycle,
                case when t.status in ('completed', 'skipped') then now() end
           from unnest($1::bigint[], $2::text[], $3::int[]) with ordinality as w(id, object_id, version, n)
          cross join t cross join counted
          order by w.n, t.n"
    };
}

const INSERT_COUNTED: &str = concat!(
    template_steps!(),
    ", ins as (",
    insert_steps!(),
    " returning template, name, status, id, active)",
    count_inserted!()
);
const INSERT: &str = concat!(template_steps!(), " ", insert_steps!());

/// Insert the steps of workflows `ids` (of `objects`, at `versions`) of one start, and count
/// them. `given`: the start's template, lane, priority and start time.
pub(crate) async fn insert_steps(
    tx: &mut Transaction<'_, Postgres>,
    init: &InitialSteps,
    given: (&String, &String, i32, DateTime<Utc>),
    (ids, objects, versions): (&[i64], &[String], &[i32]),
) -> Result<()> {
    // A template without steps (a machine's) inserts none: a statement of no rows would still
    // fire the insert trigger, which cannot tell, and mark the counts for a recount.
    if init.names.is_empty() {
        return Ok(());
    }
    let (template, lane, priority, start_at) = given;
    let counted_here = ids.len() <= COUNTED_IN_THE_INSERT;
    sqlx::query(if counted_here { INSERT_COUNTED } else { INSERT })
        .bind(ids)
        .bind(objects)
        .bind(versions)
        .bind(template)
        .bind(lane)
        .bind(priority)
        .bind(start_at)
        .bind(&init.names)
        .bind(&init.statuses)
        .bind(&init.prereqs)
        .bind(&init.pendings)
        .bind(&init.attempts)
        .bind(&init.limits)
        .bind(&init.lifecycles)
        .execute(&mut **tx)
        .await?;
    match ids.first() {
        Some(&first) if !counted_here => count_started(tx, first, ids.len()).await,
        _ => Ok(()),
    }
}
