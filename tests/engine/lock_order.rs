//! Lock order: whatever locks several rows of steps and workflows takes steps before workflows,
//! each in id order (ARCHITECTURE.md), so that runtimes' commits, deletes and lease renewals
//! (tests/engine/leases.rs) never wait for each other in a circle. Each test holds the row a writer
//! takes first, lets the writer wait for it, then takes the rows the writer must not be holding;
//! the last one lets a delete the database aborts for a start's sake run again. Two plain SQL
//! callers of `workdo.apply` finishing one step at once both commit.

use crate::support;

use std::time::Duration;

use support::db;
use workdo::store::StartRequest;

const FAN: &str =
    "name: fanWF\nsteps:\n  - { name: a }\n  - { name: b }\n  - { name: c, prereqs: [a, b] }\n";

/// `fanWF` loaded and started on `objects`; the workflows started.
async fn fan_started(t: &support::TestDb, objects: &[&str]) -> Vec<workdo::store::Started> {
    support::load(&t.store, "fan.yaml", FAN).await;
    t.store
        .workflow_start(&StartRequest::new("fanWF", objects))
        .await
        .expect("start fanWF")
}

/// A batch's commit locks its steps, then the dependants it counts down, then their workflows,
/// each in id order, as every commit locks steps. Two runtimes' batches holding the same steps
/// (a stale result and the fresh one of a step whose lease expired) used to lock them in the
/// order their results arrived, and could deadlock: a second of both completers stalled, then
/// one batch aborted and retried. Here another "commit" holds the first row, the batch (its
/// results given in descending id order) waits for it, and the commit then takes every other
/// row: the batch must be holding none of them.
#[tokio::test]
async fn a_batch_locks_steps_dependants_and_workflows_in_id_order() {
    let t = db().await;
    let objects: Vec<String> = (0..40).map(|i| format!("obj:f{i}")).collect();
    fan_started(&t, &objects.iter().map(String::as_str).collect::<Vec<_>>()).await;
    // Enough other steps that the plans are what they are in production: steps found by their
    // primary key in the order given (in a small table they are read in physical order).
    support::load(
        &t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - { name: x }\n",
    )
    .await;
    let mut filler = StartRequest::new("oneWF", &[]);
    filler.objects = (0..20_000).map(|i| format!("obj:x{i}")).collect();
    t.store.workflow_start(&filler).await.expect("start filler");
    for table in ["steps", "workflows"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("analyze workdo.{table}")))
            .execute(t.pool())
            .await
            .expect("analyze");
    }
    let ids = |sql: &'static str| {
        let pool = t.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_all(&pool)
                .await
                .expect("ids")
        }
    };
    // The `a` steps' own rows.
    let a = ids("select id from workdo.steps where name = 'a' order by id").await;
    hold_the_first_then_take_the_rest(&t, "steps", &a, "a").await;
    // The `b` steps' completions ready every `c`: the dependants' locks.
    let c = ids("select id from workdo.steps where name = 'c' order by id").await;
    hold_the_first_then_take_the_rest(&t, "steps", &c, "b").await;
    // The `c` steps' completions complete the workflows: their locks.
    let workflows =
        ids("select id from workdo.workflows where template = 'fanWF' order by id").await;
    hold_the_first_then_take_the_rest(&t, "workflows", &workflows, "c").await;
    assert_eq!(
        support::count(
            t.pool(),
            "select count(*) from workdo.workflows where template = 'fanWF' and status = 'completed'"
        )
        .await,
        40
    );
}

/// Commit the completions of every `step` of fanWF in one batch, given in descending id order,
/// while another transaction holds the first of `rows` (of `table`) and, once the batch waits
/// for it, takes the others.
async fn hold_the_first_then_take_the_rest(
    t: &support::TestDb,
    table: &str,
    rows: &[i64],
    step: &str,
) {
    use workdo::model::status::Status;
    use workdo::store::Change;
    assert_eq!(rows.len(), 40);
    let claimed = t
        .store
        .step_claim("fanWF", step, None, 40, "test", Duration::from_secs(60))
        .await
        .expect("claim");
    let mut changes: Vec<Change> = claimed
        .iter()
        .map(|c| {
            let mut ch = Change::new(c.id, Status::Completed, "completed");
            ch.lease = Some(c.lease_token);
            ch
        })
        .collect();
    changes.sort_by_key(|c| std::cmp::Reverse(c.id));
    let mut commit = t.pool().begin().await.expect("begin");
    lock_timeout(&mut commit, "10s").await;
    let lock = format!("select 1 from workdo.{table} where id = any($1) order by id for update");
    sqlx::query(sqlx::AssertSqlSafe(lock.clone()))
        .bind(&rows[..1])
        .execute(&mut *commit)
        .await
        .expect("lock the first");
    let (store, pool) = (t.store.clone(), t.pool().clone());
    let batch =
        tokio::spawn(async move { support::engine::commit(&store, &pool, &changes, "test").await });
    support::wait_for("the batch to wait for the first row", 30, || async {
        support::lock_waiters(t.pool()).await == 1
    })
    .await;
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .bind(&rows[1..])
        .execute(&mut *commit)
        .await
        .expect("the commit takes the rest without a deadlock");
    commit.commit().await.expect("commit");
    let applied = batch.await.expect("joined").expect("the batch commits");
    assert_eq!(applied.changed.len(), 40);
}

/// Deleting an object, its workflows, or a workflow locks the workflows' steps (in id order)
/// before the workflows, as a commit does. A delete that took the workflow row first (the
/// object's cascade, or the workflow's own delete) and its steps after (their trigger)
/// deadlocked with a commit holding one of those steps and then counting the workflow down.
#[tokio::test]
async fn a_delete_locks_steps_before_their_workflows() {
    let t = db().await;
    support::load(&t.store, "fan.yaml", FAN).await;
    for (i, how) in ["object", "workflows of the object", "workflow by id"]
        .iter()
        .enumerate()
    {
        let object = format!("obj:del{i}");
        let started = t
            .store
            .workflow_start(&StartRequest::new("fanWF", &[object.as_str()]))
            .await
            .expect("start");
        let workflow = started[0].workflow_id;
        // A commit in progress holds the workflow's last step and will want the workflow.
        let mut commit = t.pool().begin().await.expect("begin");
        lock_timeout(&mut commit, "10s").await;
        sqlx::query("select 1 from workdo.steps where workflow_id = $1 and name = 'c' for update")
            .bind(workflow)
            .execute(&mut *commit)
            .await
            .expect("lock the step");
        let (store, o) = (t.store.clone(), object.clone());
        let delete = tokio::spawn(async move {
            match i {
                0 => store.object_delete(&o, "test").await.map(|_| 1),
                1 => store.workflow_delete(&o, Some("fanWF"), None, "test").await,
                _ => store
                    .workflow_delete_by_id(workflow, "test")
                    .await
                    .map(|_| 1),
            }
        });
        support::wait_for("the delete to wait for the step", 30, || async {
            support::lock_waiters(t.pool()).await == 1
        })
        .await;
        // The workflow must be free at once. Were the delete holding it, Postgres's deadlock
        // check (a second into the delete's wait) would abort the delete, which runs again
        // and succeeds: the commit's short wait is what tells the two apart.
        lock_timeout(&mut commit, "500ms").await;
        sqlx::query("select 1 from workdo.workflows where id = $1 for update")
            .bind(workflow)
            .execute(&mut *commit)
            .await
            .unwrap_or_else(|e| panic!("{how}: the commit takes the workflow: {e}"));
        commit.commit().await.expect("commit");
        let deleted = delete.await.expect("joined").expect("deleted");
        assert_eq!(deleted, 1, "{how}");
        let left: i64 = sqlx::query_scalar(
            "select (select count(*) from workdo.workflows where id = $1)
                  + (select count(*) from workdo.steps where workflow_id = $1)",
        )
        .bind(workflow)
        .fetch_one(t.pool())
        .await
        .expect("count");
        assert_eq!(left, 0, "{how}: the workflow and its steps are gone");
    }
}

/// On a database whose sessions default to REPEATABLE READ (the CLI then deletes at it), an
/// object deleted while a start commits a workflow on it: the workflows' cascade fails with a
/// serialization error (the new workflow is not in the delete's snapshot), and the delete, run
/// again, takes that workflow too instead of failing.
#[tokio::test]
async fn an_object_delete_at_repeatable_read_takes_a_workflow_started_meanwhile() {
    let t = db().await;
    fan_started(&t, &["obj:rr"]).await;
    support::load(
        &t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - { name: x }\n",
    )
    .await;
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(t.pool())
        .await
        .expect("name");
    let sql =
        format!("alter database \"{name}\" set default_transaction_isolation = 'repeatable read'");
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(t.pool())
        .await
        .expect("alter");
    let rr_pool = workdo::store::db::connect(&t.url, 2)
        .await
        .expect("connect");
    let rr = workdo::store::Store::new(rr_pool.clone());
    let level: String = sqlx::query_scalar("show transaction_isolation")
        .fetch_one(&rr_pool)
        .await
        .expect("level");
    assert_eq!(level, "repeatable read");
    // A start in progress: it holds the object and has inserted its workflow.
    let mut start = t.pool().begin().await.expect("begin");
    t.store
        .workflow_start_in(&mut start, &StartRequest::new("oneWF", &["obj:rr"]))
        .await
        .expect("start in a transaction");
    let store = rr.clone();
    let delete = tokio::spawn(async move { store.object_delete("obj:rr", "test").await });
    support::wait_for("the delete to wait for the start", 30, || async {
        support::lock_waiters(t.pool()).await == 1
    })
    .await;
    start.commit().await.expect("commit the start");
    delete
        .await
        .expect("joined")
        .expect("the delete, run again, commits");
    assert_eq!(
        support::count(
            t.pool(),
            "select (select count(*) from workdo.workflows where object_id = 'obj:rr')
                  + (select count(*) from workdo.steps where object_id = 'obj:rr')"
        )
        .await,
        0
    );
}

/// How long the rest of `tx` waits for a lock before it fails.
async fn lock_timeout(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, how_long: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "set local lock_timeout = '{how_long}'"
    )))
    .execute(&mut **tx)
    .await
    .expect("lock_timeout");
}

/// `workdo.apply` with one step `$1` set to `$2` (no lease), as a plain SQL caller writes it.
const APPLY_ONE: &str = "select count(*) from workdo.apply(
    p_ids => array[$1]::bigint[], p_statuses => array[$2]::text[],
    p_notes => array[null]::text[], p_messages => array[null]::text[],
    p_texts => array[null]::text[], p_lifecycles => array[null]::text[],
    p_elapsed => array[null]::float8[], p_due => array[null]::timestamptz[],
    p_attempts => array[0], p_reset => array[false], p_leases => array[null]::uuid[],
    p_events => array['set'], p_details => array['{}'::jsonb], p_actor => 'sql')";

/// Found by a helper: two plain SQL callers of `workdo.apply` finishing the same step at once
/// (neither locking it first, as the CLI does). The second waits for the first's lock, then
/// finds the step finished; Postgres computed its new row from the version its snapshot saw
/// (no `finished_at`) and checked the constraints on that before computing it again from the
/// finished one, so it failed `steps_check` (a finished step has a `finished_at`). Now it
/// commits, and the step keeps the time it first finished.
#[tokio::test]
async fn a_step_finished_by_two_sql_callers_at_once_keeps_its_first_finish() {
    let t = db().await;
    fan_started(&t, &["obj:twice"]).await;
    let id: i64 = sqlx::query_scalar("select id from workdo.steps where name = 'c'")
        .fetch_one(t.pool())
        .await
        .expect("c");
    for (first, second) in [("completed", "completed"), ("skipped", "completed")] {
        sqlx::query(APPLY_ONE)
            .bind(id)
            .bind("waiting")
            .execute(t.pool())
            .await
            .expect("back to waiting");
        let mut one = t.pool().begin().await.expect("begin");
        sqlx::query(APPLY_ONE)
            .bind(id)
            .bind(first)
            .execute(&mut *one)
            .await
            .expect("the first finishes it");
        let pool = t.pool().clone();
        let other = tokio::spawn(async move {
            sqlx::query(APPLY_ONE)
                .bind(id)
                .bind(second)
                .execute(&pool)
                .await
        });
        support::wait_for("the second caller to wait for the first", 30, || async {
            support::lock_waiters(t.pool()).await == 1
        })
        .await;
        one.commit().await.expect("commit the first");
        let finished: chrono::DateTime<chrono::Utc> =
            sqlx::query_scalar("select finished_at from workdo.steps where id = $1")
                .bind(id)
                .fetch_one(t.pool())
                .await
                .expect("first finish");
        other
            .await
            .expect("joined")
            .unwrap_or_else(|e| panic!("{first} then {second}: {e}"));
        let (status, kept): (String, chrono::DateTime<chrono::Utc>) =
            sqlx::query_as("select status, finished_at from workdo.steps where id = $1")
                .bind(id)
                .fetch_one(t.pool())
                .await
                .expect("step");
        assert_eq!(
            (status.as_str(), kept),
            (second, finished),
            "{first} then {second}"
        );
    }
}

/// Found by a helper: a start that raises an object's version locks the object, then the older
/// workflows' steps; a runtime's commit locks a step, then updates its object (a function's
/// effects). When the two meet, Postgres aborts the one that waited first to break the
/// deadlock: here the start, which is then run again instead of failing its caller.
#[tokio::test]
async fn a_start_aborted_by_a_deadlock_is_run_again() {
    let t = db().await;
    fan_started(&t, &["obj:dead"]).await;
    // The runtime's commit: a step of the object's workflow first.
    let mut commit = t.pool().begin().await.expect("begin");
    lock_timeout(&mut commit, "10s").await;
    sqlx::query(
        "select 1 from workdo.steps where object_id = 'obj:dead' and name = 'a' for update",
    )
    .execute(&mut *commit)
    .await
    .expect("lock a step");
    let store = t.store.clone();
    let start = tokio::spawn(async move {
        let mut v2 = StartRequest::new("fanWF", &["obj:dead"]);
        v2.version = Some(2);
        store.workflow_start(&v2).await
    });
    support::wait_for("the start to wait for the step", 30, || async {
        support::lock_waiters(t.pool()).await == 1
    })
    .await;
    // Then its object, which the start holds: a deadlock, which the start (waiting longer)
    // is aborted to break.
    sqlx::query("update workdo.objects set updated_at = now() where id = 'obj:dead'")
        .execute(&mut *commit)
        .await
        .expect("the commit takes the object once the start is aborted");
    commit.commit().await.expect("commit");
    let started = start
        .await
        .expect("joined")
        .expect("the start is run again and commits");
    assert_eq!(started.len(), 1);
    let versions: Vec<(i32, bool)> = sqlx::query_as(
        "select version, active from workdo.workflows where object_id = 'obj:dead' order by version",
    )
    .fetch_all(t.pool())
    .await
    .expect("workflows");
    assert_eq!(versions, vec![(1, false), (2, true)]);
}
