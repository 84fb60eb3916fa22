//! What the engine records: one completion and a batch record the same, events carry each
//! change with its detail, and two changes of one step in a batch apply the last once.

use crate::support;

use chrono::Utc;
use support::engine::{LEASE, WF, commit, load_one_step, recorded};
use support::{GOOGLE_XML, db, event_kinds, load};
use workdo::model::status::Status;
use workdo::store::{Applied, Change, SetRequest, StartRequest, StepFilter, Store};

/// What one path reported for one step: old and new status, the steps made ready, and whether
/// the workflow completed.
type Report = (String, String, Vec<String>, bool);

fn report_of(applied: &Applied, step: i64, workflow: i64) -> Report {
    let (old, new) = applied
        .changed
        .iter()
        .find(|(id, _, _)| *id == step)
        .map(|(_, old, new)| (old.clone(), new.clone()))
        .unwrap_or_else(|| panic!("step {step} not changed: {applied:?}"));
    let mut ready: Vec<String> = applied
        .ready
        .iter()
        .filter(|(w, _)| *w == workflow)
        .map(|(_, name)| name.clone())
        .collect();
    ready.sort();
    (
        old,
        new,
        ready,
        applied.completed_workflows.contains(&workflow),
    )
}

/// A single completion under lease goes through `workdo.complete_one`, a batch through
/// `workdo.apply_batch` (migrations/0007). The same DAG run both ways must leave the same
/// steps, workflow, events and milestones, and report the same.
#[tokio::test]
async fn one_completion_and_a_batch_record_the_same() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    // Count PL/pgSQL calls (on connections opened from now on), to know which path ran.
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(t.pool())
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "alter database \"{name}\" set track_functions = 'pl'"
    )))
    .execute(t.pool())
    .await
    .unwrap();
    // Results go through `store`, on one connection of its own; everything else through t.store.
    let pool = workdo::store::db::connect(&t.url, 1).await.unwrap();
    let store = Store::new(pool.clone());
    t.store
        .workflow_start(&StartRequest::new(WF, &["one:1", "batch:1", "batch:2"]))
        .await
        .unwrap();

    let mut singles = Vec::new();
    let mut batched = Vec::new();
    loop {
        let names: Vec<String> = sqlx::query_scalar(
            "select distinct name from workdo.steps where status = 'ready' order by name",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if names.is_empty() {
            break;
        }
        for name in names {
            let claimed = t
                .store
                .step_claim(WF, &name, None, 10, "w", LEASE)
                .await
                .unwrap();
            assert_eq!(claimed.len(), 3, "{name} is ready for all three objects");
            let change = |c: &workdo::store::Claimed| {
                let mut ch = Change::new(c.id, Status::Completed, "completed");
                ch.lease = Some(c.lease_token);
                ch.note = Some(format!("did {name}"));
                ch.detail = serde_json::json!({ "output": name });
                ch
            };
            let (one, two): (Vec<_>, Vec<_>) = claimed.iter().partition(|c| c.object_id == "one:1");
            let a = commit(&store, &pool, &[change(one[0])], "w").await.unwrap();
            let b = commit(
                &store,
                &pool,
                &two.iter().map(|c| change(c)).collect::<Vec<_>>(),
                "w",
            )
            .await
            .unwrap();
            assert!(a.lost.is_empty() && b.lost.is_empty());
            singles.push(report_of(&a, one[0].id, one[0].workflow_id));
            let b1 = two.iter().find(|c| c.object_id == "batch:1").unwrap();
            batched.push(report_of(&b, b1.id, b1.workflow_id));
        }
    }
    assert_eq!(singles.len(), 8, "every step but the bootstrap ran");
    assert_eq!(singles, batched);
    assert!(
        singles.last().is_some_and(|(_, _, _, done)| *done),
        "the last completion completes the workflow"
    );
    assert_eq!(
        recorded(&pool, "one:1").await,
        recorded(&pool, "batch:1").await
    );

    sqlx::query("select pg_stat_force_next_flush()")
        .execute(&pool)
        .await
        .unwrap();
    let calls: Vec<(String, i64)> = sqlx::query_as(
        "select funcname::text, calls from pg_stat_user_functions
          where schemaname = 'workdo' and funcname in ('complete_one', 'apply_batch') order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        calls,
        vec![
            ("apply_batch".to_string(), 8),
            ("complete_one".to_string(), 8)
        ]
    );
}

/// kind, status, attempt, actor, detail
type EventRow = (
    String,
    Option<String>,
    Option<i32>,
    String,
    serde_json::Value,
);

#[tokio::test]
async fn events_record_each_change_with_its_detail() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    t.store
        .workflow_start(&StartRequest::new(WF, &["obj:e"]))
        .await
        .unwrap();
    let mut req = SetRequest::new("obj:e", WF, "descriptive-metadata", "error");
    req.note = Some("looked at it".into());
    req.error_message = Some("MODS missing".into());
    t.store.step_set(&req).await.unwrap();
    // A worker's deferral: its own detail, merged with what the change says.
    let claimed = {
        t.store
            .step_set(&SetRequest::new(
                "obj:e",
                WF,
                "descriptive-metadata",
                "waiting",
            ))
            .await
            .unwrap();
        t.store
            .step_claim(WF, "descriptive-metadata", None, 1, "w", LEASE)
            .await
            .unwrap()
    };
    let due = Utc::now() + chrono::Duration::hours(1);
    let mut change = Change::new(claimed[0].id, Status::Scheduled, "deferred");
    change.lease = Some(claimed[0].lease_token);
    change.run_at = Some(due);
    change.detail = serde_json::json!({ "worker": "w", "attempt": 1 });
    commit(&t.store, t.pool(), &[change], "w").await.unwrap();

    let events: Vec<EventRow> = sqlx::query_as(
        "select kind, status, attempt, actor, coalesce(detail, 'null') from workdo.events
              where object_id = 'obj:e' and step = 'descriptive-metadata' order by id",
    )
    .fetch_all(t.pool())
    .await
    .unwrap();
    let (kind, status, attempt, actor, detail) = &events[0];
    assert_eq!(
        (kind.as_str(), status.as_deref()),
        ("status_set", Some("error"))
    );
    assert_eq!((*attempt, actor.as_str()), (Some(1), "workdo"));
    assert_eq!(
        detail,
        &serde_json::json!({"from": "ready", "note": "looked at it", "message": "MODS missing"})
    );
    let (kind, status, _, actor, detail) = events.last().unwrap();
    assert_eq!(
        (kind.as_str(), status.as_deref()),
        ("deferred", Some("scheduled"))
    );
    assert_eq!(actor, "w");
    assert_eq!(detail["worker"], "w");
    assert_eq!(detail["from"], "started");
    let at: chrono::DateTime<Utc> = detail["run_at"].as_str().unwrap().parse().unwrap();
    assert!((at - due).num_milliseconds().abs() < 1, "{at} vs {due}");
    assert!(
        detail.get("message").is_none(),
        "no message, no key: {detail}"
    );

    // The dependants and the workflow are recorded too, after the step that moved them.
    let skip = StepFilter {
        objects: vec!["obj:e".into()],
        ..Default::default()
    };
    t.store.steps_skip(&skip, "test").await.unwrap();
    let tail: Vec<String> = sqlx::query_scalar(
        "select kind from workdo.events where object_id = 'obj:e' order by id desc limit 1",
    )
    .fetch_all(t.pool())
    .await
    .unwrap();
    assert_eq!(tail, vec!["workflow_completed"]);
}

#[tokio::test]
async fn two_changes_for_one_step_in_a_batch_apply_the_last_once() {
    let t = db().await;
    load_one_step(&t.store).await;
    t.store
        .workflow_start(&StartRequest::new("oneWF", &["obj:d"]))
        .await
        .unwrap();
    let c = t
        .store
        .step_claim("oneWF", "work", None, 1, "w", LEASE)
        .await
        .unwrap()
        .remove(0);
    let mut first = Change::new(c.id, Status::Error, "failed");
    first.lease = Some(c.lease_token);
    let mut last = Change::new(c.id, Status::Completed, "completed");
    last.lease = Some(c.lease_token);
    let applied = commit(&t.store, t.pool(), &[first, last], "w")
        .await
        .unwrap();
    assert_eq!(
        applied.changed,
        vec![(c.id, "started".into(), "completed".into())]
    );
    assert_eq!(
        event_kinds(t.pool(), "obj:d", "work").await,
        vec!["completed"]
    );
}

/// Events written together keep their own details, whether the details repeat (sent once and
/// found by position) or are many and distinct (sent row by row): thirty objects registered in
/// one call, each with properties of its own, then thirty with the same properties.
#[tokio::test]
async fn events_written_together_keep_their_own_details() {
    let t = db().await;
    for (prefix, distinct) in [("obj:d", true), ("obj:s", false)] {
        let objects: Vec<workdo::store::NewObject> = (0..30)
            .map(|i| workdo::store::NewObject {
                id: format!("{prefix}{i}"),
                properties: [(
                    "n".to_string(),
                    serde_json::json!(if distinct { i } else { 7 }),
                )]
                .into_iter()
                .collect(),
                documents: Default::default(),
            })
            .collect();
        t.store.objects_put(&objects, "test").await.expect("put");
        let details: Vec<(String, serde_json::Value)> = sqlx::query_as(
            "select object_id, detail from workdo.events
              where kind = 'object_registered' and object_id like $1 order by id",
        )
        .bind(format!("{prefix}%"))
        .fetch_all(t.pool())
        .await
        .expect("events");
        assert_eq!(details.len(), 30);
        for (object, detail) in details {
            let i: i64 = object[prefix.len()..].parse().expect("a number");
            let n = if distinct { i } else { 7 };
            assert_eq!(
                detail["properties"]["n"],
                serde_json::json!(n),
                "{object}: {detail}"
            );
        }
    }
}
