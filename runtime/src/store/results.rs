//! What workers need around a claim: the inputs of claimed steps, and committing their results
//! with every side effect in one transaction.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::{Result, Store};
use crate::model::template::Template;
use crate::store::dispatch::compose::{self, Generator};
use crate::store::dispatch::{
    Bricklets, Dispatch, Observation, lock_generators_dependants, lock_held, record_observed,
};
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};
use crate::store::requests::StartRequest;
use crate::store::steps::{Applied, Change, Claimed};

/// What a function gets to see of a claimed step.
#[derive(Debug, Clone, Default)]
pub struct StepInputs {
    pub properties: Map<String, Value>,
    pub context: Map<String, Value>,
    pub documents: BTreeMap<String, String>,
    pub trace_context: Option<String>,
    /// A generated step's matched fragment (its `generated.fragment`).
    pub fragment: Option<String>,
}

/// A worker's result for one step it holds: the status change (carrying the lease) and, for a
/// completed step, its side effects.
#[derive(Debug, Clone)]
pub struct StepResult {
    pub change: Change,
    pub object_id: String,
    pub workflow_id: i64,
    pub effects: Effects,
}

/// What a completed step changes besides itself, applied in the transaction that records it
/// and only while the step still holds its lease.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effects {
    /// Merged into the object's properties; a `null` value removes the key.
    pub properties: Map<String, Value>,
    /// Named documents of the object, replaced.
    pub documents: BTreeMap<String, String>,
    /// Merged into the workflow's context.
    pub context: Map<String, Value>,
    /// Workflows to start on the same object.
    pub start: Vec<WorkflowToStart>,
    /// An observer's matches to record, or a generator's subnet to compose.
    pub dispatch: Option<Dispatch>,
    /// A machine's function action finished (completed or in error): the signal, with its
    /// data, that goes back to its job.
    pub signal: Option<(String, Value)>,
}

/// A workflow a result starts on its object; priority and lane default to its workflow's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowToStart {
    pub template: String,
    pub context: Map<String, Value>,
    pub priority: Option<i32>,
    pub lane: Option<String>,
    /// Future-dates the new workflow.
    pub start_at: Option<DateTime<Utc>>,
}

impl Effects {
    /// Whether committing it changes anything.
    pub fn is_empty(&self) -> bool {
        self.properties.is_empty()
            && self.documents.is_empty()
            && self.context.is_empty()
            && self.start.is_empty()
            && self.dispatch.is_none()
            && self.signal.is_none()
    }
}

impl StepResult {
    /// Whether committing it changes more than its step.
    fn has_side_effects(&self) -> bool {
        !self.effects.is_empty()
    }
}

/// A dispatching workflow's template version and the bricklets it composes from.
type Dispatching = std::sync::Arc<(std::sync::Arc<Template>, Bricklets)>;

impl Store {
    /// What the functions of claimed steps get: properties, context and trace came with the
    /// claim and are moved out of `claimed` (which keeps what a release needs); the requested
    /// documents are read here (one query, only when some are requested).
    pub async fn step_inputs(
        &self,
        claimed: &mut [Claimed],
        documents: &[String],
    ) -> Result<HashMap<i64, StepInputs>> {
        let mut docs: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        if !documents.is_empty() && !claimed.is_empty() {
            let objects: Vec<&str> = claimed.iter().map(|c| c.object_id.as_str()).collect();
            let found: Vec<(String, String, String)> = sqlx::query_as(
                "select object_id, name, content from workdo.documents
                  where object_id = any($1) and name = any($2)",
            )
            .bind(&objects)
            .bind(documents)
            .fetch_all(&self.pool)
            .await?;
            for (object, name, content) in found {
                docs.entry(object).or_default().insert(name, content);
            }
        }
        // Generated steps (named GENERATOR/BRICKLET#N/STEP) carry the node they were made for.
        let mut fragments: HashMap<i64, String> = HashMap::new();
        let generated: Vec<i64> = claimed
            .iter()
            .filter(|c| c.name.contains('#'))
            .map(|c| c.id)
            .collect();
        if !generated.is_empty() {
            let found: Vec<(i64, String)> = sqlx::query_as(
                "select id, generated ->> 'fragment' from workdo.steps
                  where id = any($1) and generated ? 'fragment'",
            )
            .bind(&generated)
            .fetch_all(&self.pool)
            .await?;
            fragments.extend(found);
        }
        let as_map = |v: &mut Value| match v.take() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Ok(claimed
            .iter_mut()
            .map(|c| {
                (
                    c.id,
                    StepInputs {
                        properties: as_map(&mut c.properties),
                        context: as_map(&mut c.context),
                        documents: docs.get(&c.object_id).cloned().unwrap_or_default(),
                        trace_context: c.trace_context.clone(),
                        fragment: fragments.remove(&c.id),
                    },
                )
            })
            .collect())
    }

    /// Commit workers' results in one transaction (group commit): status changes guarded by
    /// their leases, then — only for results that still held their lease — object updates,
    /// context updates and the workflows they start. A result whose lease was lost changes
    /// nothing and is reported in [`Applied::lost`].
    pub async fn results_commit(&self, results: &[StepResult], actor: &str) -> Result<Applied> {
        crate::store::steps::require_leases(results.iter().map(|r| &r.change))?;
        if !results.iter().any(StepResult::has_side_effects) {
            // Status changes only (most batches): `workdo.apply` is one statement, atomic on its
            // own, so no transaction around it — BEGIN and COMMIT were two more round trips.
            let mut conn = self.pool.acquire().await?;
            return Self::steps_apply(&mut conn, results.iter().map(|r| &r.change), actor).await;
        }
        // Templates (and their bricklets) of observers and generators, looked up before too:
        // one query for the workflows' template versions, then each version once.
        let mut dispatching: HashMap<i64, Dispatching> = HashMap::new();
        let ids: Vec<i64> = results
            .iter()
            .filter(|r| r.effects.dispatch.is_some())
            .map(|r| r.workflow_id)
            .collect();
        if !ids.is_empty() {
            let versions: Vec<(i64, i64, String)> = sqlx::query_as(
                "select w.id, w.template_id, t.sha256
                   from workdo.workflows w join workdo.templates t on t.id = w.template_id
                  where w.id = any($1)",
            )
            .bind(&ids)
            .fetch_all(&self.pool)
            .await?;
            let mut by_version: HashMap<i64, Dispatching> = HashMap::new();
            for (workflow, version, sha256) in versions {
                if let std::collections::hash_map::Entry::Vacant(slot) = by_version.entry(version) {
                    let spec = self.spec_by_id(&self.pool, version, &sha256).await?;
                    let bricklets = self.bricklets_of(&spec).await?;
                    slot.insert(std::sync::Arc::new((spec, bricklets)));
                }
                if let Some(found) = by_version.get(&version) {
                    dispatching.insert(workflow, std::sync::Arc::clone(found));
                }
            }
        }
        let mut tx = self.pool.begin().await?;
        let mut events = EventBuf::default();
        let mut ready = ReadyKeys::default();
        // Generators' subnets go in before their completions are applied, so that the counters
        // their completions move (their dependants', their workflows') already count the subnets.
        let generators: Vec<Generator<'_>> = results
            .iter()
            .filter_map(
                |r| match (&r.effects.dispatch, dispatching.get(&r.workflow_id)) {
                    (Some(Dispatch::Compose { generator }), Some(found)) => Some(Generator {
                        step_id: r.change.id,
                        lease: r.change.lease,
                        name: generator,
                        spec: &found.0,
                        bricklets: &found.1,
                    }),
                    _ => None,
                },
            )
            .collect();
        let observations: Vec<Observation<'_>> = results
            .iter()
            .filter_map(
                |r| match (&r.effects.dispatch, dispatching.get(&r.workflow_id)) {
                    (Some(Dispatch::Observed { observer, matches }), Some(found)) => {
                        Some(Observation {
                            step_id: r.change.id,
                            lease: r.change.lease,
                            workflow_id: r.workflow_id,
                            observer,
                            matches,
                            spec: &found.0,
                            bricklets: &found.1,
                        })
                    }
                    _ => None,
                },
            )
            .collect();
        let held = lock_recomposable(&mut tx, &observations).await?;
        let stale = stale_observations(&mut tx, &observations).await?;
        compose::compose(&mut tx, (&mut events, &mut ready), &generators, actor).await?;
        // Observations (and the recompositions they cause) go in before the observers'
        // completions, as subnets before their generators': an observer that was its
        // workflow's last unfinished step would otherwise complete the workflow for an instant
        // (and tell a parent its child was done) before the instances it adds reopened it.
        let recorded: Vec<Observation<'_>> = observations
            .iter()
            .filter(|o| held.contains_key(&o.step_id) && !stale.contains_key(&o.step_id))
            .copied()
            .collect();
        record_observed(&mut tx, (&mut events, &mut ready), &recorded, actor).await?;
        let changes = results
            .iter()
            .map(|r| stale.get(&r.change.id).unwrap_or(&r.change));
        let applied = Self::steps_apply(&mut tx, changes, actor).await?;
        clear_stale_marks(&mut tx, &observations, &stale).await?;
        let lost: HashSet<i64> = applied.lost.iter().copied().collect();
        for r in results.iter().filter(|r| !lost.contains(&r.change.id)) {
            let fx = &r.effects;
            if !fx.properties.is_empty() || !fx.documents.is_empty() {
                let props = Value::Object(fx.properties.clone());
                sqlx::query(
                    "update workdo.objects
                        set properties = (properties || $2)
                                         - array(select key from jsonb_each($2) where value = 'null'::jsonb),
                            updated_at = now()
                      where id = $1",
                )
                .bind(&r.object_id)
                .bind(&props)
                .execute(&mut *tx)
                .await?;
                let changed =
                    crate::store::objects::documents_put(&mut tx, &r.object_id, &fx.documents)
                        .await?;
                if !changed.is_empty() {
                    let replaced = [(r.object_id.clone(), changed)];
                    self.observers_watch(&mut tx, &replaced, Some(r.change.id), actor)
                        .await?;
                }
            }
            if let Some((signal, data)) = &fx.signal {
                super::machine::signal_in(
                    &mut tx,
                    r.workflow_id,
                    signal,
                    data,
                    &format!("call:{}", r.change.id),
                )
                .await?;
            }
            if !fx.context.is_empty() {
                // A string context (the workflow service's clients may set one) is replaced by
                // the function's object: `||` would make an array of the two.
                sqlx::query(
                    "update workdo.workflows
                        set context = case when jsonb_typeof(context) = 'object'
                                           then context || $2 else $2 end
                      where id = $1",
                )
                .bind(r.workflow_id)
                .bind(Value::Object(fx.context.clone()))
                .execute(&mut *tx)
                .await?;
            }
            if !fx.start.is_empty() {
                let (priority, lane, own): (i32, String, String) = sqlx::query_as(
                    "select priority, lane, template from workdo.workflows where id = $1",
                )
                .bind(r.workflow_id)
                .fetch_one(&mut *tx)
                .await?;
                for s in &fx.start {
                    // What cannot be started is recorded on the object, and the step's own
                    // result still commits.
                    let failed = |reason: String| {
                        NewEvent::new(&r.object_id, "start_failed", actor)
                            .workflow(r.workflow_id)
                            .detail(serde_json::json!({"template": s.template, "reason": reason}))
                    };
                    if s.template == own {
                        events.push(failed(
                            "a workflow cannot start its own template on its own object (it would replace itself)".into(),
                        ));
                        continue;
                    }
                    let req = StartRequest {
                        template: s.template.clone(),
                        objects: vec![r.object_id.clone()],
                        version: None,
                        priority: s.priority.unwrap_or(priority),
                        lane: s.lane.clone().unwrap_or_else(|| lane.clone()),
                        start_at: s.start_at,
                        context: Value::Object(s.context.clone()),
                        actor: actor.to_string(),
                        parent: None,
                    };
                    // The one start path (CLI, APIs, forks and schedules take it too), in a
                    // savepoint so that a start refused by the database leaves the rest intact.
                    let mut sp = sqlx::Acquire::begin(&mut *tx).await?;
                    match self.workflow_start_in(&mut sp, &req).await {
                        Ok(_) => sp.commit().await?,
                        Err(e) => {
                            sp.rollback().await?;
                            events.push(failed(e.to_string()));
                        }
                    }
                }
            }
        }
        events.flush(&mut tx).await?;
        ready.notify(&mut tx).await?;
        tx.commit().await?;
        Ok(applied)
    }
}

/// What a recomposition may change, and the observers' own steps, locked first, before anything
/// locks a workflow: the observing workflows' generated steps, then the observers under their
/// leases, then the generators' dependants, each group in id order. Every commit locks steps
/// before workflows; a finishing step before its dependants (as a completion does: a generated
/// step, then the template step after its generator); and an observer's step before the
/// workflow whose record marks it (as a replaced document's watch does,
/// `objects::observers_watch`), so that the mark read after this is the last one. Returns the
/// observers still under their leases (held, a lease cannot be lost now): only those are
/// recorded.
async fn lock_recomposable(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    observations: &[Observation<'_>],
) -> Result<HashMap<i64, i64>> {
    if observations.is_empty() {
        return Ok(HashMap::new());
    }
    let workflows: Vec<i64> = observations.iter().map(|o| o.workflow_id).collect();
    sqlx::query(
        "select id from workdo.steps
          where workflow_id = any($1) and generated is not null
          order by id for update",
    )
    .bind(&workflows)
    .execute(&mut **tx)
    .await?;
    let ids: Vec<i64> = observations.iter().map(|o| o.step_id).collect();
    let leases: Vec<Option<uuid::Uuid>> = observations.iter().map(|o| o.lease).collect();
    let held = lock_held(tx, &ids, &leases).await?;
    let generators: Vec<_> = observations
        .iter()
        .flat_map(|o| {
            o.spec
                .steps
                .iter()
                .filter(|s| s.generate.is_some())
                .map(move |g| (o.workflow_id, o.spec, g.name.as_str()))
        })
        .collect();
    lock_generators_dependants(tx, &generators).await?;
    Ok(held)
}

/// Observers whose workflow marks them (`observe_again`: their document was replaced while
/// they ran, `objects::observers_watch`), with the change that puts each back in its queue
/// instead of completing it: what it read may be the old document, so it is neither recorded
/// nor composed from, and its workflow, which it may have been the last step of, never passes
/// through 'completed' (which would tell a parent its child was done). Read after
/// [`lock_recomposable`] holds the observers' steps, which a watch locks before marking.
async fn stale_observations(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    observations: &[Observation<'_>],
) -> Result<HashMap<i64, Change>> {
    if observations.is_empty() {
        return Ok(HashMap::new());
    }
    let (workflows, names): (Vec<i64>, Vec<&str>) = observations
        .iter()
        .map(|o| (o.workflow_id, o.observer))
        .unzip();
    let marked: HashSet<(i64, String)> = sqlx::query_as(
        "select w.id, t.name from workdo.workflows w
           join unnest($1::bigint[], $2::text[]) as t(id, name) on w.id = t.id
          where w.dispatch -> 'observe_again' ? t.name",
    )
    .bind(&workflows)
    .bind(&names)
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .collect();
    Ok(observations
        .iter()
        .filter(|o| marked.contains(&(o.workflow_id, o.observer.to_string())))
        .map(|o| {
            let mut c = crate::store::steps::bulk::retried(o.step_id);
            c.lease = o.lease;
            c.note =
                Some("its document was replaced while it was observed: it observes again".into());
            (o.step_id, c)
        })
        .collect())
}

/// The marks of the observers put back by [`stale_observations`], removed.
async fn clear_stale_marks(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    observations: &[Observation<'_>],
    stale: &HashMap<i64, Change>,
) -> Result<()> {
    let (workflows, names): (Vec<i64>, Vec<&str>) = observations
        .iter()
        .filter(|o| stale.contains_key(&o.step_id))
        .map(|o| (o.workflow_id, o.observer))
        .unzip();
    crate::store::objects::set_observe_again(tx, &workflows, &names, false).await
}
