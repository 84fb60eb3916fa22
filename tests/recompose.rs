//! Recomposition (seed 001's run-time adaption): the document changes after the generator
//! composed, the observer runs again, and the subnet follows — new instances wired to those
//! already there, a deactivated instance that had not started skipped, a finished and a running
//! one kept, the generator's dependant waiting for the new last step — exactly Listing 1 applied
//! to the new activation set; then the workflow runs to the end.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use support::{config, db, put_document, start};
use workdo::model::dispatch;
use workdo::runtime::{self, inject};
use workdo::store::{SetRequest, StartRequest, StepFilter};

const CONTENT_WF: &str = include_str!("fixtures/contentWF.yaml");

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
        "<content><file kind='image'/><file kind='image'/><file kind='audio'/></content>",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("contentWF", &[obj]))
        .await
        .expect("start");
    let bindings = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let cfg = config();
    let run = |step: &'static str| {
        let b = bindings
            .iter()
            .find(|b| b.step == step)
            .cloned()
            .expect("binding");
        let (store, cfg) = (t.store.clone(), cfg.clone());
        async move {
            inject::run_now(&store, &b, &cfg, &[obj.to_string()])
                .await
                .expect("run")
        }
    };
    run("look").await;
    run("gen").await;
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

    // The document changes: one image left, a second audio file, a restriction (undo: the
    // audio's compensation). The observer runs again.
    put_document(
        &t,
        obj,
        "content",
        "<content><file kind='image'/><file kind='audio'/><file kind='audio'/><restriction/></content>",
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
    run("look").await;

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
    let bindings = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let cfg = config();
    for step in ["look", "gen"] {
        let b = bindings.iter().find(|b| b.step == step).expect("binding");
        inject::run_now(&t.store, b, &cfg, &[obj.to_string()])
            .await
            .expect("run");
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
    let b = bindings.iter().find(|b| b.step == "look").expect("binding");
    inject::run_now(&t.store, b, &cfg, &[obj.to_string()])
        .await
        .expect("observe again");
    let names: BTreeSet<String> = rows(&t).await.into_keys().collect();
    assert!(names.contains("gen/img#2/run"), "{names:?}");
}
