//! Watching observers (`watch: true`): a document replaced while the workflow runs — from
//! outside, by a step's result, or while the observer itself is running — is observed again,
//! and the generator recomposes from it.

use crate::support;

use std::collections::BTreeSet;

use support::{config, db, put_document, start};
use workdo::model::dispatch;
use workdo::store::StartRequest;

const CONTENT_WF: &str = include_str!("../fixtures/contentWF.yaml");
const SEQUENCE_WF: &str = include_str!("../fixtures/seqWF.yaml");

/// `seqWF` with its observer watching its document.
fn watching() -> String {
    let watching = SEQUENCE_WF.replace(
        "      document: items\n",
        "      document: items\n      watch: true\n",
    );
    assert_ne!(watching, SEQUENCE_WF);
    watching
}

/// The `items` document of `n` items, to write.
fn items(n: usize) -> std::collections::BTreeMap<String, String> {
    [("items".to_string(), support::items_document(n))]
        .into_iter()
        .collect()
}

/// Watching `seqWF` started on `obj` with one item; `composed`: its observer and generator run.
async fn watching_sequence(t: &support::TestDb, obj: &str, composed: bool) {
    support::load(&t.store, "seq.yaml", &watching()).await;
    put_document(t, obj, "items", &support::items_document(1)).await;
    t.store
        .workflow_start(&StartRequest::new("seqWF", &[obj]))
        .await
        .expect("start");
    if composed {
        for step in ["look", "gen"] {
            support::run_step(t, obj, step).await;
        }
    }
}

/// An observer that says `watch: true` observes again by itself when its document is replaced
/// while the workflow runs, and its generator recomposes: no `retry --again` needed.
#[tokio::test]
async fn a_watching_observer_recomposes_when_its_document_is_replaced() {
    let t = db().await;
    let watching = CONTENT_WF.replace(
        "      document: content\n",
        "      document: content\n      watch: true\n",
    );
    assert_ne!(watching, CONTENT_WF);
    support::load(&t.store, "content.yaml", &watching).await;
    let obj = "obj:w1";
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image'/></content>",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("contentWF", &[obj]))
        .await
        .expect("start");
    for step in ["look", "gen"] {
        support::run_step(&t, obj, step).await;
    }
    // Replaced: the observer is ready again at once.
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image'/><file kind='image'/></content>",
    )
    .await;
    let look = support::step(t.pool(), obj, "look").await;
    assert_eq!(look.status, "ready", "the watching observer runs again");
    support::run_step(&t, obj, "look").await;
    let names: BTreeSet<String> = support::generated_names(&t, obj)
        .await
        .into_iter()
        .collect();
    assert!(names.contains("gen/img#2/run"), "{names:?}");
}

/// Found by a helper: a watching observer that read its document, then saw it replaced before
/// its result committed, recorded the old reading for good (it was running, so the
/// replacement did not put it back). Now its commit puts it back in its queue, and its next
/// run composes from the new document.
#[tokio::test]
async fn a_document_replaced_while_its_watching_observer_runs_is_observed_again() {
    use workdo::model::status::Status;
    use workdo::store::{Dispatch, Effects};
    let t = db().await;
    let obj = "obj:race";
    watching_sequence(&t, obj, false).await;
    // The observer is claimed and reads its document.
    let mut claimed = [support::claim_step(&t, "seqWF", obj, "look").await];
    let mut inputs = t
        .store
        .step_inputs(&mut claimed, &["items".to_string()])
        .await
        .expect("inputs");
    let read = inputs
        .remove(&claimed[0].id)
        .and_then(|i| i.documents.get("items").cloned())
        .expect("document read");
    // Replaced while it runs: nothing to put back yet.
    put_document(&t, obj, "items", &support::items_document(3)).await;
    assert_eq!(support::step(t.pool(), obj, "look").await.status, "started");
    // It commits what it read, one item.
    let spec = workdo::model::template::parse(
        "seq.yaml",
        workdo::model::template::Format::Yaml,
        &watching(),
    )
    .expect("template")
    .template;
    let observe = spec
        .step("look")
        .and_then(|s| s.observe.clone())
        .expect("observer");
    let matches = dispatch::observe(&observe, &read).expect("observed");
    let effects = Effects {
        dispatch: Some(Dispatch::Observed {
            observer: "look".into(),
            matches,
        }),
        ..Effects::default()
    };
    let result = support::result_for(&claimed[0], Status::Completed, "completed", effects);
    t.store
        .results_commit(&[result], "test")
        .await
        .expect("commit");
    let look = support::step(t.pool(), obj, "look").await;
    assert_eq!(look.status, "ready", "the observer reads the new document");
    let gen_step = support::step(t.pool(), obj, "gen").await;
    assert_eq!(gen_step.status, "waiting", "the generator waits for it");
    // Its stale reading is not recorded, and the observer never completed: a workflow it was
    // the last step of would otherwise have passed through 'completed'.
    let (observed, completed): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where kind = 'observed'),
                count(*) filter (where kind = 'completed' and step = 'look')
           from workdo.events where object_id = $1",
    )
    .bind(obj)
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert_eq!((observed, completed), (0, 0));
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    let names: BTreeSet<String> = support::generated_names(&t, obj)
        .await
        .into_iter()
        .collect();
    assert_eq!(
        names,
        ["gen/b#1/work", "gen/b#2/work", "gen/b#3/work"]
            .into_iter()
            .map(String::from)
            .collect::<BTreeSet<_>>()
    );
}

/// A step's result that replaces the document wakes the watching observer as a replacement
/// from outside does, in the same commit.
#[tokio::test]
async fn a_document_written_by_a_step_wakes_the_watching_observer() {
    use workdo::model::status::Status;
    use workdo::store::Effects;
    let t = db().await;
    let obj = "obj:written";
    watching_sequence(&t, obj, true).await;
    let claimed = support::claim_step(&t, "seqWF", obj, "gen/b#1/work").await;
    let effects = Effects {
        documents: items(2),
        ..Effects::default()
    };
    let result = support::result_for(&claimed, Status::Completed, "completed", effects);
    t.store
        .results_commit(&[result], "test")
        .await
        .expect("commit");
    assert_eq!(support::step(t.pool(), obj, "look").await.status, "ready");
    let rt = start(&t.store, config()).await;
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    let names: BTreeSet<String> = support::generated_names(&t, obj)
        .await
        .into_iter()
        .collect();
    assert!(names.contains("gen/b#2/work"), "{names:?}");
}

/// Found by a helper: a watching observer whose own result wrote its document put itself back
/// in its queue, forty times a second, for ever (even with the document unchanged). A result
/// does not wake its own step, and a document written as it was wakes nobody.
#[tokio::test]
async fn an_observer_writing_its_own_document_and_an_unchanged_document_wake_nobody() {
    use workdo::model::status::Status;
    use workdo::store::{Dispatch, Effects};
    let t = db().await;
    let obj = "obj:self";
    watching_sequence(&t, obj, false).await;
    let claimed = support::claim_step(&t, "seqWF", obj, "look").await;
    let effects = Effects {
        documents: items(2),
        dispatch: Some(Dispatch::Observed {
            observer: "look".into(),
            matches: Vec::new(),
        }),
        ..Effects::default()
    };
    let own = support::result_for(&claimed, Status::Completed, "completed", effects);
    t.store
        .results_commit(&[own], "test")
        .await
        .expect("commit");
    assert_eq!(
        support::step(t.pool(), obj, "look").await.status,
        "completed"
    );
    // The same document again, from outside: nothing to observe, and the event says so.
    put_document(&t, obj, "items", &support::items_document(2)).await;
    assert_eq!(
        support::step(t.pool(), obj, "look").await.status,
        "completed"
    );
    let updated: serde_json::Value = sqlx::query_scalar(
        "select detail from workdo.events where object_id = $1 and kind = 'object_updated'
          order by id desc limit 1",
    )
    .bind(obj)
    .fetch_one(t.pool())
    .await
    .expect("object_updated");
    assert_eq!(updated["unchanged"], serde_json::json!(["items"]));
    // A different one: observed again.
    put_document(&t, obj, "items", &support::items_document(3)).await;
    assert_eq!(support::step(t.pool(), obj, "look").await.status, "ready");
}

/// Found by a helper: a replacement that read the workflow as running, then waited while its
/// last step completed, reopened the completed workflow (a parent would be told its child was
/// done, then not). The watch now acts only on workflows still running once it holds them.
#[tokio::test]
async fn a_replacement_racing_the_last_step_leaves_the_workflow_completed() {
    let t = db().await;
    let obj = "obj:racing";
    watching_sequence(&t, obj, true).await;
    t.store
        .step_set(&workdo::store::SetRequest::new(
            obj,
            "seqWF",
            "gen/b#1/work",
            "completed",
        ))
        .await
        .expect("b#1 done");
    // Another transaction holds the workflow while it finishes its last step.
    let mut last = t.pool().begin().await.expect("begin");
    let workflow: i64 =
        sqlx::query_scalar("select id from workdo.workflows where object_id = $1 for update")
            .bind(obj)
            .fetch_one(&mut *last)
            .await
            .expect("lock");
    // The replacement starts, and waits for it.
    let store = t.store.clone();
    let replacing = tokio::spawn(async move {
        store
            .object_put(obj, &Default::default(), &items(2), "test")
            .await
    });
    support::wait_for("the replacement to wait for the workflow", 30, || async {
        support::lock_waiters(t.pool()).await > 0
    })
    .await;
    sqlx::query(
        "update workdo.steps set status = 'completed', finished_at = now()
          where workflow_id = $1 and name = 'publish'",
    )
    .bind(workflow)
    .execute(&mut *last)
    .await
    .expect("publish done");
    sqlx::query(
        "update workdo.workflows set unfinished = 0, status = 'completed', completed_at = now()
          where id = $1",
    )
    .bind(workflow)
    .execute(&mut *last)
    .await
    .expect("workflow done");
    last.commit().await.expect("commit");
    replacing.await.expect("task").expect("replaced");
    let status: String = sqlx::query_scalar("select status from workdo.workflows where id = $1")
        .bind(workflow)
        .fetch_one(t.pool())
        .await
        .expect("workflow");
    assert_eq!(status, "completed");
    assert_eq!(
        support::step(t.pool(), obj, "look").await.status,
        "completed"
    );
}
