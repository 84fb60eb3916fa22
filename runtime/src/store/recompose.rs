//! Recomposition (seed 001's run-time adaption): an observer that runs again after its generator
//! composed — the document changed — changes that generator's subnet by itself. The new
//! activation set is composed by the same Listing 1 into the same deterministic names
//! (`GENERATOR/BRICKLET#N/STEP`), and the difference is applied:
//!
//! - instances the new subnet has and the old did not are inserted, wired by the construction
//!   rules to the instances already there (a prerequisite already finished does not hold them);
//! - an existing step that has not started and gains a new prerequisite waits for it;
//! - instances the new subnet lacks are skipped when they have not started (through the one
//!   status path, with an event naming why); running and finished ones stay;
//! - the generator's dependants that have not started wait for the new last steps too.
//!
//! A `recomposed` event records what was added and skipped.

use std::collections::{HashMap, HashSet};

use serde_json::json;
use sqlx::{Postgres, Transaction};

use super::compose::{Edges, Subnets};
use super::dispatch::{Bricklets, WorkflowRecord, activation_fragments, composable};
use super::events::{EventBuf, NewEvent, ReadyKeys};
use super::{Change, Result, Store};
use crate::model::dispatch::{self, Actset};
use crate::model::status::Status;
use crate::model::template::Template;

/// Statuses of a step that has not started (and is not running).
const NOT_STARTED: [&str; 5] = ["waiting", "ready", "scheduled", "retrying", "error"];

/// Recompose `generator`'s subnet in workflow `workflow_id` to `new_set` (already composed
/// once: `w.record["composed"][generator]` holds the old set). Updates `w.record` in place;
/// the caller writes it. The workflow's unfinished count moves here, at once, so that skipping
/// the dropped instances never sees the workflow without the added ones.
pub(super) async fn recompose(
    tx: &mut Transaction<'_, Postgres>,
    (events, ready): (&mut EventBuf, &mut ReadyKeys),
    (workflow_id, w): (i64, &mut WorkflowRecord),
    generator: &str,
    new_set: Actset,
    (spec, bricklets): (&Template, &Bricklets),
    actor: &str,
) -> Result<()> {
    let record = &mut w.record;
    let Some(generate) = spec.step(generator).and_then(|s| s.generate.as_ref()) else {
        return Ok(());
    };
    let new_set = composable(generator, generate, bricklets, new_set)?;
    let old_set: Actset =
        serde_json::from_value(record["composed"][generator]["actset"].clone()).unwrap_or_default();
    if old_set == new_set {
        return Ok(());
    }
    let (object, template, version, lane, priority) =
        (&w.object, &w.template, w.version, &w.lane, w.priority);
    let graph = dispatch::compose(&new_set, &generate.rules);
    let steps = dispatch::expand(generator, &graph, &bricklets.by_name);
    let existing: Vec<(i64, String, String)> = sqlx::query_as(
        "select id, name, status from workdo.steps
          where workflow_id = $1 and generated ->> 'generator' = $2
          order by id for update",
    )
    .bind(workflow_id)
    .bind(generator)
    .fetch_all(&mut **tx)
    .await?;
    let status_of: HashMap<&str, &str> = existing
        .iter()
        .map(|(_, n, s)| (n.as_str(), s.as_str()))
        .collect();
    let wanted: HashSet<&str> = steps.iter().map(|s| s.name.as_str()).collect();

    // Instances no longer activated, not started: skipped, with why.
    let dropped: Vec<(i64, String)> = existing
        .iter()
        .filter(|(_, n, s)| !wanted.contains(n.as_str()) && NOT_STARTED.contains(&s.as_str()))
        .map(|(id, n, _)| (*id, n.clone()))
        .collect();
    let changes: Vec<Change> = dropped
        .iter()
        .map(|(id, name)| {
            let bricklet = name.split('/').nth(1).unwrap_or(name);
            let mut c = Change::new(*id, Status::Skipped, "skipped");
            c.note = Some(format!(
                "recomposed: {bricklet} is no longer activated by {generator}'s observers"
            ));
            c
        })
        .collect();
    Store::steps_apply(tx, &changes, actor).await?;

    // New instances, wired to those already there.
    let added: Vec<dispatch::GeneratedStep> = steps
        .iter()
        .filter(|s| !status_of.contains_key(s.name.as_str()))
        .cloned()
        .collect();
    let added_names: HashSet<&str> = added.iter().map(|s| s.name.as_str()).collect();
    let done: HashSet<String> = existing
        .iter()
        .filter(|(_, _, s)| s == "completed" || s == "skipped")
        .map(|(_, n, _)| n.clone())
        .chain(dropped.iter().map(|(_, n)| n.clone()))
        .collect();
    let observed = record["observed"].as_object().cloned().unwrap_or_default();
    let fragments = activation_fragments(spec, &observed, generator, bricklets);
    let mut subnet = Subnets::default();
    subnet.add(
        workflow_id,
        generator,
        (object, template, version, lane, priority),
        (&added, &fragments, &done),
    );
    subnet.insert(tx).await?;
    let mut edges = Edges::default();
    for s in &added {
        for p in &s.prereqs {
            edges.add(workflow_id, p, &s.name);
        }
    }

    // Existing steps that have not started wait for their new prerequisites.
    for s in steps.iter().filter(|s| {
        status_of
            .get(s.name.as_str())
            .is_some_and(|st| matches!(*st, "waiting" | "ready"))
    }) {
        let new_prereqs: Vec<String> = s
            .prereqs
            .iter()
            .filter(|p| added_names.contains(p.as_str()))
            .cloned()
            .collect();
        if new_prereqs.is_empty() {
            continue;
        }
        wait_for(tx, workflow_id, std::slice::from_ref(&s.name), &new_prereqs).await?;
        for p in &new_prereqs {
            edges.add(workflow_id, p, &s.name);
        }
    }
    // The generator's dependants that have not started wait for the new last steps.
    let new_sinks: Vec<String> = dispatch::sinks(&steps)
        .into_iter()
        .filter(|s| added_names.contains(s.as_str()))
        .collect();
    if !new_sinks.is_empty() {
        let dependants: Vec<String> = sqlx::query_scalar(
            "select name from workdo.steps
              where workflow_id = $1 and name = any($2) and status in ('waiting', 'ready')",
        )
        .bind(workflow_id)
        .bind(
            spec.dependants(generator)
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
        )
        .fetch_all(&mut **tx)
        .await?;
        if !dependants.is_empty() {
            wait_for(tx, workflow_id, &dependants, &new_sinks).await?;
            for d in &dependants {
                for s in &new_sinks {
                    edges.add(workflow_id, s, d);
                }
            }
        }
    }
    edges.insert(tx).await?;

    let times = record["composed"][generator]["recomposed"]
        .as_u64()
        .unwrap_or(0)
        + 1;
    record["composed"][generator]["actset"] = json!(new_set);
    record["composed"][generator]["steps"] = json!(steps.len());
    record["composed"][generator]["recomposed"] = json!(times);
    record["actsets"][generator] = json!(new_set);
    sqlx::query("update workdo.workflows set unfinished = unfinished + $2 where id = $1")
        .bind(workflow_id)
        .bind(i32::try_from(added.len()).unwrap_or(i32::MAX))
        .execute(&mut **tx)
        .await?;
    let added_list: Vec<&str> = added.iter().map(|s| s.name.as_str()).collect();
    let dropped_list: Vec<&str> = dropped.iter().map(|(_, n)| n.as_str()).collect();
    events.push(
        NewEvent::new(object, "recomposed", actor)
            .workflow(workflow_id)
            .template(template)
            .version(version)
            .step(generator)
            .detail(
                json!({"actset": new_set, "was": old_set, "added": added_list,
                           "skipped": dropped_list}),
            ),
    );
    let firsts: Vec<String> = added
        .iter()
        .filter(|s| s.prereqs.iter().all(|p| done.contains(p)) && s.spec.function.is_some())
        .map(|s| format!("{}/{}", s.bricklet, s.spec.name))
        .collect();
    ready.add(template, &firsts);
    Ok(())
}

/// Steps `names` (waiting or ready) wait for `prereqs` as well: their count of unfinished
/// prerequisites grows, a ready one waits again.
async fn wait_for(
    tx: &mut Transaction<'_, Postgres>,
    workflow_id: i64,
    names: &[String],
    prereqs: &[String],
) -> Result<()> {
    sqlx::query(
        "update workdo.steps
            set pending = pending + $3, prereqs = prereqs || $4,
                status = case when status = 'ready' then 'waiting' else status end,
                updated_at = now()
          where workflow_id = $1 and name = any($2) and status in ('waiting', 'ready')",
    )
    .bind(workflow_id)
    .bind(names)
    .bind(i32::try_from(prereqs.len()).unwrap_or(i32::MAX))
    .bind(prereqs)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
