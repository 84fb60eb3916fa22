//! Queues and claims: priority then age, lanes, priority injected by SQL, future-dated starts,
//! the WorkDo queue query, expired leases, and many claimers taking each step once.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use support::engine::{LEASE, WF, commit, complete, load_one_step, status_of, statuses};
use support::{GOOGLE_XML, db, load};
use workdo::store::StartRequest;

#[tokio::test]
async fn claims_follow_priority_then_age_and_honour_lanes() {
    let t = db().await;
    load_one_step(&t.store).await;
    for (object, priority, lane) in [
        ("obj:low", 0, "default"),
        ("obj:high", 10, "default"),
        ("obj:mid", 5, "default"),
        ("obj:bulk", 100, "bulk"),
    ] {
        let mut req = StartRequest::new("oneWF", &[object]);
        req.priority = priority;
        req.lane = lane.into();
        t.store.workflow_start(&req).await.unwrap();
    }
    let default_lane: Vec<String> = t
        .store
        .step_claim("oneWF", "work", Some("default"), 10, "w1", LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.object_id)
        .collect();
    assert_eq!(default_lane, vec!["obj:high", "obj:mid", "obj:low"]);
    let rest = t
        .store
        .step_claim("oneWF", "work", None, 10, "w1", LEASE)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].object_id, "obj:bulk");
    assert_eq!(rest[0].attempts, 1, "a claim is an attempt");
}

#[tokio::test]
async fn priority_injection_by_sql_changes_the_next_claim() {
    let t = db().await;
    load_one_step(&t.store).await;
    let objects: Vec<String> = (0..5).map(|i| format!("obj:{i}")).collect();
    let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("oneWF", &refs))
        .await
        .unwrap();
    let changed: i32 = sqlx::query_scalar("select workdo.prioritize(100, object_id => 'obj:3')")
        .fetch_one(t.pool())
        .await
        .unwrap();
    assert_eq!(changed, 1);
    // The plain UPDATE documented in docs/sql.md works just as well.
    sqlx::query("update workdo.steps set priority = 50 where object_id = 'obj:4'")
        .execute(t.pool())
        .await
        .unwrap();
    let order: Vec<String> = t
        .store
        .step_claim("oneWF", "work", None, 3, "w", LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.object_id)
        .collect();
    assert_eq!(order, vec!["obj:3", "obj:4", "obj:0"]);
    let logged: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'prioritized'")
            .fetch_one(t.pool())
            .await
            .unwrap();
    assert_eq!(logged, 1);
}

#[tokio::test]
async fn future_start_is_invisible_until_due() {
    let t = db().await;
    load_one_step(&t.store).await;
    let mut later = StartRequest::new("oneWF", &["obj:later"]);
    later.start_at = Some(Utc::now() + chrono::Duration::hours(1));
    t.store.workflow_start(&later).await.unwrap();
    let mut soon = StartRequest::new("oneWF", &["obj:soon"]);
    let due = Utc::now() + chrono::Duration::milliseconds(300);
    soon.start_at = Some(due);
    t.store.workflow_start(&soon).await.unwrap();

    let s = statuses(t.pool(), "obj:later", "oneWF").await;
    assert_eq!(status_of(&s, "work"), "scheduled");
    assert!(
        t.store
            .step_claim("oneWF", "work", None, 10, "w", LEASE)
            .await
            .unwrap()
            .is_empty(),
        "nothing is due yet"
    );
    let facets = t.store.facets(Some("oneWF")).await.unwrap();
    assert_eq!(facets.len(), 1);
    assert_eq!(
        (facets[0].status.as_str(), facets[0].count),
        ("scheduled", 2)
    );
    // Poll the promoter until the soon one is due: it is promoted, the later one is not.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let claimed = loop {
        t.store.steps_promote_due(100).await.unwrap();
        let c = t
            .store
            .step_claim("oneWF", "work", None, 10, "w", LEASE)
            .await
            .unwrap();
        if !c.is_empty() {
            break c;
        }
        assert!(std::time::Instant::now() < deadline, "never became due");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(Utc::now() >= due, "claimed before its start time");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].object_id, "obj:soon");
    let why = t.store.why("obj:later", "oneWF", "work").await.unwrap();
    assert!(
        why.reasons[0].starts_with("scheduled: not before"),
        "{:?}",
        why.reasons
    );
}

#[tokio::test]
async fn workdo_queue_query_with_completed_prerequisites() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    t.store
        .workflow_start(&StartRequest::new(
            WF,
            &[
                "druid:qq111qq1111",
                "druid:qq222qq2222",
                "druid:qq333qq3333",
            ],
        ))
        .await
        .unwrap();
    complete(&t.store, "druid:qq111qq1111", "descriptive-metadata").await;
    complete(&t.store, "druid:qq111qq1111", "google-convert").await;
    complete(&t.store, "druid:qq222qq2222", "descriptive-metadata").await;
    let completed = vec![
        (WF.to_string(), "descriptive-metadata".to_string()),
        (WF.to_string(), "google-convert".to_string()),
    ];
    let q = t
        .store
        .queue_waiting(WF, "google-download", &completed, None, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = q.iter().map(|e| e.object_id.as_str()).collect();
    assert_eq!(ids, vec!["druid:qq111qq1111"]);
    let q = t
        .store
        .queue_waiting(WF, "google-download", &completed[..1], None, 10)
        .await
        .unwrap();
    let mut ids: Vec<&str> = q.iter().map(|e| e.object_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, vec!["druid:qq111qq1111", "druid:qq222qq2222"]);
}

#[tokio::test]
async fn expired_leases_return_to_the_queue_then_error_at_the_limit() {
    let t = db().await;
    load(
        &t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - name: work\n    error-limit: 2\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("oneWF", &["obj:lease"]))
        .await
        .unwrap();
    let expire = |pool: &PgPool| {
        let pool = pool.clone();
        async move {
            sqlx::query("update workdo.steps set lease_expires_at = now() - interval '1 second' where lease_token is not null")
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let first = t
        .store
        .step_claim("oneWF", "work", None, 1, "dead-worker", LEASE)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        t.store.steps_sweep_leases(100).await.unwrap(),
        0,
        "lease still valid"
    );
    expire(t.pool()).await;
    assert_eq!(t.store.steps_sweep_leases(100).await.unwrap(), 1);
    let s = statuses(t.pool(), "obj:lease", "oneWF").await;
    assert_eq!(status_of(&s, "work"), "ready");
    // A late result under the old lease is dropped.
    let mut late = workdo::store::Change::new(first[0].id, workdo::Status::Completed, "completed");
    late.lease = Some(first[0].lease_token);
    let applied = commit(&t.store, t.pool(), &[late], "test").await.unwrap();
    assert_eq!(applied.lost, vec![first[0].id], "lost lease reported");
    assert!(applied.changed.is_empty(), "nothing applied");
    let second = t
        .store
        .step_claim("oneWF", "work", None, 1, "dead-again", LEASE)
        .await
        .unwrap();
    assert_eq!(second[0].attempts, 2);
    expire(t.pool()).await;
    t.store.steps_sweep_leases(100).await.unwrap();
    let why = t.store.why("obj:lease", "oneWF", "work").await.unwrap();
    assert_eq!(why.step.status, "error");
    assert!(
        why.step
            .error_message
            .as_deref()
            .unwrap_or("")
            .contains("lease of dead-again expired"),
        "{:?}",
        why.step.error_message
    );
}

#[tokio::test]
async fn many_concurrent_claimers_claim_each_step_exactly_once() {
    let t = db().await;
    load_one_step(&t.store).await;
    const N: usize = 10_000;
    let objects: Vec<String> = (0..N).map(|i| format!("obj:{i:05}")).collect();
    for chunk in objects.chunks(2_000) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        t.store
            .workflow_start(&StartRequest::new("oneWF", &refs))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = t.store.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            // Half claim one at a time (a statement of its own, migrations/0008), half 50.
            let limit = if w % 2 == 0 { 1 } else { 50 };
            loop {
                let batch = store
                    .step_claim("oneWF", "work", None, limit, &format!("w{w}"), LEASE)
                    .await
                    .expect("claim");
                if batch.is_empty() {
                    break mine;
                }
                mine.extend(batch.into_iter().map(|c| c.id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    assert_eq!(all.len(), N, "every step claimed");
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(unique.len(), N, "no step claimed twice");
    let started: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where status = 'started' and attempts = 1",
    )
    .fetch_one(t.pool())
    .await
    .unwrap();
    assert_eq!(started as usize, N);
}

/// `queue … --completed …` reads the live rows of its step, not its history (issue 47: 2.9 s
/// with 10 M events): with 3,000 finished workflows and 10 unfinished, the read's scan of the
/// step finds the 10 through the partial indexes and filters out no finished row.
#[tokio::test]
async fn the_queue_read_does_not_walk_finished_steps() {
    let t = db().await;
    load(
        &t.store,
        "two.yaml",
        "name: twoWF\nsteps:\n  - { name: a }\n  - { name: b, prereqs: [a] }\n",
    )
    .await;
    let objects: Vec<String> = (0..3010).map(|i| format!("obj:hist{i}")).collect();
    let ids: Vec<&str> = objects.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("twoWF", &ids))
        .await
        .expect("start");
    // History: all but ten finished (as archiving has not yet taken them).
    sqlx::query(
        "update workdo.steps set status = 'completed', finished_at = now(), pending = 0
          where template = 'twoWF' and object_id not in (select id from workdo.objects order by id limit 10)",
    )
    .execute(t.pool())
    .await
    .expect("finish");
    sqlx::query("analyze workdo.steps")
        .execute(t.pool())
        .await
        .expect("analyze");
    let sql = format!(
        "explain (analyze, format json) {}",
        workdo::store::queue_sql("b", true, false)
    );
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind("twoWF")
        .bind("b")
        .bind(None::<String>)
        .bind(Vec::<String>::new())
        .bind(Vec::<String>::new())
        .bind(100_i64)
        .bind(None::<serde_json::Value>)
        .fetch_one(t.pool())
        .await
        .expect("explain");
    // Every node that reads the queue's own step rows (alias `s`), and what it threw away: the
    // ten unfinished `b` rows all pass (no completed scope here), so anything removed is history.
    fn scans(node: &serde_json::Value, out: &mut Vec<(String, i64)>) {
        if node["Alias"] == "s" {
            let removed = node["Rows Removed by Filter"].as_i64().unwrap_or(0)
                + node["Rows Removed by Index Recheck"].as_i64().unwrap_or(0);
            out.push((
                node["Node Type"].as_str().unwrap_or("").to_string(),
                removed,
            ));
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            scans(child, out);
        }
    }
    let mut found = Vec::new();
    scans(&plan[0]["Plan"], &mut found);
    assert!(!found.is_empty(), "{plan}");
    assert!(
        found
            .iter()
            .all(|(kind, removed)| kind != "Seq Scan" && *removed < 10),
        "the queue read walked finished steps: {found:?}\n{plan}"
    );
    // And the answer: b is waiting for a on the ten unfinished objects, none has a completed.
    let rows = t
        .store
        .queue_waiting("twoWF", "b", &[("twoWF".into(), "a".into())], None, 100)
        .await
        .expect("queue");
    assert!(rows.is_empty(), "{rows:?}");
}
