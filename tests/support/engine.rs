//! Helpers for the engine tests: the shipped googleScannedBookWF's name, a lease, a one-step
//! template, and committing status changes through the one commit path.

use std::time::Duration;

use sqlx::PgPool;
use workdo::store::{Change, SetRequest, StepResult, Store, StoreError};

use super::load;

pub const WF: &str = "googleScannedBookWF";
pub const LEASE: Duration = Duration::from_secs(60);

/// Commit `changes` (each under its lease) through the one commit path, as a worker's
/// results without side effects.
pub async fn commit(
    store: &Store,
    pool: &PgPool,
    changes: &[Change],
    actor: &str,
) -> Result<workdo::store::Applied, StoreError> {
    let mut results = Vec::new();
    for c in changes {
        let (object_id, workflow_id): (String, i64) =
            sqlx::query_as("select object_id, workflow_id from workdo.steps where id = $1")
                .bind(c.id)
                .fetch_one(pool)
                .await
                .expect("the step exists");
        results.push(StepResult {
            change: c.clone(),
            object_id,
            workflow_id,
            effects: Default::default(),
        });
    }
    store.results_commit(&results, actor).await
}

/// `oneWF`: a single step, `work`.
pub async fn load_one_step(store: &Store) {
    load(store, "one.yaml", "name: oneWF\nsteps:\n  - name: work\n").await;
}

/// Everything an object's run left behind, but timestamps and ids: its steps, workflow, events
/// and milestones, a row of text each.
pub async fn recorded(pool: &sqlx::PgPool, object: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select r from (
           select 1 as t, name as k, (name, status, pending, attempts, lifecycle, note,
                  error_message, error_text, lease_token is null and lease_owner is null
                  and lease_expires_at is null, finished_at is not null,
                  elapsed is not null)::text as r
             from workdo.steps where object_id = $1
           union all
           select 2, '', (status, unfinished, completed_at is not null)::text
             from workdo.workflows where object_id = $1
           union all
           select 3, lpad(id::text, 20, '0'), (kind, step, status, attempt, actor,
                  detail - 'start_at')::text
             from workdo.events where object_id = $1
           union all
           select 4, lpad(id::text, 20, '0'), name from workdo.milestones where object_id = $1
         ) x order by t, k",
    )
    .bind(object)
    .fetch_all(pool)
    .await
    .expect("recorded rows")
}

/// (name, status) of the object's active steps of `template`, in order.
pub async fn statuses(pool: &PgPool, object: &str, template: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "select name, status from workdo.steps where object_id = $1 and template = $2 and active order by id",
    )
    .bind(object)
    .bind(template)
    .fetch_all(pool)
    .await
    .expect("read statuses")
}

/// Complete `step` of the object's googleScannedBookWF as a robot would: the steps made ready.
pub async fn complete(store: &Store, object: &str, step: &str) -> Vec<String> {
    store
        .step_set(&SetRequest::new(object, WF, step, "completed"))
        .await
        .expect("complete step")
        .next_steps
}

/// The status of `step` among `all` (name, status).
pub fn status_of<'a>(all: &'a [(String, String)], step: &str) -> &'a str {
    all.iter()
        .find(|(n, _)| n == step)
        .map(|(_, s)| s.as_str())
        .unwrap_or_else(|| panic!("no step {step}"))
}
