//! Helpers for the state-machine tests: a machine using every builtin action, and jobs,
//! signals and their records.

use serde_json::{Value, json};
use workdo::store::{StartRequest, StoreError};

use super::TestDb;

/// A machine exercising the builtin actions.
pub const COUNTER: &str = r#"
name: counterWF
kind: machine
config: { grace: 1 hour, limit: 100 }
variables: { count: 0 }
initial: Idle
global:
  stop: Stopped
states:
  Idle:
    enter:
      - set: { entered: "${now}" }
    on:
      bump:
        to: Idle
        actions:
          - fail: { when: "count >= limit", message: "the limit is ${limit}" }
          - set: { count: "${count + 1}", by: "${signal.actor}" }
      add: { to: Idle, actions: [ { set: { count: "${count + signal.data.n}" } } ] }
      arm: Armed
      boom: { to: Armed, actions: [ { set: { count: 999 } }, { fail: "boom" } ] }
      chain: Chained
  Chained:
    enter:
      - signal: next
    on:
      next: Idle
  Armed:
    enter:
      - alarm: { signal: ring, in: "${grace}" }
    on:
      ring: Rung
      disarm: Idle
  Rung: { final: true }
  Stopped: { final: true }
"#;

/// Signal `signal` (no data) to job `id`, as actor "t".
pub async fn send(
    t: &TestDb,
    id: i64,
    signal: &str,
) -> Result<workdo::store::Signalled, StoreError> {
    t.store.machine_signal(id, signal, &json!({}), "t").await
}

/// Start `template` on `object`: the job's id.
pub async fn job(t: &TestDb, template: &str, object: &str) -> i64 {
    let started = t
        .store
        .workflow_start(&StartRequest::new(template, &[object]))
        .await
        .expect("start");
    started[0].workflow_id
}

/// A job's state and variables.
pub async fn state(t: &TestDb, id: i64) -> (String, Value) {
    let record: Value = sqlx::query_scalar("select machine from workdo.workflows where id = $1")
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("machine");
    (
        record["state"].as_str().unwrap_or_default().to_string(),
        record["variables"].clone(),
    )
}

/// What `sql` counts for job `id` (its `$1`).
pub async fn count(t: &TestDb, sql: &str, id: i64) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("count")
}
