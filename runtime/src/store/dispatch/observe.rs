//! Observers' matches recorded in the commit that records the observers' own results, and the
//! activation sets of generators not yet composed recomputed; a generator that composed has its
//! subnet follow the document (`recompose.rs`).

use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};

use super::sets::{Bricklets, activation, lock_workflows, write_workflows};
use crate::model::dispatch::RuleMatch;
use crate::model::template::Template;
use crate::store::Result;
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};

/// An observer's result in this commit: its step under its lease, what its rules matched, and
/// the template version (with its bricklets) of its workflow.
#[derive(Clone, Copy)]
pub(crate) struct Observation<'a> {
    pub step_id: i64,
    pub lease: Option<uuid::Uuid>,
    pub workflow_id: i64,
    pub observer: &'a str,
    pub matches: &'a [RuleMatch],
    pub spec: &'a Template,
    pub bricklets: &'a Bricklets,
}

/// Record observers' matches on their workflows, in the order given, and recompute the
/// activation sets of the generators that have not composed yet (one that composed has its
/// subnet follow the document: [`super::recompose`]). The workflows are read and written by one
/// statement each, however many observers the commit holds.
pub(crate) async fn record_observed(
    tx: &mut Transaction<'_, Postgres>,
    (events, ready): (&mut EventBuf, &mut ReadyKeys),
    observations: &[Observation<'_>],
    actor: &str,
) -> Result<()> {
    if observations.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = observations.iter().map(|o| o.workflow_id).collect();
    let mut workflows = lock_workflows(tx, &ids).await?;
    for o in observations {
        let Some(w) = workflows.get_mut(&o.workflow_id) else {
            continue;
        };
        let (spec, bricklets) = (o.spec, o.bricklets);
        // An undo rule counts what went away since the last observation (seed 001).
        let previous: Vec<RuleMatch> =
            serde_json::from_value(w.record["observed"][o.observer].clone()).unwrap_or_default();
        let matches = crate::model::dispatch::undo_removals(&previous, o.matches);
        w.record["observed"][o.observer] = json!(matches);
        // Copies: a recomposition below changes the record while these are read.
        let observed = w.record["observed"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let composed = w.record["composed"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut changed = serde_json::Map::new();
        for g in spec.steps.iter().filter(|s| s.generate.is_some()) {
            let set = activation(spec, &observed, &g.name, bricklets);
            if composed.contains_key(&g.name) {
                // Composed already: the subnet follows the document (seed 001's run-time
                // adaption).
                crate::store::dispatch::recompose::recompose(
                    tx,
                    (&mut *events, &mut *ready),
                    (o.workflow_id, &mut *w),
                    &g.name,
                    set,
                    (spec, bricklets),
                    actor,
                )
                .await?;
                continue;
            }
            w.record["actsets"][&g.name] = json!(set);
            changed.insert(g.name.clone(), json!(set));
        }
        let matched: Vec<Value> = matches
            .iter()
            .filter(|m| m.fragments > 0)
            .map(|m| {
                json!({"rule": m.rule + 1, "op": m.op.as_str(), "generator": m.generator,
                            "bricklets": m.bricklets, "fragments": m.fragments})
            })
            .collect();
        events.push(
            NewEvent::new(&w.object, "observed", actor)
                .workflow(o.workflow_id)
                .template(&w.template)
                .version(w.version)
                .step(o.observer)
                .detail(json!({"matched": matched, "rules": matches.len(), "actsets": changed})),
        );
    }
    write_workflows(tx, workflows).await
}
