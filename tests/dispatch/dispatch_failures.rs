//! Dynamic dispatch when things go wrong: an error inside a subnet holds the generator's
//! dependants and alerts, a missing or malformed document fails the observer (and a retry after
//! the fix works), and a subnet over the limit fails its generator and nothing else.

use crate::support;

use std::time::Duration;

use support::{config, db, generated_names, load, put_document, start, wait_until};
use workdo::store::{StartRequest, StepFilter};

const CONTENT_WF: &str = include_str!("../fixtures/contentWF.yaml");

#[tokio::test]
async fn an_error_in_a_subnet_holds_the_dependants_and_alerts() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let fails = support::function_script(
        dir.path(),
        "fails.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'no such file' >&2\nexit 3\n",
    );
    load(
        &t.store,
        "failing.yaml",
        &format!(
            "name: failWF\nsteps:\n  - name: look\n    observe:\n      document: content\n      rules:\n        - {{ match: '//file', op: add, generator: gen, bricklets: [bad] }}\n  - name: gen\n    prereqs: [look]\n    generate: {{ refset: [bad], rules: [{{ parallel: bad }}] }}\n  - name: done\n    prereqs: [gen]\n    function: {{ builtin: noop }}\nbricklets:\n  - name: bad\n    steps: [{{ name: run, error-limit: 1, function: {{ exec: {fails} }} }}]\n"
        ),
    )
    .await;
    put_document(&t, "obj:f", "content", "<c><file/><file/></c>").await;
    t.store
        .workflow_start(&StartRequest::new("failWF", &["obj:f"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) = 2 from workdo.steps where generated is not null and status = 'error'",
        30,
    )
    .await;
    rt.stop().await;
    let (done, workflow): (String, String) = sqlx::query_as(
        "select s.status, w.status from workdo.steps s join workdo.workflows w on w.id = s.workflow_id
          where s.name = 'done'",
    )
    .fetch_one(t.pool())
    .await
    .expect("done");
    assert_eq!((done.as_str(), workflow.as_str()), ("waiting", "active"));
    // `why` names the generated steps it waits for.
    let why = t.store.why("obj:f", "failWF", "done").await.expect("why");
    assert!(
        why.reasons
            .iter()
            .any(|r| r.starts_with("waiting for prerequisite gen/bad#1/run (error)")),
        "{:?}",
        why.reasons
    );
    let alerts: i64 = sqlx::query_scalar(
        "select count(*) from workdo.alert_outbox where payload ->> 'step' like 'gen/bad#%/run'",
    )
    .fetch_one(t.pool())
    .await
    .expect("alerts");
    assert_eq!(alerts, 2);
}

#[tokio::test]
async fn a_missing_or_malformed_document_fails_the_observer_and_retry_after_a_fix_works() {
    let t = db().await;
    load(&t.store, "content.yaml", CONTENT_WF).await;
    t.store
        .workflow_start(&StartRequest::new("contentWF", &["obj:m"]))
        .await
        .expect("start");
    let mut cfg = config();
    cfg.backoff.max = Duration::from_millis(100);
    let rt = start(&t.store, cfg.clone()).await;
    wait_until(
        t.pool(),
        "select status = 'error' from workdo.steps where name = 'look'",
        30,
    )
    .await;
    let message: String =
        sqlx::query_scalar("select error_message from workdo.steps where name = 'look'")
            .fetch_one(t.pool())
            .await
            .expect("message");
    assert!(
        message.contains("object obj:m has no document \"content\""),
        "{message}"
    );
    put_document(&t, "obj:m", "content", "<content><file kind='image'>").await;
    t.store
        .steps_retry(&StepFilter::default(), "test")
        .await
        .expect("retry");
    wait_until(
        t.pool(),
        "select status = 'error' and error_message like '%not well-formed%' from workdo.steps where name = 'look'",
        30,
    )
    .await;
    let message: String =
        sqlx::query_scalar("select error_message from workdo.steps where name = 'look'")
            .fetch_one(t.pool())
            .await
            .expect("message");
    assert!(
        message.contains("document \"content\" of obj:m is not well-formed XML"),
        "{message}"
    );
    put_document(
        &t,
        "obj:m",
        "content",
        "<content><file kind='image'/></content>",
    )
    .await;
    t.store
        .steps_retry(&StepFilter::default(), "test")
        .await
        .expect("retry");
    support::all_completed(t.pool(), 30).await;
    rt.stop().await;
    assert_eq!(generated_names(&t, "obj:m").await, vec!["gen/img#1/run"]);
}

#[tokio::test]
async fn a_subnet_over_the_limit_fails_its_generator_and_nothing_else() {
    let t = db().await;
    load(&t.store, "content.yaml", CONTENT_WF).await;
    let many = format!(
        "<content>{}</content>",
        "<file kind='image'/>".repeat(10_001)
    );
    put_document(&t, "obj:many", "content", &many).await;
    put_document(
        &t,
        "obj:few",
        "content",
        "<content><file kind='image'/></content>",
    )
    .await;
    let mut req = StartRequest::new("contentWF", &[]);
    req.objects = vec!["obj:many".into(), "obj:few".into()];
    t.store.workflow_start(&req).await.expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select status = 'error' from workdo.steps where object_id = 'obj:many' and name = 'gen'",
        60,
    )
    .await;
    wait_until(
        t.pool(),
        "select status = 'completed' from workdo.workflows where object_id = 'obj:few'",
        60,
    )
    .await;
    rt.stop().await;
    let message: String = sqlx::query_scalar(
        "select error_message from workdo.steps where object_id = 'obj:many' and name = 'gen'",
    )
    .fetch_one(t.pool())
    .await
    .expect("message");
    assert!(
        message.contains("would compose 10001 steps, over the limit of 10000"),
        "{message}"
    );
    assert!(generated_names(&t, "obj:many").await.is_empty());
}
