//! Each workflow's pins of deployed functions (migrations/0022): made when it starts, read
//! per claim by the workers, moved by `retry --current-functions`, dropped with the workflow.

use std::collections::{HashMap, HashSet};

use sqlx::{Postgres, Transaction};

use crate::store::templates::functions::{FunctionPin, WorkflowPin};
use crate::store::{Result, Store};

impl Store {
    /// The version of `name` each of `workflows` pinned. A workflow with no pin for it (it
    /// started before `name` was deployed, or its template reaches `name` through a bricklet
    /// loaded since) pins the current version now, once: later calls read the same.
    pub async fn function_pins(
        &self,
        workflows: &[i64],
        name: &str,
    ) -> Result<HashMap<i64, FunctionPin>> {
        // Several generated steps of one workflow in one claim name it once.
        let mut unique = workflows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let workflows = &unique[..];
        let read = || {
            sqlx::query_as::<_, (i64, String, i32, String, bool, Option<String>)>(
                "select p.workflow_id, f.name, f.version, f.sha256, a.archive, f.entry
                   from workdo.workflow_functions p
                   join workdo.functions f on f.name = p.name and f.version = p.version
                   join workdo.function_artifacts a on a.sha256 = f.sha256
                  where p.workflow_id = any($1) and p.name = $2",
            )
            .bind(workflows)
            .bind(name)
            .fetch_all(&self.pool)
        };
        let mut rows = read().await?;
        if rows.len() < workflows.len() {
            sqlx::query(
                "insert into workdo.workflow_functions (workflow_id, name, version)
                 select w, c.name, c.version from unnest($1::bigint[]) w
                   join workdo.function_current c on c.name = $2
                 on conflict do nothing",
            )
            .bind(workflows)
            .bind(name)
            .execute(&self.pool)
            .await?;
            rows = read().await?;
        }
        Ok(rows
            .into_iter()
            .map(|(w, name, version, sha256, archive, entry)| {
                (
                    w,
                    FunctionPin {
                        name,
                        version,
                        sha256,
                        archive,
                        entry,
                    },
                )
            })
            .collect())
    }

    /// Pin, for each of `workflows`, the current version of each of `names` (in the
    /// transaction that starts them). A name not deployed pins nothing: its steps fail saying
    /// so until it is, then pin what is current then.
    pub(crate) async fn functions_pin_in(
        tx: &mut Transaction<'_, Postgres>,
        workflows: &[i64],
        names: &[String],
    ) -> Result<()> {
        if workflows.is_empty() || names.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "insert into workdo.workflow_functions (workflow_id, name, version)
             select w, c.name, c.version from unnest($1::bigint[]) w
              cross join workdo.function_current c where c.name = any($2)
             on conflict do nothing",
        )
        .bind(workflows)
        .bind(names)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// Drop the pins of `workflows`, deleted or archived in this transaction.
    pub(crate) async fn functions_unpin_in(
        tx: &mut Transaction<'_, Postgres>,
        workflows: &[i64],
    ) -> Result<()> {
        sqlx::query("delete from workdo.workflow_functions where workflow_id = any($1)")
            .bind(workflows)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    /// Move `workflows`' pins of `names` to the versions current now (`retry
    /// --current-functions`), recording each move in the workflow's history. Returns the
    /// moves made.
    pub(crate) async fn functions_repin_in(
        tx: &mut Transaction<'_, Postgres>,
        workflows: &[i64],
        names: &[String],
        actor: &str,
    ) -> Result<u64> {
        if workflows.is_empty() || names.is_empty() {
            return Ok(0);
        }
        let moved: Vec<(i64, String, String, Option<i32>, i32)> = sqlx::query_as(
            "with cur as (
                select w.id, w.object_id, w.template, c.name, c.version
                  from workdo.workflows w
                 cross join workdo.function_current c
                 where w.id = any($1) and c.name = any($2)),
             old as (
                -- no FOR UPDATE: evaluated after `up` changed the row, it would find none
                select p.workflow_id, p.name, p.version from workdo.workflow_functions p
                 where p.workflow_id = any($1) and p.name = any($2)),
             up as (
                insert into workdo.workflow_functions (workflow_id, name, version)
                select id, name, version from cur
                on conflict (workflow_id, name) do update set version = excluded.version
                 where workdo.workflow_functions.version <> excluded.version
                returning workflow_id, name, version)
             select up.workflow_id, cur.object_id, up.name, old.version, up.version
               from up join cur on cur.id = up.workflow_id and cur.name = up.name
               left join old on old.workflow_id = up.workflow_id and old.name = up.name",
        )
        .bind(workflows)
        .bind(names)
        .fetch_all(&mut **tx)
        .await?;
        for (workflow, object, name, from, to) in &moved {
            sqlx::query(
                "insert into workdo.events (object_id, workflow_id, kind, actor, detail)
                 values ($1, $2, 'function_repinned', $3, $4)",
            )
            .bind(object)
            .bind(workflow)
            .bind(actor)
            .bind(serde_json::json!({"function": name, "from": from, "to": to}))
            .execute(&mut **tx)
            .await?;
        }
        Ok(moved.len() as u64)
    }

    /// The hashes a worker's cache keeps whatever its size: every current version's, and
    /// every version an unfinished workflow pins.
    pub async fn functions_hashes_in_use(&self) -> Result<HashSet<String>> {
        let rows: Vec<String> = sqlx::query_scalar(
            "select f.sha256 from workdo.function_current c
               join workdo.functions f on f.name = c.name and f.version = c.version
             union
             select f.sha256 from workdo.workflow_functions p
               join workdo.workflows w on w.id = p.workflow_id and w.status = 'active'
               join workdo.functions f on f.name = p.name and f.version = p.version",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut keep: HashSet<String> = rows.into_iter().collect();
        // Versions fixed in a template (`name@N`) have no pins: those that a version with
        // unfinished workflows names are kept too.
        let specs: Vec<serde_json::Value> = sqlx::query_scalar(
            "select spec from workdo.templates t
              where exists (select 1 from workdo.workflows w
                             where w.template_id = t.id and w.status = 'active')
                and jsonb_path_exists(spec, '$.** ? (@.kind == \"deployed\" && exists(@.version))')",
        )
        .fetch_all(&self.pool)
        .await?;
        for spec in specs {
            let Ok(t) = serde_json::from_value::<crate::model::template::Template>(spec) else {
                continue;
            };
            for (name, fixed) in t.deployed_functions() {
                if let Some(v) = fixed
                    && let Ok(pin) = self.function_fixed(&name, v as i32).await
                {
                    keep.insert(pin.sha256);
                }
            }
        }
        Ok(keep)
    }

    /// The pins of `workflows`, for `show` and the object's page.
    pub async fn workflow_pins(&self, workflows: &[i64]) -> Result<Vec<WorkflowPin>> {
        Ok(sqlx::query_as(
            "select p.workflow_id, p.name, p.version, f.sha256 from workdo.workflow_functions p
               join workdo.functions f on f.name = p.name and f.version = p.version
              where p.workflow_id = any($1) order by p.workflow_id, p.name",
        )
        .bind(workflows)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The template version (its id) each of `workflows` is locked to.
    pub async fn workflow_template_ids(&self, workflows: &[i64]) -> Result<HashMap<i64, i64>> {
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("select id, template_id from workdo.workflows where id = any($1)")
                .bind(workflows)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().collect())
    }

    /// The versions of template `name` other than the current one that still have unfinished
    /// workflows, newest first: a runtime runs their own definitions for their steps.
    pub async fn template_versions_active(&self, name: &str) -> Result<Vec<i64>> {
        Ok(sqlx::query_scalar(
            "select t.id from workdo.templates t
              where t.name = $1 and not t.is_current and t.kind <> 'bricklet'
                and exists (select 1 from workdo.workflows w
                             where w.template_id = t.id and w.status = 'active')
              order by t.id desc",
        )
        .bind(name)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Move the pins of the deployed functions `steps` run (each by its own workflow's template
    /// version) to the versions current now. Returns the pins moved.
    pub(crate) async fn functions_repin_steps_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        steps: &[i64],
        actor: &str,
    ) -> Result<u64> {
        let rows: Vec<(i64, i64, String, String)> = sqlx::query_as(
            "select s.workflow_id, w.template_id, t.sha256, s.name from workdo.steps s
               join workdo.workflows w on w.id = s.workflow_id
               join workdo.templates t on t.id = w.template_id
              where s.id = any($1)",
        )
        .bind(steps)
        .fetch_all(&mut **tx)
        .await?;
        let mut by_name: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
        for (workflow, template_id, sha, step) in rows {
            let spec = self.spec_by_id(&mut **tx, template_id, &sha).await?;
            if let Some(f) = spec.function_of_step(&step)
                && let crate::model::template::Runner::Deployed {
                    name,
                    version: None,
                    ..
                } = &f.runner
            {
                by_name.entry(name.clone()).or_default().push(workflow);
            }
        }
        let mut moved = 0;
        for (name, workflows) in by_name {
            moved += Self::functions_repin_in(tx, &workflows, std::slice::from_ref(&name), actor)
                .await?;
        }
        Ok(moved)
    }

    /// The deployed function each of `steps` (of workflow `w`) runs, with the version and hash
    /// its workflow pinned (or the version fixed in the template).
    pub async fn workflow_step_functions(
        &self,
        w: &crate::store::workflows::WorkflowRow,
        steps: &[crate::store::StepRow],
    ) -> Result<Vec<crate::store::templates::functions::StepFunction>> {
        use crate::model::template::Runner;
        let spec = self
            .spec_by_id(&self.pool, w.template_id, &w.template_sha256)
            .await?;
        let pins: Vec<WorkflowPin> = self.workflow_pins(&[w.id]).await?;
        if spec.deployed_functions().is_empty() && pins.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for s in steps {
            let f = match spec.function_of_step(&s.name) {
                Some(f) => Some(f.clone()),
                None if s.name.contains('/') => {
                    Self::bricklet_step_function(&self.pool, &s.name).await?
                }
                None => None,
            };
            let Some(Runner::Deployed { name, version, .. }) = f.as_ref().map(|f| &f.runner) else {
                continue;
            };
            let (version, sha256) = match version {
                Some(v) => match self.function_fixed(name, *v as i32).await {
                    Ok(p) => (Some(p.version), Some(p.sha256)),
                    Err(_) => (Some(*v as i32), None),
                },
                None => match pins.iter().find(|p| &p.name == name) {
                    Some(p) => (Some(p.version), Some(p.sha256.clone())),
                    None => (None, None),
                },
            };
            out.push(crate::store::templates::functions::StepFunction {
                step: s.name.clone(),
                name: name.clone(),
                version,
                sha256,
            });
        }
        Ok(out)
    }

    /// The deployed functions (not fixed to a version) that the current bricklet files name,
    /// read through the caller's transaction.
    pub(crate) async fn bricklets_deployed_in(
        tx: &mut Transaction<'_, Postgres>,
    ) -> Result<Vec<String>> {
        let specs: Vec<serde_json::Value> = sqlx::query_scalar(
            "select spec from workdo.templates
              where is_current and kind = 'bricklet'
                and jsonb_path_exists(spec, '$.** ? (@.kind == \"deployed\")')",
        )
        .fetch_all(&mut **tx)
        .await?;
        let mut out = Vec::new();
        for spec in specs {
            let Ok(t) = serde_json::from_value::<crate::model::template::Template>(spec) else {
                continue;
            };
            for (name, fixed) in t.deployed_functions() {
                if fixed.is_none() && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        Ok(out)
    }

    /// The function a generated step (`GENERATOR/BRICKLET#N/STEP`) runs when its bricklet is a
    /// file of its own (the current version of it).
    pub(crate) async fn bricklet_step_function<'e>(
        db: impl sqlx::PgExecutor<'e>,
        step: &str,
    ) -> Result<Option<crate::model::template::FunctionSpec>> {
        let parts: Vec<&str> = step.split('/').collect();
        let (bricklet, name) = match parts.as_slice() {
            [_, b, s] | [b, s] => (
                b.split('#').next().unwrap_or(b),
                s.split('#').next().unwrap_or(s),
            ),
            _ => return Ok(None),
        };
        let spec: Option<serde_json::Value> = sqlx::query_scalar(
            "select spec from workdo.templates where name = $1 and is_current and kind = 'bricklet'",
        )
        .bind(bricklet)
        .fetch_optional(db)
        .await?;
        let Some(t) =
            spec.and_then(|s| serde_json::from_value::<crate::model::template::Template>(s).ok())
        else {
            return Ok(None);
        };
        Ok(t.step(name).and_then(|s| s.function.clone()))
    }
}
