//! Step counts kept by triggers (migrations/0014): after a mixed, concurrent workload the
//! overview's counts equal a direct count of the steps, and the throughput table holds exactly
//! the completions and failures that happened.

use crate::support;

use std::time::Duration;

use chrono::Utc;
use support::counts::{marks, overview, scanned};
use support::{GOOGLE_XML, db, load};
use workdo::model::status::Status;
use workdo::store::{Change, Dispatch, SetRequest, StartRequest, StepFilter, StepResult, Store};

const WF: &str = "googleScannedBookWF";
const LEASE: Duration = Duration::from_secs(60);

/// One worker: claim whatever is ready, fail every 5th step once (retrying, due at once) and
/// every 7th for good (error), complete the rest; until nothing is ready or due. Returns
/// (completions, failures) as the commits reported them.
async fn work(store: Store, pool: sqlx::PgPool, me: usize) -> (i64, i64) {
    let (mut done, mut failed) = (0, 0);
    loop {
        store.steps_promote_due(1000).await.expect("promote");
        let names: Vec<String> = sqlx::query_scalar(
            "select distinct name from workdo.steps
              where template = $1 and active and status in ('ready', 'retrying')",
        )
        .bind(WF)
        .fetch_all(&pool)
        .await
        .expect("ready names");
        if names.is_empty() {
            return (done, failed);
        }
        for name in names {
            let claimed = store
                .step_claim(WF, &name, None, 4, &format!("w{me}"), LEASE)
                .await
                .expect("claim");
            let mut results = Vec::new();
            for c in &claimed {
                let mut ch = if c.id % 7 == 0 {
                    Change::new(c.id, Status::Error, "failed")
                } else if c.id % 5 == 0 && c.attempts == 1 {
                    let mut r = Change::new(c.id, Status::Retrying, "failed");
                    r.run_at = Some(Utc::now());
                    r
                } else {
                    Change::new(c.id, Status::Completed, "completed")
                };
                ch.lease = Some(c.lease_token);
                results.push(StepResult {
                    change: ch,
                    object_id: c.object_id.clone(),
                    workflow_id: c.workflow_id,
                    effects: Default::default(),
                });
            }
            // Unlike the runtime's completers, which own an object's results each, these
            // workers may hold steps of one workflow at once and deadlock: Postgres aborts
            // one, which commits nothing and tries again, as a completer does.
            let applied = loop {
                match store.results_commit(&results, &format!("w{me}")).await {
                    Ok(a) => break a,
                    Err(e) if e.to_string().contains("deadlock") => continue,
                    Err(e) => panic!("commit: {e}"),
                }
            };
            for (_, _, to) in &applied.changed {
                match to.as_str() {
                    "completed" => done += 1,
                    "error" | "retrying" => failed += 1,
                    _ => {}
                }
            }
        }
    }
}

#[tokio::test]
async fn counts_equal_a_scan_after_a_mixed_concurrent_workload() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    load(
        &t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - name: work\n",
    )
    .await;
    let objects: Vec<String> = (0..40).map(|i| format!("obj:{i}")).collect();
    let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new(WF, &refs))
        .await
        .expect("start");
    let mut later = StartRequest::new("oneWF", &refs[..10]);
    later.start_at = Some(Utc::now() + chrono::Duration::hours(1));
    t.store.workflow_start(&later).await.expect("start later");
    assert_eq!(overview(&t.store).await, scanned(t.pool()).await);

    // Three workers at once, while the counts are folded and read, priorities set by SQL and
    // new object versions started (deactivating the old workflows).
    let workers: Vec<_> = (0..3)
        .map(|me| tokio::spawn(work(t.store.clone(), t.pool.clone(), me)))
        .collect();
    for round in 0..10 {
        t.store.step_counts_rollup().await.expect("fold");
        if round == 3 {
            // A step inserted by hand (not counted by its statement): counted afresh by a
            // fold while the workers' deltas keep coming.
            sqlx::query(
                "insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts, pending)
                 select workflow_id, object_id, template, version, lane, 'by-hand', 'waiting', 3, 1
                   from workdo.steps where object_id = 'obj:39' and name = 'register-object' and active",
            )
            .execute(t.pool())
            .await
            .expect("insert by hand");
        }
        loop {
            let set = sqlx::query("update workdo.steps set priority = $1 where object_id = $2")
                .bind(round as i32)
                .bind(format!("obj:{}", 20 + round))
                .execute(t.pool())
                .await;
            match set {
                Ok(_) => break,
                Err(e) if e.to_string().contains("deadlock") => continue,
                Err(e) => panic!("priority by SQL: {e}"),
            }
        }
        let mut v2 = StartRequest::new(WF, &[objects[30 + round].as_str()]);
        v2.version = Some(2);
        loop {
            match t.store.workflow_start(&v2).await {
                Ok(_) => break,
                Err(e) if e.to_string().contains("deadlock") => continue,
                Err(e) => panic!("start version 2: {e}"),
            }
        }
        let _ = overview(&t.store).await;
    }
    let (mut done, mut failed) = (0, 0);
    for w in workers {
        let (d, f) = w.await.expect("worker");
        done += d;
        failed += f;
    }
    // Finish the version-2 workflows too, then people act: retry errors, skip, complete by
    // hand, delete a workflow and an object.
    let (d, f) = work(t.store.clone(), t.pool.clone(), 9).await;
    done += d;
    failed += f;
    let errors = StepFilter {
        template: Some(WF.into()),
        ..Default::default()
    };
    let retried = t.store.steps_retry(&errors, "admin").await.expect("retry");
    assert!(retried > 0, "some steps ended in error");
    let skip = StepFilter {
        objects: vec!["obj:1".into()],
        status: Some("ready".into()),
        ..Default::default()
    };
    t.store.steps_skip(&skip, "admin").await.expect("skip");
    let (object, step): (String, String) = sqlx::query_as(
        "select object_id, name from workdo.steps
          where template = $1 and active and status = 'ready' order by id limit 1",
    )
    .bind(WF)
    .fetch_one(t.pool())
    .await
    .expect("a retried step is ready");
    t.store
        .step_set(&SetRequest::new(&object, WF, &step, "completed"))
        .await
        .expect("complete by hand");
    done += 1;
    t.store
        .object_delete("obj:3", "admin")
        .await
        .expect("delete object");
    assert_eq!(overview(&t.store).await, scanned(t.pool()).await);

    // Folded or not, the reading is the same; everything counted was done in this test.
    t.store.step_counts_rollup().await.expect("fold");
    assert_eq!(overview(&t.store).await, scanned(t.pool()).await);
    let (c, f): (i64, i64) = sqlx::query_as(
        "select coalesce(sum(completed), 0)::bigint, coalesce(sum(failed), 0)::bigint
           from workdo.step_throughput where template = $1",
    )
    .bind(WF)
    .fetch_one(t.pool())
    .await
    .expect("throughput");
    assert!(
        done > 100 && failed > 10,
        "{done} completions, {failed} failures"
    );
    assert_eq!((c, f), (done, failed));
    let per_minute = t.store.throughput(60).await.expect("throughput");
    assert_eq!(per_minute.iter().map(|m| m.completed).sum::<i64>(), done);

    // A truncate (a test's reset, an operator's) empties the counts with the steps.
    sqlx::query("truncate workdo.steps")
        .execute(t.pool())
        .await
        .expect("truncate");
    assert!(overview(&t.store).await.is_empty());
}

/// `workdo serve` alone (robots updating steps through the API, no runtime) folds the deltas,
/// so they do not pile up while nobody reads the overview.
#[tokio::test]
async fn serve_alone_folds_the_deltas() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    t.store
        .workflow_start(&StartRequest::new(WF, &["obj:served"]))
        .await
        .expect("start");
    let unfolded = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i64>("select count(*) from workdo.step_count_deltas")
            .fetch_one(&pool)
            .await
            .expect("count deltas")
    };
    assert!(unfolded(t.pool.clone()).await > 0, "starting wrote deltas");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let mut serve =
        support::spawn_workdo(&t.url, &["serve", "--listen", &format!("127.0.0.1:{port}")]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while unfolded(t.pool.clone()).await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "workdo serve never folded the deltas"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(overview(&t.store).await, scanned(t.pool()).await);
}

/// The engine's inserts of steps count themselves (engine 22): starts small and large, a
/// generator's subnet and a machine's call leave exact deltas and no recount mark; an insert
/// by hand leaves a mark, and the next fold counts the steps afresh.
#[tokio::test]
async fn inserts_count_themselves_and_others_are_recounted() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let composing = "name: genWF\nsteps:\n  - name: look\n    observe: { document: d, rules: [{ match: '//a', op: add, generator: g, bricklets: [x] }] }\n  - { name: g, prereqs: [look], generate: { refset: [x], rules: [{ parallel: x }] } }\n  - { name: after, prereqs: [g], function: { builtin: noop } }\nbricklets:\n  - { name: x, steps: [{ name: run, function: { builtin: noop } }] }\n";
    load(&t.store, "gen.yaml", composing).await;
    let machine = "name: callWF\nkind: machine\ninitial: Wait\nstates:\n  Wait:\n    on:\n      go: { to: Checking, actions: [ { call: check } ] }\n  Checking:\n    on:\n      checked: Done\n  Done: { final: true }\nfunctions:\n  check: { builtin: noop }\n";
    load(&t.store, "call.yaml", machine).await;

    // One workflow (counted by the insert itself) and forty (by the first one's rows).
    t.store
        .workflow_start(&StartRequest::new(WF, &["obj:alone"]))
        .await
        .expect("start one");
    let many: Vec<String> = (0..40).map(|i| format!("obj:many{i}")).collect();
    let mut req = StartRequest::new(WF, &[]);
    req.objects = many;
    t.store.workflow_start(&req).await.expect("start forty");

    // A generator composes three instances.
    support::put_document(&t, "obj:gen", "d", "<d><a/><a/><a/></d>").await;
    t.store
        .workflow_start(&StartRequest::new("genWF", &["obj:gen"]))
        .await
        .expect("start genWF");
    let finish = |c: &workdo::store::Claimed, dispatch: Dispatch| {
        let effects = workdo::store::Effects {
            dispatch: Some(dispatch),
            ..Default::default()
        };
        support::result_for(c, Status::Completed, "completed", effects)
    };
    let look = t
        .store
        .step_claim("genWF", "look", None, 1, "test", LEASE)
        .await
        .expect("claim look");
    let matched = workdo::model::dispatch::RuleMatch {
        rule: 0,
        op: workdo::model::spec::Op::Add,
        generator: "g".into(),
        bricklets: vec!["x".into()],
        fragments: 3,
        matched: vec![Some("<a/>".into()); 3],
        present: None,
    };
    let observed = Dispatch::Observed {
        observer: "look".into(),
        matches: vec![matched],
    };
    t.store
        .results_commit(&[finish(&look[0], observed)], "test")
        .await
        .expect("observed");
    let g = t
        .store
        .step_claim("genWF", "g", None, 1, "test", LEASE)
        .await
        .expect("claim g");
    let compose = Dispatch::Compose {
        generator: "g".into(),
    };
    t.store
        .results_commit(&[finish(&g[0], compose)], "test")
        .await
        .expect("composed");
    let generated: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where object_id = 'obj:gen' and generated is not null",
    )
    .fetch_one(t.pool())
    .await
    .expect("generated");
    assert_eq!(generated, 3, "the subnet was composed");

    // A machine's transition calls a function: a step of its own.
    t.store
        .workflow_start(&StartRequest::new("callWF", &["obj:call"]))
        .await
        .expect("start callWF");
    let job = t
        .store
        .machine_job("obj:call", "callWF")
        .await
        .expect("job");
    t.store
        .machine_signal(job, "go", &serde_json::json!({}), "test")
        .await
        .expect("go");

    assert_eq!(
        marks(t.pool()).await,
        0,
        "every engine insert counted itself"
    );
    assert_eq!(overview(&t.store).await, scanned(t.pool()).await);
    let calls = overview(&t.store)
        .await
        .into_iter()
        .filter(|(tpl, step, _, _)| tpl == "callWF" && step == "call/check")
        .count();
    assert_eq!(calls, 1, "the call step is counted");

    // By hand: marked. A reader counts by a scan while the mark waits (exact all the same, and
    // no recount on a request's time); the maintenance loop's fold counts afresh.
    sqlx::query(
        "insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts, pending)
         select workflow_id, object_id, template, version, lane, 'by-hand', 'waiting', 3, 1
           from workdo.steps where object_id = 'obj:alone' and name = 'register-object'",
    )
    .execute(t.pool())
    .await
    .expect("insert by hand");
    assert_eq!(marks(t.pool()).await, 1);
    let by_hand = |counted: &[(String, String, String, i64)]| {
        counted
            .iter()
            .any(|(_, step, status, n)| step == "by-hand" && status == "waiting" && *n == 1)
    };
    let counted = overview(&t.store).await;
    assert_eq!(counted, scanned(t.pool()).await);
    assert!(by_hand(&counted), "{counted:?}");
    assert_eq!(marks(t.pool()).await, 1, "a reader does not recount");
    let stored: i64 =
        sqlx::query_scalar("select count(*) from workdo.step_counts where name = 'by-hand'")
            .fetch_one(t.pool())
            .await
            .expect("stored counts");
    assert_eq!(stored, 0, "not in the stored counts before the recount");

    // The maintenance loop's fold counts afresh.
    t.store.step_counts_rollup().await.expect("fold");
    assert_eq!(marks(t.pool()).await, 0, "the fold took the mark");
    let counted = overview(&t.store).await;
    assert!(by_hand(&counted), "{counted:?}");
    assert_eq!(counted, scanned(t.pool()).await);
}

/// A reader does not fold a backlog of deltas for everyone (issue 47 item 18): past 10,000
/// delta rows (a bulk change with no runtime folding) `status` reads the deltas with the counts
/// and leaves the folding to the maintenance loop; the counts it shows are the same.
#[tokio::test]
async fn a_reader_leaves_a_large_backlog_of_deltas_to_maintenance() {
    let t = support::db().await;
    support::load(
        &t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - { name: a }\n",
    )
    .await;
    sqlx::query(
        "insert into workdo.step_count_deltas (template, name, status, n, first_id)
         select 'oneWF', 'a', 'waiting', 1, g
           from generate_series(1, 12001) g",
    )
    .execute(t.pool())
    .await
    .expect("a backlog");
    let facets = t.store.facets(Some("oneWF")).await.expect("facets");
    let waiting: i64 = facets
        .iter()
        .filter(|f| f.step == "a" && f.status == "waiting")
        .map(|f| f.count)
        .sum();
    assert_eq!(
        waiting, 12_001,
        "the deltas are read with the counts: {facets:?}"
    );
    let left: i64 = sqlx::query_scalar("select count(*) from workdo.step_count_deltas")
        .fetch_one(t.pool())
        .await
        .expect("deltas");
    assert!(
        left > 10_000,
        "the reader folded the backlog itself ({left} left)"
    );
    t.store
        .step_counts_rollup()
        .await
        .expect("maintenance folds");
    let left: i64 = sqlx::query_scalar("select count(*) from workdo.step_count_deltas")
        .fetch_one(t.pool())
        .await
        .expect("deltas");
    assert_eq!(left, 0);
}
