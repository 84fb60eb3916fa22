//! Dynamic dispatch in the database: what observers found and each generator's activation set
//! (`workflows.dispatch`), and generators composing their subnets into step rows with per-workflow
//! edges (`workflow_edges`), each in the transaction that commits the observer's or generator's
//! own result. The composition itself is [`crate::model::dispatch`]; migrations/0011 has the
//! schema and why.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sqlx::{PgConnection, Postgres, Transaction};

use super::events::{EventBuf, NewEvent, ReadyKeys};
use super::steps::Claimed;
use super::{Result, Store, StoreError};
use crate::model::dispatch::{self, Actset, Bricklet, RuleMatch};
use crate::model::template::Template;

/// What a completed observer or generator step does besides completing.
#[derive(Debug, Clone, PartialEq)]
pub enum Dispatch {
    /// An observer ran: what each of its rules matched.
    Observed {
        observer: String,
        matches: Vec<RuleMatch>,
    },
    /// A generator ran: compose its subnet.
    Compose { generator: String },
}

/// The bricklets a template's generators may compose, by name: those defined in it, then the
/// current versions of loaded bricklet files (with their SHA-256).
#[derive(Debug, Clone, Default)]
pub struct Bricklets {
    pub by_name: BTreeMap<String, Bricklet>,
    /// SHA-256 of each bricklet taken from a file (inline ones are covered by the template's).
    pub sha256: BTreeMap<String, String>,
}

impl Bricklets {
    fn compensation(&self, b: &str) -> Option<String> {
        self.by_name.get(b).and_then(|b| b.compensate.clone())
    }
}

impl Store {
    /// Claim generated steps by the bricklet step they run (`queue`), as [`Store::step_claim`]
    /// does template steps.
    pub async fn step_claim_queue(
        &self,
        queue: &str,
        lane: Option<&str>,
        limit: i64,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<Vec<Claimed>> {
        // A statement of its own, as `step_claim`'s, so `async_claims` applies to it alone.
        let claimed: Vec<Claimed> = sqlx::query_as(
            "select * from workdo.claim_queue(p_queue => $1, p_lane => $2, p_limit => $3,
                                              p_owner => $4, p_lease_secs => $5, p_async => $6)",
        )
        .bind(queue)
        .bind(lane)
        .bind(limit)
        .bind(owner)
        .bind(lease.as_secs_f64())
        .bind(self.async_claims)
        .fetch_all(&self.pool)
        .await?;
        Ok(claimed)
    }

    /// The bricklets `spec`'s generators may compose.
    ///
    /// # Errors
    /// The database refuses, or a stored bricklet cannot be read.
    pub async fn bricklets_of(&self, spec: &Template) -> Result<Bricklets> {
        let mut out = Bricklets::default();
        for b in &spec.bricklets {
            out.by_name.insert(b.name.clone(), b.clone());
        }
        let wanted: Vec<&String> = spec
            .steps
            .iter()
            .filter_map(|s| s.generate.as_ref())
            .flat_map(|g| g.refset.iter())
            .filter(|b| !out.by_name.contains_key(*b))
            .collect();
        for name in wanted {
            if out.by_name.contains_key(name) {
                continue;
            }
            if let Some(row) = self.bricklet_current(name).await? {
                out.sha256.insert(name.clone(), row.sha256.clone());
                out.by_name.insert(
                    name.clone(),
                    Bricklet {
                        name: name.clone(),
                        compensate: row.spec.compensate.clone(),
                        steps: row.spec.steps.clone(),
                    },
                );
            }
        }
        Ok(out)
    }

    /// A workflow's dispatch record: what its observers found, each generator's activation set
    /// and the subnets composed so far.
    pub async fn workflow_dispatch(&self, workflow_id: i64) -> Result<Value> {
        let v: Option<Value> =
            sqlx::query_scalar("select dispatch from workdo.workflows where id = $1")
                .bind(workflow_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(v.unwrap_or_else(|| json!({})))
    }
}

/// The activation set of `generator` from everything `observed` holds: each observer's matches
/// applied in the template's step order, then rule order. An observer that runs again replaces
/// its own matches, so the set always reflects the latest document each observer saw.
pub fn activation(
    spec: &Template,
    observed: &serde_json::Map<String, Value>,
    generator: &str,
    bricklets: &Bricklets,
) -> Actset {
    let mut set = Actset::new();
    for step in spec.steps.iter().filter(|s| s.observe.is_some()) {
        let Some(found) = observed.get(&step.name) else {
            continue;
        };
        let matches: Vec<RuleMatch> = serde_json::from_value(found.clone()).unwrap_or_default();
        for m in matches.iter().filter(|m| m.generator == generator) {
            dispatch::apply(&mut set, m, &|b| bricklets.compensation(b));
        }
    }
    set
}

/// `set` as `generator` may compose it: only bricklets of its refset that are loaded (the set
/// cannot hold others, but a stored record is data, and data is checked), counted before
/// anything is built — past the subnet limit the generator fails (its result is refused, and
/// the completer records the step in error with this message).
pub(super) fn composable(
    generator: &str,
    generate: &dispatch::Generate,
    bricklets: &Bricklets,
    set: Actset,
) -> Result<Actset> {
    let set: Actset = set
        .into_iter()
        .filter(|(b, _)| generate.refset.contains(b) && bricklets.by_name.contains_key(b))
        .collect();
    let size = dispatch::subnet_size(&set, &generate.rules, &bricklets.by_name);
    if size > dispatch::MAX_SUBNET_STEPS {
        return Err(StoreError::SubnetTooLarge {
            generator: generator.to_string(),
            steps: size,
            max: dispatch::MAX_SUBNET_STEPS,
        });
    }
    Ok(set)
}

/// The fragments each of `generator`'s activated bricklets' instances matched, by the same
/// rules in the same order as [`activation`].
pub fn activation_fragments(
    spec: &Template,
    observed: &serde_json::Map<String, Value>,
    generator: &str,
    bricklets: &Bricklets,
) -> dispatch::Fragments {
    let mut out = dispatch::Fragments::new();
    for step in spec.steps.iter().filter(|s| s.observe.is_some()) {
        let Some(found) = observed.get(&step.name) else {
            continue;
        };
        let matches: Vec<RuleMatch> = serde_json::from_value(found.clone()).unwrap_or_default();
        for m in matches.iter().filter(|m| m.generator == generator) {
            dispatch::apply_fragments(&mut out, m, &|b| bricklets.compensation(b));
        }
    }
    out
}

/// Record an observer's matches on its workflow and recompute the activation sets of the
/// generators that have not composed yet (a generator that composed keeps its subnet).
pub(super) async fn record_observed(
    tx: &mut Transaction<'_, Postgres>,
    (events, ready): (&mut EventBuf, &mut ReadyKeys),
    workflow_id: i64,
    observer: &str,
    matches: &[RuleMatch],
    (spec, bricklets): (&Template, &Bricklets),
    actor: &str,
) -> Result<()> {
    let row: Option<(Value, String, String, i32)> = sqlx::query_as(
        "select dispatch, object_id, template, version from workdo.workflows where id = $1 for update",
    )
    .bind(workflow_id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some((mut record, object, template, version)) = row else {
        return Ok(());
    };
    if !record.is_object() {
        record = json!({});
    }
    record["observed"][observer] = json!(matches);
    let observed = record["observed"].as_object().cloned().unwrap_or_default();
    let composed = record["composed"].as_object().cloned().unwrap_or_default();
    let mut changed = serde_json::Map::new();
    for g in spec.steps.iter().filter(|s| s.generate.is_some()) {
        let set = activation(spec, &observed, &g.name, bricklets);
        if composed.contains_key(&g.name) {
            // Composed already: the subnet follows the document (seed 001's run-time adaption).
            super::recompose::recompose(
                tx,
                (&mut *events, &mut *ready),
                workflow_id,
                &g.name,
                set,
                &mut record,
                (spec, bricklets),
                actor,
            )
            .await?;
            continue;
        }
        record["actsets"][&g.name] = json!(set);
        changed.insert(g.name.clone(), json!(set));
    }
    sqlx::query("update workdo.workflows set dispatch = $2 where id = $1")
        .bind(workflow_id)
        .bind(&record)
        .execute(&mut **tx)
        .await?;
    let matched: Vec<Value> = matches
        .iter()
        .filter(|m| m.fragments > 0)
        .map(|m| {
            json!({"rule": m.rule + 1, "op": m.op.as_str(), "generator": m.generator,
                        "bricklets": m.bricklets, "fragments": m.fragments})
        })
        .collect();
    events.push(
        NewEvent::new(&object, "observed", actor)
            .workflow(workflow_id)
            .template(&template)
            .version(version)
            .step(observer)
            .detail(json!({"matched": matched, "rules": matches.len(), "actsets": changed})),
    );
    Ok(())
}

/// Compose `generator`'s subnet into `claimed`'s workflow, before the generator's own completion
/// is applied in the same transaction (so the counters its completion moves already include the
/// subnet): the steps with their prerequisites and per-workflow edges, the generator's dependants
/// made to wait for the subnet's last steps, the workflow's unfinished count, the dispatch
/// record and an event. Does nothing when the generator no longer holds its lease (its result
/// is then refused as lost) or already composed. Returns the subnet's first steps' claim keys.
pub(super) async fn compose(
    tx: &mut Transaction<'_, Postgres>,
    (events, ready): (&mut EventBuf, &mut ReadyKeys),
    (step_id, lease): (i64, Option<uuid::Uuid>),
    generator: &str,
    (spec, bricklets): (&Template, &Bricklets),
    actor: &str,
) -> Result<()> {
    let held: Option<i64> = sqlx::query_scalar(
        "select workflow_id from workdo.steps
          where id = $1 and status = 'started' and lease_token is not distinct from $2 for update",
    )
    .bind(step_id)
    .bind(lease)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(workflow_id) = held else {
        return Ok(());
    };
    let (mut record, object, template, version, lane, priority): (
        Value,
        String,
        String,
        i32,
        String,
        i32,
    ) = sqlx::query_as(
        "select dispatch, object_id, template, version, lane, priority
           from workdo.workflows where id = $1 for update",
    )
    .bind(workflow_id)
    .fetch_one(&mut **tx)
    .await?;
    if !record.is_object() {
        record = json!({});
    }
    if record["composed"].get(generator).is_some() {
        return Ok(());
    }
    let Some(generate) = spec.step(generator).and_then(|s| s.generate.as_ref()) else {
        return Ok(());
    };
    let actset: Actset =
        serde_json::from_value(record["actsets"][generator].clone()).unwrap_or_default();
    let actset = composable(generator, generate, bricklets, actset)?;
    let graph = dispatch::compose(&actset, &generate.rules);
    let steps = dispatch::expand(generator, &graph, &bricklets.by_name);
    let sinks = dispatch::sinks(&steps);
    let dependants: Vec<String> = spec
        .steps
        .iter()
        .filter(|s| s.prereqs.iter().any(|p| p == generator))
        .map(|s| s.name.clone())
        .collect();
    let observed = record["observed"].as_object().cloned().unwrap_or_default();
    let fragments = activation_fragments(spec, &observed, generator, bricklets);
    insert_subnet(
        tx,
        workflow_id,
        generator,
        (&object, &template, version, &lane, priority),
        (&steps, &fragments, &Default::default()),
    )
    .await?;
    let mut edges: Vec<(String, String)> = steps
        .iter()
        .flat_map(|s| s.prereqs.iter().map(|p| (p.clone(), s.name.clone())))
        .collect();
    if !sinks.is_empty() {
        for d in &dependants {
            for s in &sinks {
                edges.push((s.clone(), d.clone()));
            }
        }
        // They wait for the subnet's last steps too, and say so in their prerequisites.
        sqlx::query(
            "update workdo.steps set pending = pending + $3, prereqs = prereqs || $4,
                                     updated_at = now()
              where workflow_id = $1 and name = any($2)",
        )
        .bind(workflow_id)
        .bind(&dependants)
        .bind(i32::try_from(sinks.len()).unwrap_or(i32::MAX))
        .bind(&sinks)
        .execute(&mut **tx)
        .await?;
    }
    insert_edges(tx, workflow_id, edges.clone()).await?;
    let subnet: Vec<Value> = steps
        .iter()
        .map(|s| {
            json!({"step": s.name, "bricklet": s.bricklet, "instance": s.instance,
                        "prereqs": s.prereqs})
        })
        .collect();
    record["composed"][generator] = json!({
        "actset": actset,
        "steps": steps.len(),
        "bricklet_sha256": bricklets.sha256,
    });
    sqlx::query(
        "update workdo.workflows set dispatch = $2, unfinished = unfinished + $3 where id = $1",
    )
    .bind(workflow_id)
    .bind(&record)
    .bind(i32::try_from(steps.len()).unwrap_or(i32::MAX))
    .execute(&mut **tx)
    .await?;
    events.push(
        NewEvent::new(&object, "composed", actor)
            .workflow(workflow_id)
            .template(&template)
            .version(version)
            .step(generator)
            .detail(json!({"actset": actset, "subnet": subnet,
                           "edges": graph.labelled_edges(), "bricklet_sha256": bricklets.sha256})),
    );
    let firsts: Vec<String> = steps
        .iter()
        .filter(|s| s.prereqs.is_empty() && s.spec.function.is_some())
        .map(|s| format!("{}/{}", s.bricklet, s.spec.name))
        .collect();
    ready.add(&template, &firsts);
    Ok(())
}

/// The workflow's edges (step, dependant) the engine follows when a step finishes.
pub(super) async fn insert_edges(
    conn: &mut PgConnection,
    workflow_id: i64,
    edges: Vec<(String, String)>,
) -> Result<()> {
    let (from, to): (Vec<String>, Vec<String>) = edges.into_iter().unzip();
    sqlx::query(
        "insert into workdo.workflow_edges (workflow_id, step, dependant)
         select $1, f, t from unnest($2::text[], $3::text[]) as e(f, t) on conflict do nothing",
    )
    .bind(workflow_id)
    .bind(&from)
    .bind(&to)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The subnet's step rows: ready when every prerequisite is in `done` (none, when composing),
/// else waiting for the others.
pub(super) async fn insert_subnet(
    conn: &mut PgConnection,
    workflow_id: i64,
    generator: &str,
    (object, template, version, lane, priority): (&str, &str, i32, &str, i32),
    (steps, fragments, done): (
        &[dispatch::GeneratedStep],
        &dispatch::Fragments,
        &std::collections::HashSet<String>,
    ),
) -> Result<()> {
    let open =
        |s: &dispatch::GeneratedStep| s.prereqs.iter().filter(|p| !done.contains(*p)).count();
    if steps.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    let statuses: Vec<&str> = steps
        .iter()
        .map(|s| if open(s) == 0 { "ready" } else { "waiting" })
        .collect();
    let prereqs: Vec<Value> = steps.iter().map(|s| json!(s.prereqs)).collect();
    let pendings: Vec<i32> = steps
        .iter()
        .map(|s| i32::try_from(open(s)).unwrap_or(i32::MAX))
        .collect();
    let limits: Vec<i32> = steps
        .iter()
        .map(|s| i32::try_from(s.spec.error_limit.max(1)).unwrap_or(i32::MAX))
        .collect();
    let lifecycles: Vec<Option<&str>> = steps.iter().map(|s| s.spec.lifecycle.as_deref()).collect();
    let queues: Vec<Option<String>> = steps
        .iter()
        .map(|s| {
            (s.spec.function.is_some() && !s.spec.skip_queue)
                .then(|| format!("{template}:{}/{}", s.bricklet, s.spec.name))
        })
        .collect();
    let generated: Vec<Value> = steps
        .iter()
        .map(|s| {
            let mut g =
                json!({"generator": generator, "bricklet": s.bricklet, "instance": s.instance});
            // The node this instance was made for (the paper's pfrag), when it was one.
            if let Some(Some(xml)) = fragments
                .get(&s.bricklet)
                .and_then(|f| f.get((s.instance as usize).saturating_sub(1)))
            {
                g["fragment"] = json!(xml);
            }
            g
        })
        .collect();
    sqlx::query(
        "insert into workdo.steps
            (workflow_id, object_id, template, version, lane, name, status, prereqs, pending,
             priority, max_attempts, lifecycle, queue, generated)
         select $1, $2, $3, $4, $5, t.name, t.status,
                array(select jsonb_array_elements_text(t.prereqs)), t.pending, $6, t.max_attempts,
                t.lifecycle, t.queue, t.generated
           from unnest($7::text[], $8::text[], $9::jsonb[], $10::int[], $11::int[], $12::text[],
                       $13::text[], $14::jsonb[])
                with ordinality as t(name, status, prereqs, pending, max_attempts, lifecycle,
                                     queue, generated, n)
          order by t.n",
    )
    .bind(workflow_id)
    .bind(object)
    .bind(template)
    .bind(version)
    .bind(lane)
    .bind(priority)
    .bind(&names)
    .bind(&statuses)
    .bind(&prereqs)
    .bind(&pendings)
    .bind(&limits)
    .bind(&lifecycles)
    .bind(&queues)
    .bind(&generated)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
