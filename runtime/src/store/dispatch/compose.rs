//! Generators composing their subnets into step rows, set-based: every generator whose result
//! is in one group commit is composed by the same six statements, whatever their number (the
//! steps under their leases, their workflows, the subnets' rows, the dependants rewired, the
//! edges, the workflows' dispatch records and counters). One generator a time took six round
//! trips and six statement start-ups each, and the steps' insert paid its statement-level
//! step-count trigger once per generator (`pg_stat_statements` over `workdo bench --only
//! dispatch`: 204 µs per 10-row insert, 20 µs a row, against ~6 µs a row in a start's bulk
//! insert). [`crate::store::dispatch`] has the activation sets; the composition itself is
//! [`crate::model::dispatch`].

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::{Value, json};
use sqlx::{PgConnection, Postgres, Transaction};

use crate::model::dispatch::{self, Actset};
use crate::model::template::Template;
use crate::store::Result;
use crate::store::dispatch::sets::{
    Bricklets, activation_fragments, composable, lock_generators_dependants, lock_held,
    lock_workflows, write_workflows,
};
use crate::store::history::events::{EventBuf, NewEvent, ReadyKeys};

/// A generator's result in this commit: its step under the lease it holds, and the template
/// version (with its bricklets) of its workflow.
pub(crate) struct Generator<'a> {
    pub step_id: i64,
    pub lease: Option<uuid::Uuid>,
    pub name: &'a str,
    pub spec: &'a Template,
    pub bricklets: &'a Bricklets,
}

/// Compose each of `generators`' subnets into its workflow, before the generators' own
/// completions are applied in the same transaction (so the counters their completions move
/// already include the subnets): the steps with their prerequisites and per-workflow edges,
/// each generator's dependants made to wait for its subnet's last steps, the workflows'
/// unfinished counts, their dispatch records and an event each. A generator that no longer
/// holds its lease (its result is then refused as lost) or already composed composes nothing.
/// Past the subnet limit the whole call fails before anything is written (the completer then
/// commits the batch's results one by one, and the generator's is recorded in error).
pub(crate) async fn compose(
    tx: &mut Transaction<'_, Postgres>,
    (events, ready): (&mut EventBuf, &mut ReadyKeys),
    generators: &[Generator<'_>],
    actor: &str,
) -> Result<()> {
    if generators.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = generators.iter().map(|g| g.step_id).collect();
    let leases: Vec<Option<uuid::Uuid>> = generators.iter().map(|g| g.lease).collect();
    // Steps before workflows, each in id order: `workdo.apply` writes a batch's steps and their
    // dependants before its workflows' counters, so a composition that held a workflow while
    // waiting for a dependant another commit had readied could deadlock with it (the commit
    // would be retried, nothing lost, the work done twice).
    let held = lock_held(tx, &ids, &leases).await?;
    if held.is_empty() {
        return Ok(());
    }
    // The generators' dependants, which their subnets' last steps will hold back.
    let held_generators: Vec<_> = generators
        .iter()
        .filter_map(|g| held.get(&g.step_id).map(|&w| (w, g.spec, g.name)))
        .collect();
    lock_generators_dependants(tx, &held_generators).await?;
    let workflow_ids: Vec<i64> = held.values().copied().collect();
    let mut workflows = lock_workflows(tx, &workflow_ids).await?;
    // The workflows a generator composed into: only those are written back.
    let mut composed = BTreeSet::new();

    let mut subnets = Subnets::default();
    let mut edges = Edges::default();
    // (workflow, dependant) → the sinks it now waits for, in order.
    let mut waits: BTreeMap<(i64, String), Vec<String>> = BTreeMap::new();
    for g in generators {
        let Some(&workflow_id) = held.get(&g.step_id) else {
            continue;
        };
        let Some(w) = workflows.get_mut(&workflow_id) else {
            continue;
        };
        if w.record["composed"].get(g.name).is_some() {
            continue;
        }
        let Some(generate) = g.spec.step(g.name).and_then(|s| s.generate.as_ref()) else {
            continue;
        };
        let actset: Actset =
            serde_json::from_value(w.record["actsets"][g.name].clone()).unwrap_or_default();
        let actset = composable(g.name, generate, g.bricklets, actset)?;
        let graph = dispatch::compose(&actset, &generate.rules);
        let steps = dispatch::expand(g.name, &graph, &g.bricklets.by_name);
        let sinks = dispatch::sinks(&steps);
        let fragments = match w.record["observed"].as_object() {
            Some(observed) => activation_fragments(g.spec, observed, g.name, g.bricklets),
            None => dispatch::Fragments::new(),
        };
        subnets.add(
            workflow_id,
            g.name,
            (&w.object, &w.template, w.version, &w.lane, w.priority),
            (&steps, &fragments, &HashSet::new()),
        );
        for s in &steps {
            for p in &s.prereqs {
                edges.add(workflow_id, p, &s.name);
            }
        }
        // Its dependants wait for the subnet's last steps too, and say so in their prerequisites.
        for d in g.spec.dependants(g.name) {
            if sinks.is_empty() {
                break;
            }
            for s in &sinks {
                edges.add(workflow_id, s, &d.name);
            }
            waits
                .entry((workflow_id, d.name.clone()))
                .or_default()
                .extend(sinks.iter().cloned());
        }
        let subnet: Vec<Value> = steps
            .iter()
            .map(|s| {
                json!({"step": s.name, "bricklet": s.bricklet, "instance": s.instance,
                            "prereqs": s.prereqs})
            })
            .collect();
        w.record["composed"][g.name] = json!({
            "actset": actset,
            "steps": steps.len(),
            "bricklet_sha256": g.bricklets.sha256,
        });
        w.added += steps.len();
        composed.insert(workflow_id);
        events.push(
            NewEvent::new(&w.object, "composed", actor)
                .workflow(workflow_id)
                .template(&w.template)
                .version(w.version)
                .step(g.name)
                .detail(json!({"actset": actset, "subnet": subnet,
                               "edges": graph.labelled_edges(),
                               "bricklet_sha256": g.bricklets.sha256})),
        );
        let firsts: Vec<String> = steps
            .iter()
            .filter(|s| s.prereqs.is_empty() && s.spec.function.is_some())
            .map(|s| format!("{}/{}", s.bricklet, s.spec.name))
            .collect();
        ready.add(&w.template, &firsts);
    }

    subnets.insert(tx).await?;
    if !waits.is_empty() {
        let (mut wf, mut names, mut sinks) = (Vec::new(), Vec::new(), Vec::new());
        for ((workflow_id, name), s) in waits {
            wf.push(workflow_id);
            names.push(name);
            sinks.push(json!(s));
        }
        sqlx::query(
            "update workdo.steps s
                set pending = s.pending + jsonb_array_length(t.sinks),
                    prereqs = s.prereqs || array(select jsonb_array_elements_text(t.sinks)),
                    updated_at = now()
               from unnest($1::bigint[], $2::text[], $3::jsonb[]) as t(workflow_id, name, sinks)
              where s.workflow_id = t.workflow_id and s.name = t.name",
        )
        .bind(&wf)
        .bind(&names)
        .bind(&sinks)
        .execute(&mut **tx)
        .await?;
    }
    edges.insert(tx).await?;
    write_workflows(
        tx,
        workflows
            .into_iter()
            .filter(|(id, _)| composed.contains(id)),
    )
    .await
}

/// Edges (step, dependant) of workflows, which the engine follows when a step finishes,
/// gathered and written by one statement.
#[derive(Default)]
pub(crate) struct Edges {
    workflow: Vec<i64>,
    from: Vec<String>,
    to: Vec<String>,
}

impl Edges {
    pub(crate) fn add(&mut self, workflow_id: i64, from: &str, to: &str) {
        self.workflow.push(workflow_id);
        self.from.push(from.to_string());
        self.to.push(to.to_string());
    }

    pub(crate) async fn insert(self, conn: &mut PgConnection) -> Result<()> {
        if self.workflow.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "insert into workdo.workflow_edges (workflow_id, step, dependant)
             select w, f, t from unnest($1::bigint[], $2::text[], $3::text[]) as e(w, f, t)
             on conflict do nothing",
        )
        .bind(&self.workflow)
        .bind(&self.from)
        .bind(&self.to)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}

/// Subnets' step rows, of one or many workflows, gathered and inserted by one statement: a
/// step is ready when every prerequisite is in `done` (none, when composing), else waiting for
/// the others.
#[derive(Default)]
pub(crate) struct Subnets {
    workflow: Vec<i64>,
    object: Vec<String>,
    template: Vec<String>,
    version: Vec<i32>,
    lane: Vec<String>,
    priority: Vec<i32>,
    name: Vec<String>,
    status: Vec<&'static str>,
    prereqs: Vec<Value>,
    pending: Vec<i32>,
    max_attempts: Vec<i32>,
    lifecycle: Vec<Option<String>>,
    queue: Vec<Option<String>>,
    generated: Vec<Value>,
}

impl Subnets {
    pub(crate) fn add(
        &mut self,
        workflow_id: i64,
        generator: &str,
        (object, template, version, lane, priority): (&str, &str, i32, &str, i32),
        (steps, fragments, done): (
            &[dispatch::GeneratedStep],
            &dispatch::Fragments,
            &HashSet<String>,
        ),
    ) {
        for s in steps {
            let open = s.prereqs.iter().filter(|p| !done.contains(*p)).count();
            self.workflow.push(workflow_id);
            self.object.push(object.to_string());
            self.template.push(template.to_string());
            self.version.push(version);
            self.lane.push(lane.to_string());
            self.priority.push(priority);
            self.name.push(s.name.clone());
            self.status
                .push(if open == 0 { "ready" } else { "waiting" });
            self.prereqs.push(json!(s.prereqs));
            self.pending.push(i32::try_from(open).unwrap_or(i32::MAX));
            self.max_attempts
                .push(i32::try_from(s.spec.error_limit.max(1)).unwrap_or(i32::MAX));
            self.lifecycle.push(s.spec.lifecycle.clone());
            self.queue.push(
                (s.spec.function.is_some() && !s.spec.skip_queue)
                    .then(|| format!("{template}:{}/{}", s.bricklet, s.spec.name)),
            );
            let mut g =
                json!({"generator": generator, "bricklet": s.bricklet, "instance": s.instance});
            // The node this instance was made for (the paper's pfrag), when it was one.
            if let Some(Some(xml)) = fragments
                .get(&s.bricklet)
                .and_then(|f| f.get((s.instance as usize).saturating_sub(1)))
            {
                g["fragment"] = json!(xml);
            }
            self.generated.push(g);
        }
    }

    pub(crate) async fn insert(self, conn: &mut PgConnection) -> Result<()> {
        if self.workflow.is_empty() {
            return Ok(());
        }
        sqlx::query(concat!(
            "with ",
            crate::store::counts::steps_counted!(),
            ", ins as (insert into workdo.steps
                (workflow_id, object_id, template, version, lane, name, status, prereqs, pending,
                 priority, max_attempts, lifecycle, queue, generated)
             select t.workflow_id, t.object_id, t.template, t.version, t.lane, t.name, t.status,
                    array(select jsonb_array_elements_text(t.prereqs)), t.pending, t.priority,
                    t.max_attempts, t.lifecycle, t.queue, t.generated
               from unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[],
                           $6::int[], $7::text[], $8::text[], $9::jsonb[], $10::int[],
                           $11::int[], $12::text[], $13::text[], $14::jsonb[])
                    with ordinality as t(workflow_id, object_id, template, version, lane,
                                         priority, name, status, prereqs, pending,
                                         max_attempts, lifecycle, queue, generated, n)
                    cross join counted
              order by t.n
             returning template, name, status, id, active)",
            crate::store::counts::count_inserted!()
        ))
        .bind(&self.workflow)
        .bind(&self.object)
        .bind(&self.template)
        .bind(&self.version)
        .bind(&self.lane)
        .bind(&self.priority)
        .bind(&self.name)
        .bind(&self.status)
        .bind(&self.prereqs)
        .bind(&self.pending)
        .bind(&self.max_attempts)
        .bind(&self.lifecycle)
        .bind(&self.queue)
        .bind(&self.generated)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }
}
