//! Generated steps in queues: `workdo queue`, `/api/queues` and the workflow-service queue take
//! a generated step by its name (`GENERATOR/BRICKLET#N/STEP`) or every instance of a bricklet's
//! step by `BRICKLET/STEP`, as docs/dispatch.md says; a name that matches nothing is still refused.

use crate::support;

use support::db;

#[tokio::test]
async fn generated_steps_have_queues() {
    let t = db().await;
    let druid = "druid:bb123cd4567";
    support::lecture_composed(&t, druid).await;

    t.store
        .step_known("lectureWF", "b6/image-features")
        .await
        .expect("a bricklet's step is a queue");
    t.store
        .step_known("lectureWF", "feature-extraction/b4#2/keywords")
        .await
        .expect("a generated step is a queue");
    let unknown = t
        .store
        .step_known("lectureWF", "b9/nothing")
        .await
        .expect_err("no such generated step")
        .to_string();
    assert!(unknown.contains("b9/nothing"), "{unknown}");

    let q = |step: &'static str| {
        let store = t.store.clone();
        async move {
            store
                .queue_waiting("lectureWF", step, &[], None, 100)
                .await
                .expect("queue")
        }
    };
    let images = q("b6/image-features").await;
    assert_eq!(images.len(), 2, "both instances of b6 are queued");
    assert!(
        images
            .iter()
            .all(|e| e.object_id == druid && e.status == "ready")
    );
    let keywords = q("b4/keywords").await;
    assert_eq!(keywords.len(), 2);
    assert!(
        keywords.iter().all(|e| e.status == "waiting"),
        "b4 waits for b3"
    );
    assert_eq!(q("feature-extraction/b6#1/image-features").await.len(), 1);
    // Template steps are as before.
    assert_eq!(q("publish").await.len(), 1);

    // Over HTTP, the step in one path segment.
    let base = support::serve_api(&t.store, workdo::api::Access::Open).await;
    let r = reqwest::get(format!("{base}/api/queues/lectureWF/b6%2Fimage-features"))
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body.as_array().map(Vec::len), Some(2), "{body}");
    let r = reqwest::get(format!(
        "{base}/workflow_queue?waiting=lectureWF:b6/image-features"
    ))
    .await
    .expect("GET");
    let text = r.text().await.expect("xml");
    assert!(text.starts_with(r#"<objects count="2">"#), "{text}");
    // The object's page says why each bricklet was activated, as `show` does.
    let page = reqwest::get(format!("{base}/ui/objects/{druid}"))
        .await
        .expect("GET")
        .text()
        .await
        .expect("page");
    assert!(
        page.contains("Why its bricklets were activated")
            && page.contains("get-docs rule 2 add b1, b2, b3, b4, b5: 2 fragment(s)"),
        "{page}"
    );

    // Each generated step carries the node its instance was made for (pfrag), and a claim
    // hands it to the function as `fragment`.
    let fragment = |name: &'static str| {
        let pool = t.pool().clone();
        async move {
            sqlx::query_scalar::<_, Option<String>>(
                "select generated ->> 'fragment' from workdo.steps where name = $1",
            )
            .bind(name)
            .fetch_one(&pool)
            .await
            .expect("step")
        }
    };
    for (step, src) in [
        ("feature-extraction/b6#1/image-features", "slides1.pdf"),
        ("feature-extraction/b6#2/image-features", "slides2.pdf"),
        ("feature-extraction/b1#1/key-frames", "lecture1.mp4"),
        ("feature-extraction/b1#2/key-frames", "lecture2.mp4"),
    ] {
        let f = fragment(step).await.unwrap_or_default();
        assert!(
            f.starts_with("<media ") && f.ends_with("/>") && f.contains(&format!("src=\"{src}\"")),
            "{step}: {f}"
        );
    }
    let mut claimed = t
        .store
        .step_claim_queue(
            "lectureWF:b6/image-features",
            None,
            10,
            "test",
            std::time::Duration::from_secs(60),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 2);
    let inputs = t
        .store
        .step_inputs(&mut claimed, &[])
        .await
        .expect("inputs");
    assert!(
        inputs.values().all(|i| i
            .fragment
            .as_deref()
            .is_some_and(|f| f.contains("doctype=\"image\""))),
        "{inputs:?}"
    );

    // `show` says why each bricklet was activated: the composed set and the rules that matched.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["show", druid])
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "error")
        .output()
        .expect("workdo show");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("lectureWF: why its bricklets were activated")
            && text
                .contains("feature-extraction composed: b1 ×2, b2 ×2, b3 ×2, b4 ×2, b5 ×2, b6 ×2")
            && text.contains("get-docs rule 1 add b6: 2 fragment(s)")
            && text.contains("get-docs rule 2 add b1, b2, b3, b4, b5: 2 fragment(s)")
            && text.contains("get-docs rule 3 add b4, b5: no match"),
        "{text}"
    );
}

/// A human step of a bricklet (no function: no worker claims it) is listed by its
/// `BRICKLET/STEP` name like the others (issue 47 item 10: "has no step").
#[tokio::test]
async fn a_human_step_of_a_bricklet_has_a_queue() {
    let t = db().await;
    let druid = "druid:bb123cd4567";
    let source = std::fs::read_to_string(support::workflows_dir().join("lectureWF.yaml"))
        .expect("lectureWF");
    let human = source.replace(
        "        label: 6. Feature extraction of the slides\n        function: { builtin: noop }\n",
        "        label: 6. Feature extraction of the slides, by a person\n",
    );
    assert_ne!(human, source, "b6's step made human");
    support::load(&t.store, "lectureWF.yaml", &human).await;
    support::put_document(
        &t,
        druid,
        "lecture",
        include_str!("../fixtures/documents/lecture.xml"),
    )
    .await;
    t.store
        .workflow_start(&workdo::store::StartRequest::new("lectureWF", &[druid]))
        .await
        .expect("start");
    let bindings = workdo::runtime::bindings(&t.store, &[])
        .await
        .expect("bindings");
    for step in ["get-docs", "feature-extraction"] {
        let b = bindings.iter().find(|b| b.step == step).expect("a binding");
        workdo::runtime::inject::run_now(&t.store, b, &support::config(), &[druid.to_string()])
            .await
            .expect("run");
    }
    t.store
        .step_known("lectureWF", "b6/image-features")
        .await
        .expect("a human bricklet step is a queue");
    let listed = t
        .store
        .queue_waiting("lectureWF", "b6/image-features", &[], None, 100)
        .await
        .expect("queue");
    assert_eq!(listed.len(), 2, "{listed:?}");
}
