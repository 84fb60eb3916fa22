//! Dynamic dispatch's records: what a step's result asks of dispatch (`Dispatch`), the bricklets
//! a template's generators may compose, each generator's activation set, and the workflows'
//! `dispatch` column locked, read and written in one statement each.
use std::collections::BTreeMap;

use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};

use crate::model::dispatch::{self, Actset, Bricklet, RuleMatch};
use crate::model::template::Template;
use crate::store::{Result, Store, StoreError};

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
pub(crate) fn composable(
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

/// A dispatching workflow's row, locked for the commit: its `dispatch` record, what its
/// generated steps copy, and how many steps this commit added to it.
pub(crate) struct WorkflowRecord {
    pub record: Value,
    pub object: String,
    pub template: String,
    pub version: i32,
    pub lane: String,
    pub priority: i32,
    pub added: usize,
}

/// The workflows `ids`, locked in id order (after any step rows the caller locks: the order
/// `workdo.apply` writes them in).
pub(crate) async fn lock_workflows(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[i64],
) -> Result<BTreeMap<i64, WorkflowRecord>> {
    let rows: Vec<(i64, Value, String, String, i32, String, i32)> = sqlx::query_as(
        "select id, dispatch, object_id, template, version, lane, priority
           from workdo.workflows where id = any($1) order by id for update",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, record, object, template, version, lane, priority)| {
            let record = if record.is_object() {
                record
            } else {
                json!({})
            };
            let w = WorkflowRecord {
                record,
                object,
                template,
                version,
                lane,
                priority,
                added: 0,
            };
            (id, w)
        })
        .collect())
}

/// Write `workflows` back by one statement: each one's record, and its unfinished count up by
/// the steps added.
pub(crate) async fn write_workflows(
    tx: &mut Transaction<'_, Postgres>,
    workflows: impl IntoIterator<Item = (i64, WorkflowRecord)>,
) -> Result<()> {
    let (mut ids, mut records, mut added) = (Vec::new(), Vec::new(), Vec::new());
    for (id, w) in workflows {
        ids.push(id);
        records.push(w.record);
        added.push(i32::try_from(w.added).unwrap_or(i32::MAX));
    }
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "update workdo.workflows w
            set dispatch = t.dispatch, unfinished = w.unfinished + t.added
           from unnest($1::bigint[], $2::jsonb[], $3::int[]) as t(id, dispatch, added)
          where w.id = t.id",
    )
    .bind(&ids)
    .bind(&records)
    .bind(&added)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Steps `ids`, each still started under its lease in `leases`, locked in id order: their
/// workflows, by step. A step whose lease is gone is neither locked nor answered.
pub(crate) async fn lock_held(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[i64],
    leases: &[Option<uuid::Uuid>],
) -> Result<std::collections::HashMap<i64, i64>> {
    Ok(sqlx::query_as(
        "select s.id, s.workflow_id
           from workdo.steps s join unnest($1::bigint[], $2::uuid[]) as g(id, lease) on s.id = g.id
          where s.status = 'started' and s.lease_token is not distinct from g.lease
          order by s.id for update of s",
    )
    .bind(ids)
    .bind(leases)
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .collect())
}

/// The template steps after each generator `(workflow, its template version, generator)`,
/// whatever their status, locked in id order: the dependants a generator's subnet holds back,
/// which a composition or a recomposition changes.
pub(crate) async fn lock_generators_dependants(
    tx: &mut Transaction<'_, Postgres>,
    generators: &[(i64, &Template, &str)],
) -> Result<()> {
    let (mut workflows, mut names) = (Vec::new(), Vec::new());
    for &(workflow, spec, generator) in generators {
        for d in spec.dependants(generator) {
            workflows.push(workflow);
            names.push(d.name.as_str());
        }
    }
    if workflows.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "select s.id from workdo.steps s
           join unnest($1::bigint[], $2::text[]) as d(workflow_id, name)
             on s.workflow_id = d.workflow_id and s.name = d.name
          order by s.id for update of s",
    )
    .bind(&workflows)
    .bind(&names)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
