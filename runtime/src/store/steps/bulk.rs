//! Bulk changes from outside (CLI, API, web page): retry, skip and prioritize the steps a
//! filter selects, and skip a whole workflow.

use serde_json::Value;
use sqlx::{Postgres, Transaction};

use crate::model::status::Status;
use crate::store::history::events::{EventBuf, NewEvent};
use crate::store::steps::apply::Change;
use crate::store::{Result, Store, StoreError};

/// Which steps a bulk command (retry, skip, prioritize) touches. Every `Some` must match.
#[derive(Debug, Clone, Default)]
pub struct StepFilter {
    /// Only these objects' steps (none: any object).
    pub objects: Vec<String>,
    pub workflow: Option<i64>,
    pub template: Option<String>,
    pub step: Option<String>,
    /// Only steps in this status.
    pub status: Option<String>,
    /// Objects whose property `.0` equals `.1` (as JSON).
    pub property: Option<(String, Value)>,
    /// Only these steps (the admin page's chosen rows).
    pub ids: Option<Vec<i64>>,
}

impl Store {
    /// The first of `objects` never registered, if any: a bulk command naming one is a typo
    /// to report, not "0 steps" (the workflow service's routes do not ask: its clients expect
    /// its answers for objects it does not know).
    pub async fn objects_missing(&self, objects: &[String]) -> Result<Option<String>> {
        if objects.is_empty() {
            return Ok(None);
        }
        Ok(sqlx::query_scalar(
            "select id from unnest($1::text[]) with ordinality as given(id, n)
              where not exists (select 1 from workdo.objects o where o.id = given.id)
              order by n limit 1",
        )
        .bind(objects)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Put steps matching `filter` (default: those in `error`) back in the queue, with their
    /// attempts reset. Returns how many.
    pub async fn steps_retry(&self, filter: &StepFilter, actor: &str) -> Result<usize> {
        let mut f = filter.clone();
        if f.status.is_none() {
            f.status = Some("error".into());
        }
        self.bulk(&f, actor, retried).await
    }

    /// Run finished (completed or skipped) steps matching `filter` again: back to waiting (ready
    /// when their prerequisites are done), attempts reset, their dependants waiting for them
    /// again. An observer run again sees its document as it is now. Returns how many.
    pub async fn steps_again(&self, filter: &StepFilter, actor: &str) -> Result<usize> {
        self.bulk_of(filter, true, actor, retried).await
    }

    /// [`Store::steps_retry`] (or with `again`, [`Store::steps_again`]) that also moves each
    /// retried step's workflow to the versions of its deployed function current now (`retry
    /// --current-functions`: fix the function, deploy it, retry), recording each move in the
    /// workflow's history, in the same transaction. Returns the steps retried and the pins moved.
    pub async fn steps_retry_current(
        &self,
        filter: &StepFilter,
        again: bool,
        actor: &str,
    ) -> Result<(usize, u64)> {
        let mut f = filter.clone();
        if f.status.is_none() && !again {
            f.status = Some("error".into());
        }
        let mut tx = self.pool.begin().await?;
        let ids = matching_ids(&mut tx, &f, again).await?;
        let moved = self.functions_repin_steps_in(&mut tx, &ids, actor).await?;
        let changes: Vec<Change> = ids.into_iter().map(retried).collect();
        let n = Self::steps_apply(&mut tx, &changes, actor)
            .await?
            .changed
            .len();
        tx.commit().await?;
        Ok((n, moved))
    }

    /// Skip every unfinished step matching `filter`. Returns how many.
    pub async fn steps_skip(&self, filter: &StepFilter, actor: &str) -> Result<usize> {
        self.bulk(filter, actor, |id| {
            Change::new(id, Status::Skipped, "skipped")
        })
        .await
    }

    /// Set the priority of the unfinished steps matching `filter`. Returns how many.
    pub async fn steps_prioritize(
        &self,
        filter: &StepFilter,
        priority: i32,
        actor: &str,
    ) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let ids = filtered_ids(&mut tx, filter).await?;
        let rows: Vec<(String, i64, String, i32, String, String)> = sqlx::query_as(
            "update workdo.steps set priority = $2, updated_at = now()
              where id = any($1)
             returning object_id, workflow_id, template, version, name, status",
        )
        .bind(&ids)
        .bind(priority)
        .fetch_all(&mut *tx)
        .await?;
        let mut events = EventBuf::default();
        for (object, wf, template, version, name, status) in &rows {
            events.push(
                NewEvent::new(object, "prioritized", actor)
                    .workflow(*wf)
                    .template(template)
                    .version(*version)
                    .step(name)
                    .status(status)
                    .detail(serde_json::json!({ "priority": priority })),
            );
        }
        events.flush(&mut tx).await?;
        tx.commit().await?;
        Ok(rows.len())
    }

    async fn bulk(
        &self,
        filter: &StepFilter,
        actor: &str,
        make: impl Fn(i64) -> Change,
    ) -> Result<usize> {
        self.bulk_of(filter, false, actor, make).await
    }

    /// `make`'s change for every active step matching `filter`, unfinished or (`finished`)
    /// completed or skipped, in one transaction. Returns how many changed.
    async fn bulk_of(
        &self,
        filter: &StepFilter,
        finished: bool,
        actor: &str,
        make: impl Fn(i64) -> Change,
    ) -> Result<usize> {
        let mut tx = self.pool.begin().await?;
        let ids = matching_ids(&mut tx, filter, finished).await?;
        let changes: Vec<Change> = ids.into_iter().map(make).collect();
        let n = Self::steps_apply(&mut tx, &changes, actor)
            .await?
            .changed
            .len();
        tx.commit().await?;
        Ok(n)
    }

    /// All unfinished steps of the object's active workflow of `template` skipped in one
    /// transaction, each with `note` when given. Returns how many (0 when it has none).
    pub async fn workflow_skip_all(
        &self,
        object: &str,
        template: &str,
        note: Option<&str>,
        actor: &str,
    ) -> Result<usize> {
        let filter = StepFilter {
            objects: vec![object.into()],
            template: Some(template.into()),
            ..Default::default()
        };
        let note = note.map(str::to_string);
        self.bulk(&filter, actor, move |id| {
            let mut c = Change::new(id, Status::Skipped, "skipped");
            c.note = note.clone();
            c
        })
        .await
    }
}

/// A step back in the queue with fresh attempts (retry, and running a finished step again).
pub(crate) fn retried(id: i64) -> Change {
    let mut c = Change::new(id, Status::Waiting, "retried");
    c.reset_attempts = true;
    c
}

/// Ids of the active, unfinished steps matching `filter`, locked.
/// A filter's template and step must name something: a misspelt one is an error naming it,
/// not "0 steps" (a script with a typo would otherwise never know).
async fn names_known(tx: &mut Transaction<'_, Postgres>, f: &StepFilter) -> Result<()> {
    if let Some(t) = &f.template {
        let known: bool =
            sqlx::query_scalar("select exists (select 1 from workdo.templates where name = $1)")
                .bind(t)
                .fetch_one(&mut **tx)
                .await?;
        if !known {
            return Err(StoreError::UnknownTemplate(t.clone()));
        }
    }
    if let Some(s) = &f.step {
        // A step of a template (any version), or one that exists (a generated step, a
        // machine's call step).
        let known: bool = sqlx::query_scalar(
            "select exists (select 1 from workdo.templates t, jsonb_array_elements(t.spec -> 'steps') st
                             where ($1::text is null or t.name = $1) and st ->> 'name' = $2)
                 or exists (select 1 from workdo.steps
                             where name = $2 and ($1::text is null or template = $1))",
        )
        .bind(f.template.as_deref())
        .bind(s)
        .fetch_one(&mut **tx)
        .await?;
        if !known {
            return Err(StoreError::UnknownStep {
                template: f.template.clone().unwrap_or_default(),
                step: s.clone(),
            });
        }
    }
    Ok(())
}

async fn filtered_ids(tx: &mut Transaction<'_, Postgres>, f: &StepFilter) -> Result<Vec<i64>> {
    matching_ids(tx, f, false).await
}

/// Ids of the active steps matching `filter`, unfinished or (`finished`) completed or
/// skipped, locked.
async fn matching_ids(
    tx: &mut Transaction<'_, Postgres>,
    f: &StepFilter,
    finished: bool,
) -> Result<Vec<i64>> {
    names_known(tx, f).await?;
    let (prop_key, prop_value) = match &f.property {
        Some((k, v)) => (Some(k.as_str()), Some(v.clone())),
        None => (None, None),
    };
    let ids: Vec<i64> = sqlx::query_scalar(
        "select s.id from workdo.steps s
          where s.active
            and (s.status in ('completed', 'skipped')) = $8
            and (cardinality($1::text[]) = 0
                 or s.workflow_id in (select w.id from workdo.workflows w where w.object_id = any($1)))
            and ($2::text is null or s.template = $2)
            and ($3::text is null or s.name = $3)
            and ($4::text is null or s.status = $4 or ($4 = 'error' and s.status = 'exception'))
            and ($7::bigint is null or s.workflow_id = $7)
            and ($9::bigint[] is null or s.id = any($9))
            and ($5::text is null or exists (
                  select 1 from workdo.objects o
                   where o.id = s.object_id and o.properties -> $5 = $6::jsonb))
          order by s.id
            for update",
    )
    .bind(&f.objects)
    .bind(&f.template)
    .bind(&f.step)
    .bind(&f.status)
    .bind(prop_key)
    .bind(prop_value)
    .bind(f.workflow)
    .bind(finished)
    .bind(&f.ids)
    .fetch_all(&mut **tx)
    .await?;
    Ok(ids)
}
