//! Recomposition (seed 001's run-time adaption): the document changes after the generator
//! composed, the observer runs again, and the subnet follows — new instances wired to those
//! already there, a deactivated instance that had not started skipped, a finished and a running
//! one kept, the generator's dependant waiting for the new last step — exactly Listing 1 applied
//! to the new activation set; then the workflow runs to the end.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use support::{config, db, put_document, start};
use workdo::model::dispatch;
use workdo::runtime::{self, inject};
use workdo::store::{SetRequest, StartRequest, StepFilter};

const CONTENT_WF: &str = include_str!("../fixtures/contentWF.yaml");

async fn rows(t: &support::TestDb) -> BTreeMap<String, (String, i32, Vec<String>)> {
    let found: Vec<(String, String, i32, Vec<String>)> = sqlx::query_as(
        "select name, status, pending, prereqs from workdo.steps where generated is not null",
    )
    .fetch_all(t.pool())
    .await
    .expect("steps");
    found
        .into_iter()
        .map(|(n, s, p, r)| (n, (s, p, r)))
        .collect()
}

#[tokio::test]
async fn a_changed_document_recomposes_the_subnet() {
    let t = db().await;
    support::load(&t.store, "content.yaml", CONTENT_WF).await;
    let obj = "obj:r1";
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image'/><file kind='image'/><file kind='audio' n='a'/></content>",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("contentWF", &[obj]))
        .await
        .expect("start");
    support::run_step(&t, obj, "look").await;
    support::run_step(&t, obj, "gen").await;
    // One image instance finished, the audio instance running, the other image pending.
    t.store
        .step_set(&SetRequest::new(
            obj,
            "contentWF",
            "gen/img#1/run",
            "completed",
        ))
        .await
        .expect("complete img#1");
    let running = t
        .store
        .step_claim_queue(
            "contentWF:audio/run",
            None,
            1,
            "test",
            std::time::Duration::from_secs(600),
        )
        .await
        .expect("claim audio");
    assert_eq!(running.len(), 1);

    // The document changes: one image left, and the recording being worked replaced by two
    // others (undo: the compensation of the one that went away). The observer runs again.
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image'/><file kind='audio' n='b'/><file kind='audio' n='c'/></content>",
    )
    .await;
    let again = t
        .store
        .steps_again(
            &StepFilter {
                step: Some("look".into()),
                ..StepFilter::default()
            },
            "test",
        )
        .await
        .expect("again");
    assert_eq!(again, 1);
    support::run_step(&t, obj, "look").await;

    // Listing 1 applied to the new activation set.
    let loaded = workdo::model::template::parse(
        "content.yaml",
        workdo::model::template::Format::Yaml,
        CONTENT_WF,
    )
    .expect("template");
    let spec = loaded.template;
    let generate = spec
        .step("gen")
        .and_then(|s| s.generate.clone())
        .expect("generator");
    let by_name: BTreeMap<String, dispatch::Bricklet> = spec
        .bricklets
        .iter()
        .map(|b| (b.name.clone(), b.clone()))
        .collect();
    let new_set: dispatch::Actset = [("img", 1), ("audio", 2), ("audio-purge", 1)]
        .into_iter()
        .map(|(b, n)| (b.to_string(), n))
        .collect();
    let expected = dispatch::expand(
        "gen",
        &dispatch::compose(&new_set, &generate.rules),
        &by_name,
    );
    let now = rows(&t).await;
    let live: BTreeSet<&str> = now
        .iter()
        .filter(|(_, (s, _, _))| s != "skipped")
        .map(|(n, _)| n.as_str())
        .collect();
    let wanted: BTreeSet<&str> = expected.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        live, wanted,
        "the live subnet is Listing 1's for the new set"
    );
    for s in &expected {
        let (_, _, prereqs) = &now[&s.name];
        let have: BTreeSet<&String> = prereqs.iter().collect();
        let want: BTreeSet<&String> = s.prereqs.iter().collect();
        assert_eq!(have, want, "{}'s prerequisites", s.name);
    }
    // Step by step: finished and running kept; the pending image skipped; the new audio ready;
    // the purge waiting for both audio instances (one running).
    let state = |n: &str| now[n].clone();
    assert_eq!(state("gen/img#1/run").0, "completed");
    assert_eq!(state("gen/audio#1/run").0, "started");
    assert_eq!(state("gen/img#2/run").0, "skipped");
    assert_eq!(
        (
            state("gen/audio#2/run").0.as_str(),
            state("gen/audio#2/run").1
        ),
        ("ready", 0)
    );
    assert_eq!(
        (
            state("gen/audio-purge#1/run").0.as_str(),
            state("gen/audio-purge#1/run").1
        ),
        ("waiting", 2)
    );
    // The generator's dependant waits for the running audio and the new purge.
    let done: (String, i32) =
        sqlx::query_as("select status, pending from workdo.steps where name = 'done'")
            .fetch_one(t.pool())
            .await
            .expect("done");
    assert_eq!(done, ("waiting".to_string(), 2));
    let event: Value = sqlx::query_scalar(
        "select detail from workdo.events where kind = 'recomposed' and object_id = $1",
    )
    .bind(obj)
    .fetch_one(t.pool())
    .await
    .expect("recomposed event");
    assert_eq!(
        event["added"],
        json!(["gen/audio#2/run", "gen/audio-purge#1/run"])
    );
    assert_eq!(event["skipped"], json!(["gen/img#2/run"]));

    // The running audio reports back, and the rest runs to the end.
    t.store
        .step_set(&SetRequest::new(
            obj,
            "contentWF",
            "gen/audio#1/run",
            "completed",
        ))
        .await
        .expect("audio#1 done");
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    let finished: Vec<(String, String)> = sqlx::query_as(
        "select name, status from workdo.steps where status not in ('completed', 'skipped')",
    )
    .fetch_all(t.pool())
    .await
    .expect("unfinished");
    assert!(finished.is_empty(), "{finished:?}");
}

/// A sequence of one bricklet per `<item>`, then `publish`.
const SEQUENCE_WF: &str = include_str!("../fixtures/seqWF.yaml");

/// `seqWF` on `obj` with `n` items, observed and composed by hand.
async fn sequence_of(t: &support::TestDb, obj: &str, n: usize) {
    support::load(&t.store, "seq.yaml", SEQUENCE_WF).await;
    put_document(t, obj, "items", &support::items_document(n)).await;
    t.store
        .workflow_start(&StartRequest::new("seqWF", &[obj]))
        .await
        .expect("start");
    for step in ["look", "gen"] {
        support::run_step(t, obj, step).await;
    }
}

/// The document changes to `n` items and the observer runs again.
async fn observe_again(t: &support::TestDb, obj: &str, n: usize) -> Value {
    put_document(t, obj, "items", &support::items_document(n)).await;
    let filter = StepFilter {
        step: Some("look".into()),
        objects: vec![obj.into()],
        ..StepFilter::default()
    };
    assert_eq!(
        t.store.steps_again(&filter, "test").await.expect("again"),
        1
    );
    support::run_step(t, obj, "look").await;
    sqlx::query_scalar(
        "select detail from workdo.events where kind = 'recomposed' and object_id = $1
          order by id desc limit 1",
    )
    .bind(obj)
    .fetch_one(t.pool())
    .await
    .expect("recomposed event")
}

async fn claim_next(t: &support::TestDb) -> String {
    let claimed = t
        .store
        .step_claim_queue(
            "seqWF:b/work",
            None,
            1,
            "test",
            std::time::Duration::from_secs(600),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "one instance ready");
    claimed[0].name.clone()
}

/// Runs everything left, then: every step finished, and `publish` completed after every
/// instance of the sequence that completed.
async fn publish_last(t: &support::TestDb, obj: &str) {
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    let open: Vec<(String, String)> = sqlx::query_as(
        "select name, status from workdo.steps
          where object_id = $1 and status not in ('completed', 'skipped')",
    )
    .bind(obj)
    .fetch_all(t.pool())
    .await
    .expect("steps");
    assert!(
        open.is_empty(),
        "a completed workflow with open steps: {open:?}"
    );
    let order: Vec<(String, String)> = sqlx::query_as(
        "select step, kind from workdo.events
          where object_id = $1 and kind in ('completed', 'status_set') and step is not null
          order by id",
    )
    .bind(obj)
    .fetch_all(t.pool())
    .await
    .expect("events");
    let published = order
        .iter()
        .position(|(s, _)| s == "publish")
        .expect("publish completed");
    let late: Vec<&String> = order[published..]
        .iter()
        .map(|(s, _)| s)
        .filter(|s| s.starts_with("gen/"))
        .collect();
    assert!(
        late.is_empty(),
        "completed after publish: {late:?} ({order:?})"
    );
}

/// Found by a helper: shortening a sequence made `publish` wait for nothing. Its prerequisite
/// was the old last instance; skipped, it counted `publish` down to nought while the instance
/// that became last had not run.
#[tokio::test]
async fn shortening_a_sequence_makes_the_dependant_wait_for_its_new_last_step() {
    let t = db().await;
    let obj = "obj:short";
    sequence_of(&t, obj, 3).await;
    assert_eq!(claim_next(&t).await, "gen/b#1/work");
    let event = observe_again(&t, obj, 2).await;
    assert_eq!(event["skipped"], json!(["gen/b#3/work"]));
    let now = rows(&t).await;
    assert_eq!(now["gen/b#3/work"].0, "skipped");
    assert_eq!(now["gen/b#2/work"].0, "waiting");
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!(
        (publish.status.as_str(), publish.pending),
        ("waiting", 1),
        "publish waits for b#2, the new last step"
    );
    // The recomposition's statements kept the counts exact, with no recount mark.
    support::counts::counted_by_their_statements(&t.store, t.pool(), "a shortened sequence").await;
    t.store
        .step_set(&SetRequest::new(obj, "seqWF", "gen/b#1/work", "completed"))
        .await
        .expect("b#1 done");
    publish_last(&t, obj).await;
}

/// An instance no longer activated that is running is waited for: `publish` does not
/// start while it runs.
#[tokio::test]
async fn emptying_a_subnet_keeps_the_dependant_waiting_for_the_instance_still_running() {
    let t = db().await;
    let obj = "obj:empty";
    sequence_of(&t, obj, 3).await;
    assert_eq!(claim_next(&t).await, "gen/b#1/work");
    let event = observe_again(&t, obj, 0).await;
    assert_eq!(event["skipped"], json!(["gen/b#2/work", "gen/b#3/work"]));
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!((publish.status.as_str(), publish.pending), ("waiting", 1));
    assert!(publish.prereqs.contains(&"gen/b#1/work".to_string()));
    t.store
        .step_set(&SetRequest::new(obj, "seqWF", "gen/b#1/work", "completed"))
        .await
        .expect("b#1 done");
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!((publish.status.as_str(), publish.pending), ("ready", 0));
    publish_last(&t, obj).await;
}

/// Found by a helper: an instance dropped by one recomposition and activated again by the
/// next stayed skipped (it existed, so it was not added), and the workflow ended without it.
#[tokio::test]
async fn an_instance_activated_again_is_reopened_and_waited_for() {
    let t = db().await;
    let obj = "obj:again";
    sequence_of(&t, obj, 3).await;
    observe_again(&t, obj, 2).await;
    assert_eq!(rows(&t).await["gen/b#3/work"].0, "skipped");
    let event = observe_again(&t, obj, 3).await;
    assert_eq!(event["reopened"], json!(["gen/b#3/work"]));
    assert_eq!(event["added"], json!([]));
    let now = rows(&t).await;
    assert_eq!(
        (now["gen/b#3/work"].0.as_str(), now["gen/b#3/work"].1),
        ("waiting", 1),
        "b#3 waits for b#2 again"
    );
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!(
        (publish.status.as_str(), publish.pending),
        ("waiting", 2),
        "publish waits for b#2 and b#3"
    );
    let unfinished: i32 =
        sqlx::query_scalar("select unfinished from workdo.workflows where object_id = $1")
            .bind(obj)
            .fetch_one(t.pool())
            .await
            .expect("workflow");
    assert_eq!(unfinished, 4, "three instances and publish");
    publish_last(&t, obj).await;
    assert_eq!(rows(&t).await["gen/b#3/work"].0, "completed");
}

/// Found by a helper: `publish` running when the subnet grew under it, then released (its
/// attempt failed, or its lease expired), ran again at once without the new instances. It now
/// counts them while it runs, and waits for them when it is put back.
#[tokio::test]
async fn a_running_dependant_put_back_waits_for_instances_added_under_it() {
    use workdo::model::status::Status;
    use workdo::store::Effects;
    let t = db().await;
    let obj = "obj:under";
    let claimed = publish_running_when_the_subnet_grows(&t, obj).await;
    // Its attempt ends without completing: back to the queue, which it may not enter yet.
    let released = support::result_for(&claimed, Status::Waiting, "released", Effects::default());
    t.store
        .results_commit(&[released], "test")
        .await
        .expect("release");
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!((publish.status.as_str(), publish.pending), ("waiting", 1));
    publish_last(&t, obj).await;
}

/// `seqWF` with one item done and `publish` running (claimed here) when the document grows to
/// three: `publish` counts the two instances added under it.
async fn publish_running_when_the_subnet_grows(
    t: &support::TestDb,
    obj: &str,
) -> workdo::store::Claimed {
    sequence_of(t, obj, 1).await;
    t.store
        .step_set(&SetRequest::new(obj, "seqWF", "gen/b#1/work", "completed"))
        .await
        .expect("b#1 done");
    let claimed = support::claim_step(t, "seqWF", obj, "publish").await;
    let event = observe_again(t, obj, 3).await;
    assert_eq!(event["added"], json!(["gen/b#2/work", "gen/b#3/work"]));
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!((publish.status.as_str(), publish.pending), ("started", 1));
    support::counts::counted_by_their_statements(&t.store, t.pool(), "a grown subnet").await;
    claimed
}

/// Found by a review: a dependant in error that a recomposition made wait is not taken by
/// `workdo run` (task injection) either, until what it waits for is done.
#[tokio::test]
async fn a_dependant_in_error_that_waits_is_not_injected() {
    use workdo::model::status::Status;
    use workdo::store::Effects;
    let t = db().await;
    let obj = "obj:inject";
    let claimed = publish_running_when_the_subnet_grows(&t, obj).await;
    let failed = support::result_for(&claimed, Status::Error, "failed", Effects::default());
    t.store
        .results_commit(&[failed], "test")
        .await
        .expect("fail");
    let publish = support::step(t.pool(), obj, "publish").await;
    assert_eq!((publish.status.as_str(), publish.pending), ("error", 1));
    let bindings = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let b = bindings
        .iter()
        .find(|b| b.step == "publish")
        .expect("binding");
    let ran = inject::run_now(&t.store, b, &config(), &[obj.to_string()])
        .await
        .expect("run");
    assert!(ran.is_empty(), "publish was injected while it waits");
    assert_eq!(
        support::step(t.pool(), obj, "publish").await.status,
        "error"
    );
}

/// Found by a helper: an observer that was its workflow's last unfinished step, run again
/// (`retry --again`) on a document that adds instances, completed the workflow for an instant
/// before the instances reopened it — a parent machine was told its child was done. The
/// observation now goes in before the observer's completion.
#[tokio::test]
async fn an_observer_finishing_last_does_not_complete_the_workflow_it_grows() {
    let t = db().await;
    let obj = "obj:last";
    sequence_of(&t, obj, 1).await;
    t.store
        .step_set(&SetRequest::new(obj, "seqWF", "gen/b#1/work", "completed"))
        .await
        .expect("b#1 done");
    support::run_step(&t, obj, "publish").await;
    let completed = |t: &support::TestDb| {
        let pool = t.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "select count(*) from workdo.events
                  where object_id = $1 and kind = 'workflow_completed'",
            )
            .bind(obj)
            .fetch_one(&pool)
            .await
            .expect("events")
        }
    };
    assert_eq!(completed(&t).await, 1, "the workflow ran to the end once");
    let event = observe_again(&t, obj, 3).await;
    assert_eq!(event["added"], json!(["gen/b#2/work", "gen/b#3/work"]));
    assert_eq!(completed(&t).await, 1, "never completed on the way");
    // `publish` finished before the subnet grew, and stays finished; the rest runs.
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    assert_eq!(completed(&t).await, 2);
}

/// Found by a review: a dependant scheduled for later (deferred) that a recomposition made
/// wait lost its time; it keeps it now, and is not queued before the new instances finish.
#[tokio::test]
async fn a_scheduled_dependant_keeps_its_time_while_it_waits() {
    let t = db().await;
    let obj = "obj:later";
    sequence_of(&t, obj, 1).await;
    t.store
        .step_set(&SetRequest::new(obj, "seqWF", "gen/b#1/work", "completed"))
        .await
        .expect("b#1 done");
    let publish = support::step(t.pool(), obj, "publish").await;
    let due: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "update workdo.steps set status = 'scheduled', run_at = now() + interval '1 hour'
          where id = $1 returning run_at",
    )
    .bind(publish.id)
    .fetch_one(t.pool())
    .await
    .expect("deferred");
    observe_again(&t, obj, 2).await;
    let waiting: (String, i32, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("select status, pending, run_at from workdo.steps where id = $1")
            .bind(publish.id)
            .fetch_one(t.pool())
            .await
            .expect("publish");
    assert_eq!(waiting, ("scheduled".to_string(), 1, due));
    t.store
        .step_set(&SetRequest::new(obj, "seqWF", "gen/b#2/work", "completed"))
        .await
        .expect("b#2 done");
    let after: (String, i32, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("select status, pending, run_at from workdo.steps where id = $1")
            .bind(publish.id)
            .fetch_one(t.pool())
            .await
            .expect("publish");
    assert_eq!(
        after,
        ("scheduled".to_string(), 0, due),
        "due in an hour still"
    );
}
