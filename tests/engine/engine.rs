//! The core engine against a real Postgres: readiness, claims, leases, re-creation, versions.

use crate::support;

use support::engine::{LEASE, WF, commit, complete, load_one_step, recorded, status_of, statuses};
use support::{GOOGLE_XML, db, load};
use workdo::model::status::Status;
use workdo::store::{Change, SetRequest, StartRequest, StepFilter, StoreError};

#[tokio::test]
async fn google_dag_fans_out_and_in_and_completes() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let started = t
        .store
        .workflow_start(&StartRequest::new(WF, &["druid:bb123cd4567"]))
        .await
        .expect("start");
    assert_eq!(started[0].ready, vec!["descriptive-metadata"]);
    let s = statuses(t.pool(), "druid:bb123cd4567", WF).await;
    assert_eq!(s.len(), 9, "one step per process");
    assert_eq!(status_of(&s, "register-object"), "completed");
    assert_eq!(status_of(&s, "descriptive-metadata"), "ready");
    assert_eq!(status_of(&s, "google-convert"), "waiting");

    // Fan-out: both parallel steps become ready together.
    let mut next = complete(&t.store, "druid:bb123cd4567", "descriptive-metadata").await;
    next.sort();
    assert_eq!(next, vec!["google-convert", "google-download"]);
    // Fan-in: process-content needs both.
    assert!(
        complete(&t.store, "druid:bb123cd4567", "google-convert")
            .await
            .is_empty()
    );
    let s = statuses(t.pool(), "druid:bb123cd4567", WF).await;
    assert_eq!(status_of(&s, "process-content"), "waiting");
    assert_eq!(
        complete(&t.store, "druid:bb123cd4567", "google-download").await,
        vec!["process-content"]
    );
    let mut next = complete(&t.store, "druid:bb123cd4567", "process-content").await;
    next.sort();
    assert_eq!(next, vec!["publish", "shelve"]);
    complete(&t.store, "druid:bb123cd4567", "shelve").await;
    assert_eq!(
        complete(&t.store, "druid:bb123cd4567", "publish").await,
        vec!["sdr-ingest-transfer"]
    );
    complete(&t.store, "druid:bb123cd4567", "sdr-ingest-transfer").await;
    let wf_status: String = sqlx::query_scalar("select status from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .unwrap();
    assert_eq!(wf_status, "active", "cleanup is still to do");
    complete(&t.store, "druid:bb123cd4567", "cleanup").await;
    let (wf_status, unfinished): (String, i32) =
        sqlx::query_as("select status, unfinished from workdo.workflows")
            .fetch_one(t.pool())
            .await
            .unwrap();
    assert_eq!((wf_status.as_str(), unfinished), ("completed", 0));

    // Milestones: the bootstrap step's at start, then each completed step's.
    let names: Vec<String> = t
        .store
        .milestones("druid:bb123cd4567")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(
        names,
        vec![
            "registered",
            "inprocess",
            "released",
            "published",
            "archived",
            "accessioned"
        ]
    );
    let kinds: Vec<String> = sqlx::query_scalar(
        "select kind from workdo.events where kind in ('workflow_started', 'workflow_completed') order by id",
    )
    .fetch_all(t.pool())
    .await
    .unwrap();
    assert_eq!(kinds, vec!["workflow_started", "workflow_completed"]);
}

#[tokio::test]
async fn pending_counter_matches_prerequisites_after_reopening() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    t.store
        .workflow_start(&StartRequest::new(WF, &["druid:aa111bb2222"]))
        .await
        .unwrap();
    complete(&t.store, "druid:aa111bb2222", "descriptive-metadata").await;
    // Reopen a prerequisite: its dependants leave the queue again.
    t.store
        .step_set(&SetRequest::new(
            "druid:aa111bb2222",
            WF,
            "descriptive-metadata",
            "waiting",
        ))
        .await
        .unwrap();
    let s = statuses(t.pool(), "druid:aa111bb2222", WF).await;
    assert_eq!(status_of(&s, "descriptive-metadata"), "ready");
    assert_eq!(status_of(&s, "google-convert"), "waiting");
    // The invariant, checked against a recount from scratch for every step.
    let wrong: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps s
          where s.pending <> (select count(*) from workdo.steps p
                               where p.workflow_id = s.workflow_id and p.name = any(s.prereqs)
                                 and p.status not in ('completed', 'skipped'))",
    )
    .fetch_one(t.pool())
    .await
    .unwrap();
    assert_eq!(wrong, 0);
}

/// The rows' invariants hold against any writer, a person's SQL included: each bad value below
/// is refused by the database (SQLSTATE 23514, a check violation) and changes nothing. One
/// column's rules are domains, the rules that tie columns together are table CHECKs
/// (migrations/0009); both are covered.
#[tokio::test]
async fn the_database_refuses_rows_that_break_the_invariants() {
    let t = db().await;
    load_one_step(&t.store).await;
    t.store
        .workflow_start(&StartRequest::new("oneWF", &["obj:inv"]))
        .await
        .unwrap();
    let before = recorded(t.pool(), "obj:inv").await;
    for change in [
        "update workdo.steps set attempts = -1",
        "update workdo.steps set pending = -1",
        "update workdo.steps set max_attempts = 0",
        "update workdo.steps set status = 'not a status!'",
        "update workdo.steps set status = ''",
        "update workdo.steps set status = 'completed'",
        "update workdo.steps set lease_token = gen_random_uuid()",
        "update workdo.workflows set unfinished = -1",
        "update workdo.workflows set unfinished = 0",
        "update workdo.workflows set status = 'paused'",
        "update workdo.workflows set context = '[1]'",
        "update workdo.workflows set version = 0",
        "insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts)
         select workflow_id, object_id, template, version, lane, 'extra', 'ready', 0 from workdo.steps",
    ] {
        let e = sqlx::query(sqlx::AssertSqlSafe(change))
            .execute(t.pool())
            .await
            .expect_err(change);
        let code = e.as_database_error().and_then(|d| d.code().map(|c| c.into_owned()));
        assert_eq!(code.as_deref(), Some("23514"), "{change}: {e}");
    }
    assert_eq!(recorded(t.pool(), "obj:inv").await, before);
    // Built-in statuses skip the pattern; custom names still go through it.
    for (status, ok) in [
        ("IN PROCESS", true),
        ("v1.2-final_b", true),
        ("retrying", true),
        ("1st", false),
        ("a/b", false),
    ] {
        let cast = sqlx::query("select $1::text::workdo.status_name")
            .bind(status)
            .execute(t.pool())
            .await;
        assert_eq!(cast.is_ok(), ok, "{status}: {cast:?}");
    }
}

#[tokio::test]
async fn restarting_a_workflow_replaces_its_steps() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let o = "druid:cc333dd4444";
    t.store
        .workflow_start(&StartRequest::new(WF, &[o]))
        .await
        .unwrap();
    complete(&t.store, o, "descriptive-metadata").await;
    let again = t
        .store
        .workflow_start(&StartRequest::new(WF, &[o]))
        .await
        .unwrap();
    assert!(again[0].replaced);
    let n: i64 = sqlx::query_scalar("select count(*) from workdo.steps where object_id = $1")
        .bind(o)
        .fetch_one(t.pool())
        .await
        .unwrap();
    assert_eq!(n, 9, "steps replaced, never duplicated");
    let s = statuses(t.pool(), o, WF).await;
    assert_eq!(status_of(&s, "descriptive-metadata"), "ready");
    assert_eq!(status_of(&s, "google-convert"), "waiting");
}

#[tokio::test]
async fn a_new_object_version_retires_the_old_steps_from_queues() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let o = "druid:dd444ee5555";
    t.store
        .workflow_start(&StartRequest::new(WF, &[o]))
        .await
        .unwrap();
    let mut v2 = StartRequest::new(WF, &[o]);
    v2.version = Some(2);
    t.store.workflow_start(&v2).await.unwrap();
    let rows: Vec<(i32, bool, i64)> = sqlx::query_as(
        "select version, active, count(*) from workdo.steps where object_id = $1 group by 1, 2 order by 1",
    )
    .bind(o)
    .fetch_all(t.pool())
    .await
    .unwrap();
    assert_eq!(rows, vec![(1, false, 9), (2, true, 9)]);
    let q = t
        .store
        .queue_waiting(WF, "descriptive-metadata", &[], None, 10)
        .await
        .unwrap();
    assert_eq!(q.len(), 1);
    assert_eq!(q[0].version, 2);
    let claimed = t
        .store
        .step_claim(WF, "descriptive-metadata", None, 10, "w", LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].version, 2);
}

#[tokio::test]
async fn current_status_precondition_and_bad_status_change_nothing() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let o = "druid:ee555ff6666";
    t.store
        .workflow_start(&StartRequest::new(WF, &[o]))
        .await
        .unwrap();
    let mut req = SetRequest::new(o, WF, "descriptive-metadata", "completed");
    req.current_status = Some("started".into());
    let err = t.store.step_set(&req).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::StatusMismatch { expected, actual, .. } if expected == "started" && actual == "waiting"),
        "{err}"
    );
    let bad = t
        .store
        .step_set(&SetRequest::new(
            o,
            WF,
            "descriptive-metadata",
            "IN PROCESS",
        ))
        .await
        .unwrap_err();
    assert!(matches!(bad, StoreError::InvalidStatus { .. }), "{bad}");
    let missing = t
        .store
        .step_set(&SetRequest::new(o, WF, "no-such-step", "completed"))
        .await
        .unwrap_err();
    assert!(
        matches!(missing, StoreError::UnknownStep { .. }),
        "{missing}"
    );
    let s = statuses(t.pool(), o, WF).await;
    assert_eq!(status_of(&s, "descriptive-metadata"), "ready");
    let events: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'status_set'")
            .fetch_one(t.pool())
            .await
            .unwrap();
    assert_eq!(events, 0);
    // With the right precondition (WorkDo clients say "waiting" for queued steps) it applies.
    req.current_status = Some("waiting".into());
    t.store.step_set(&req).await.unwrap();
}

#[tokio::test]
async fn declared_intermediate_status_and_lifecycle_on_update() {
    let t = db().await;
    load(
        &t.store,
        "cat.yaml",
        "name: catalogWF\nsteps:\n  - name: catalog\n    statuses: [IN PROCESS]\n  - name: done\n    prereqs: [catalog]\n",
    )
    .await;
    let o = "druid:ff666gg7777";
    t.store
        .workflow_start(&StartRequest::new("catalogWF", &[o]))
        .await
        .unwrap();
    let out = t
        .store
        .step_set(&SetRequest::new(o, "catalogWF", "catalog", "IN PROCESS"))
        .await
        .unwrap();
    assert_eq!(out.step.status, "IN PROCESS");
    let mut req = SetRequest::new(o, "catalogWF", "catalog", "completed");
    req.lifecycle = Some("described".into());
    let out = t.store.step_set(&req).await.unwrap();
    assert_eq!(out.next_steps, vec!["done"]);
    let names: Vec<String> = t
        .store
        .milestones(o)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, vec!["registered", "described"]);
}

#[tokio::test]
async fn error_counts_attempts_and_retry_puts_it_back() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let o = "druid:gg777hh8888";
    t.store
        .workflow_start(&StartRequest::new(WF, &[o]))
        .await
        .unwrap();
    let mut err = SetRequest::new(o, WF, "descriptive-metadata", "error");
    err.error_message = Some("catalogue unavailable".into());
    let out = t.store.step_set(&err).await.unwrap();
    assert_eq!(out.step.attempts, 1);
    assert_eq!(
        out.step.error_message.as_deref(),
        Some("catalogue unavailable")
    );
    let errors = t
        .store
        .queue_errors(WF, "descriptive-metadata", 10)
        .await
        .unwrap();
    assert_eq!(errors.len(), 1);
    let n = t
        .store
        .steps_retry(
            &StepFilter {
                objects: vec![o.into()],
                ..Default::default()
            },
            "test",
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let s = statuses(t.pool(), o, WF).await;
    assert_eq!(status_of(&s, "descriptive-metadata"), "ready");
    // Completing clears the old error message.
    let done = t
        .store
        .step_set(&SetRequest::new(o, WF, "descriptive-metadata", "completed"))
        .await
        .unwrap();
    assert_eq!(done.step.error_message, None);
}

#[tokio::test]
async fn skip_all_finishes_the_workflow_in_one_transaction() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let o = "druid:hh888jj9999";
    t.store
        .workflow_start(&StartRequest::new(WF, &[o]))
        .await
        .unwrap();
    let n = t
        .store
        .workflow_skip_all(o, WF, None, "test")
        .await
        .unwrap();
    assert_eq!(n, 8, "every unfinished step");
    let (status, unfinished): (String, i32) =
        sqlx::query_as("select status, unfinished from workdo.workflows where object_id = $1")
            .bind(o)
            .fetch_one(t.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), unfinished), ("completed", 0));
}

#[tokio::test]
async fn unknown_template_and_bad_input_are_refused_whole() {
    let t = db().await;
    let err = t
        .store
        .workflow_start(&StartRequest::new("noSuchWF", &["obj:1"]))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownTemplate(_)), "{err}");
    load_one_step(&t.store).await;
    let err = t
        .store
        .workflow_start(&StartRequest::new("oneWF", &["obj:ok", "has space"]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("object id"), "{err}");
    let n: i64 = sqlx::query_scalar("select count(*) from workdo.objects")
        .fetch_one(t.pool())
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing partial written");
}

#[tokio::test]
async fn results_apply_only_under_their_lease_and_ready_the_next_steps() {
    let t = db().await;
    load(
        &t.store,
        "two.yaml",
        "name: twoWF\nsteps:\n  - name: a\n  - { name: b, prereqs: [a] }\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("twoWF", &["obj:1", "obj:2"]))
        .await
        .unwrap();
    let claimed = t
        .store
        .step_claim("twoWF", "a", None, 10, "w", LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(
        claimed[0].properties,
        serde_json::json!({}),
        "inputs come with the claim"
    );

    // One result still holds its lease; the other's lease was taken away from outside.
    sqlx::query("update workdo.steps set lease_token = gen_random_uuid() where id = $1")
        .bind(claimed[1].id)
        .execute(t.pool())
        .await
        .unwrap();
    let changes: Vec<Change> = claimed
        .iter()
        .map(|c| {
            let mut ch = Change::new(c.id, Status::Completed, "completed");
            ch.lease = Some(c.lease_token);
            ch
        })
        .collect();
    let applied = commit(&t.store, t.pool(), &changes, "w").await.unwrap();
    assert_eq!(applied.lost, vec![claimed[1].id]);
    assert_eq!(applied.changed.len(), 1);
    // The dependant made ready by the result that held its lease is the one to claim.
    let next = t
        .store
        .step_claim("twoWF", "b", None, 10, "w", LEASE)
        .await
        .unwrap();
    let objects: Vec<&str> = next.iter().map(|c| c.object_id.as_str()).collect();
    assert_eq!(objects, vec![claimed[0].object_id.as_str()]);
    assert_eq!(next[0].name, "b");

    // A result without a lease is refused before anything changes.
    let err = commit(
        &t.store,
        t.pool(),
        &[Change::new(next[0].id, Status::Completed, "completed")],
        "w",
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("lease"), "{err}");
}

#[tokio::test]
async fn deleting_a_workflow_or_its_object_deletes_its_steps() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    t.store
        .workflow_start(&StartRequest::new(WF, &["obj:a", "obj:b", "obj:c"]))
        .await
        .unwrap();
    let steps_of = |object: &'static str| {
        let pool = t.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("select count(*) from workdo.steps where object_id = $1")
                .bind(object)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(steps_of("obj:a").await, 9);
    let n = t
        .store
        .workflow_delete("obj:a", Some(WF), None, "test")
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(steps_of("obj:a").await, 0);
    // Plain SQL on the object cascades to its workflows, and from them to their steps.
    sqlx::query("delete from workdo.objects where id = 'obj:b'")
        .execute(t.pool())
        .await
        .unwrap();
    assert_eq!(steps_of("obj:b").await, 0);
    assert_eq!(steps_of("obj:c").await, 9, "other objects keep theirs");
}

/// A saved template's `edges` (which steps each step's completion counts down) are its
/// prerequisites turned around, for every version saved, and are what dependants are found by.
#[tokio::test]
async fn saved_templates_record_each_steps_dependants() {
    let t = db().await;
    load(&t.store, "google.xml", GOOGLE_XML).await;
    let template = t.store.template_current(WF).await.unwrap();
    let mut expected: Vec<(String, String)> = template
        .spec
        .steps
        .iter()
        .flat_map(|s| s.prereqs.iter().map(|p| (p.clone(), s.name.clone())))
        .collect();
    expected.sort();
    assert!(expected.len() >= 9, "the DAG has fan-out and fan-in");
    let edges: Vec<(String, String)> = sqlx::query_as(
        "select step, dependant from workdo.edges where template_id = $1 order by 1, 2",
    )
    .bind(template.id)
    .fetch_all(t.pool())
    .await
    .unwrap();
    assert_eq!(edges, expected);

    // A second version gets its own edges; the first keeps its.
    let v2 = GOOGLE_XML.replace(
        "<prereq>google-download</prereq>",
        "<prereq>google-download</prereq><prereq>descriptive-metadata</prereq>",
    );
    assert_ne!(v2, GOOGLE_XML);
    load(&t.store, "google-v2.xml", &v2).await;
    let current = t.store.template_current(WF).await.unwrap();
    assert_ne!(current.id, template.id);
    let count = |id: i64| {
        let pool = t.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("select count(*) from workdo.edges where template_id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(count(template.id).await, expected.len() as i64);
    assert_eq!(count(current.id).await, expected.len() as i64 + 1);
}

#[tokio::test]
async fn a_template_without_steps_loads_and_its_workflows_are_completed_at_once() {
    // The workflow service keeps `workflow-def`s without processes "for indexing"; a folder of
    // its templates must load whole.
    let t = db().await;
    load(
        &t.store,
        "swIndexWF.xml",
        r#"<workflow-def id="swIndexWF" repository="dor"></workflow-def>"#,
    )
    .await;
    let listed: Vec<String> = t
        .store
        .template_list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert!(listed.contains(&"swIndexWF".to_string()), "{listed:?}");
    let started = t
        .store
        .workflow_start(&StartRequest::new("swIndexWF", &["druid:bb123cd4567"]))
        .await
        .unwrap();
    assert_eq!(started.len(), 1);
    let (status, unfinished): (String, i32) =
        sqlx::query_as("select status, unfinished from workdo.workflows where id = $1")
            .bind(started[0].workflow_id)
            .fetch_one(t.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), unfinished), ("completed", 0));
}
