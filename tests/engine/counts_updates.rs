//! Every engine path that changes a step's status or activity keeps the overview's counts exact
//! and leaves no recount mark (a mark costs a scan of every active step at the next fold), and
//! the throughput matches the history; an update by hand is counted too.

use crate::support;

use std::time::Duration;

use chrono::Utc;
use support::counts::{counted_by_their_statements, marks, overview, scanned};
use support::{GOOGLE_XML, db, load, result_for};
use workdo::model::status::Status;
use workdo::store::{Claimed, Effects, SetRequest, StartRequest, StepFilter};

const WF: &str = "googleScannedBookWF";
const LEASE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn every_engine_update_counts_itself() {
    let t = db().await;
    let (store, pool) = (&t.store, t.pool());
    load(store, "google.xml", GOOGLE_XML).await;
    let objects: Vec<String> = (0..8).map(|i| format!("obj:u{i}")).collect();
    let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
    store
        .workflow_start(&StartRequest::new(WF, &refs))
        .await
        .expect("start");
    store.step_counts_rollup().await.expect("fold");
    let first: String = sqlx::query_scalar(
        "select name from workdo.steps where object_id = 'obj:u0' and status = 'ready'
          order by id limit 1",
    )
    .fetch_one(pool)
    .await
    .expect("a ready step");

    // A worker's claim (workdo.claim), then one completion (workdo.complete_one, whose
    // dependants become ready) and a batch of them (workdo.apply_batch, its leased path).
    let claimed = store
        .step_claim(WF, &first, None, 8, "w", LEASE)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 8);
    counted_by_their_statements(store, pool, "a claim").await;
    let done = |c: &Claimed| result_for(c, Status::Completed, "completed", Effects::default());
    store
        .results_commit(&[done(&claimed[0])], "w")
        .await
        .expect("complete one");
    counted_by_their_statements(store, pool, "one completion").await;
    store
        .results_commit(&[done(&claimed[1]), done(&claimed[2])], "w")
        .await
        .expect("complete two");
    counted_by_their_statements(store, pool, "a batch of completions").await;

    // Failures (the general path): one retrying and due now, one in error; the retry comes due.
    let mut retry = result_for(&claimed[3], Status::Retrying, "failed", Effects::default());
    retry.change.run_at = Some(Utc::now());
    let error = result_for(&claimed[4], Status::Error, "failed", Effects::default());
    store
        .results_commit(&[retry, error], "w")
        .await
        .expect("fail two");
    counted_by_their_statements(store, pool, "failures").await;
    assert_eq!(store.steps_promote_due(100).await.expect("promote"), 1);
    counted_by_their_statements(store, pool, "a retry come due").await;

    // A lease that expired (its renewal's column alone is no count's business) is swept; the
    // leases a worker holds but is not running are given back.
    sqlx::query(
        "update workdo.steps set lease_expires_at = now() - interval '1 minute' where id = $1",
    )
    .bind(claimed[5].id)
    .execute(pool)
    .await
    .expect("expire a lease");
    assert_eq!(marks(pool).await, 0, "a lease's time is not counted");
    assert_eq!(store.steps_sweep_leases(100).await.expect("sweep"), 1);
    counted_by_their_statements(store, pool, "a lease swept").await;
    assert_eq!(
        store
            .steps_return_leases("w", &[claimed[7].id])
            .await
            .expect("return leases"),
        1
    );
    counted_by_their_statements(store, pool, "leases given back").await;

    // Task injection (workdo.lease) takes the step in error.
    let injected = store
        .step_claim_objects(WF, &first, &[claimed[4].object_id.clone()], "run", LEASE)
        .await
        .expect("inject");
    assert_eq!(injected.len(), 1);
    counted_by_their_statements(store, pool, "task injection").await;
    store
        .results_commit(&[done(&injected[0]), done(&claimed[7])], "run")
        .await
        .expect("complete injected");

    // People: a step set back to waiting (its dependants wait again: the count goes up), one
    // retried, one skipped; an object's new version deactivates the old workflow's steps.
    store
        .step_set(&SetRequest::new("obj:u0", WF, &first, "waiting"))
        .await
        .expect("set back");
    counted_by_their_statements(store, pool, "a step set back to waiting").await;
    let mut reset = store
        .step_claim(WF, &first, None, 8, "w", LEASE)
        .await
        .expect("claim again");
    let mut failed = result_for(
        &reset.remove(0),
        Status::Error,
        "failed",
        Effects::default(),
    );
    failed.change.error_message = Some("no disk".into());
    store.results_commit(&[failed], "w").await.expect("fail");
    let in_error = StepFilter {
        template: Some(WF.into()),
        status: Some("error".into()),
        ..Default::default()
    };
    assert_eq!(
        store.steps_retry(&in_error, "admin").await.expect("retry"),
        1
    );
    counted_by_their_statements(store, pool, "a retry").await;
    let skip = StepFilter {
        objects: vec!["obj:u2".into()],
        status: Some("ready".into()),
        ..Default::default()
    };
    assert!(store.steps_skip(&skip, "admin").await.expect("skip") > 0);
    counted_by_their_statements(store, pool, "a skip").await;
    let mut v2 = StartRequest::new(WF, &["obj:u1"]);
    v2.version = Some(2);
    store.workflow_start(&v2).await.expect("version 2");
    counted_by_their_statements(store, pool, "a new version").await;
    sqlx::query("update workdo.steps set priority = 7 where object_id = 'obj:u2'")
        .execute(pool)
        .await
        .expect("priority by SQL");
    assert_eq!(marks(pool).await, 0, "a priority is not counted");

    // The throughput holds every completion and failed attempt, as the events record them.
    store.step_counts_rollup().await.expect("fold");
    let (completed, failed): (i64, i64) = sqlx::query_as(
        "select coalesce(sum(completed), 0)::bigint, coalesce(sum(failed), 0)::bigint
           from workdo.step_throughput where template = $1",
    )
    .bind(WF)
    .fetch_one(pool)
    .await
    .expect("throughput");
    let (events_completed, events_failed): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where status = 'completed'),
                count(*) filter (where status in ('retrying', 'error'))
           from workdo.events where template = $1 and step is not null and kind <> 'prerequisites'",
    )
    .bind(WF)
    .fetch_one(pool)
    .await
    .expect("events");
    assert_eq!((completed, failed), (events_completed, events_failed));
    assert!(
        completed >= 5 && failed >= 3,
        "{completed} completed, {failed} failed"
    );
}

/// An update by hand, after a claim in the same transaction, is counted: the overview equals a
/// scan before and after the fold.
#[tokio::test]
async fn updates_by_hand_are_counted() {
    let t = db().await;
    let (store, pool) = (&t.store, t.pool());
    load(store, "google.xml", GOOGLE_XML).await;
    store
        .workflow_start(&StartRequest::new(WF, &["obj:h0", "obj:h1"]))
        .await
        .expect("start");
    store.step_counts_rollup().await.expect("fold");

    let mut tx = pool.begin().await.expect("begin");
    let claimed: i64 = sqlx::query_scalar(
        "select count(*) from workdo.claim(
             (select template from workdo.steps where status = 'ready' limit 1),
             (select name from workdo.steps where status = 'ready' order by id limit 1),
             null, 1, 'sql', 60)",
    )
    .fetch_one(&mut *tx)
    .await
    .expect("claim by SQL");
    assert_eq!(claimed, 1);
    sqlx::query(
        "update workdo.steps set status = 'skipped', finished_at = now()
          where object_id = 'obj:h1' and status = 'ready'",
    )
    .execute(&mut *tx)
    .await
    .expect("skip by hand");
    tx.commit().await.expect("commit");
    assert_eq!(overview(store).await, scanned(pool).await);
    store.step_counts_rollup().await.expect("fold");
    assert_eq!(marks(pool).await, 0);
    let stored: Vec<(String, String, String, i64)> =
        sqlx::query_as("select template, name, status, n from workdo.step_counts order by 1, 2, 3")
            .fetch_all(pool)
            .await
            .expect("stored counts");
    assert_eq!(stored, scanned(pool).await);
}
