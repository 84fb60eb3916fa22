//! WorkDo's own vocabulary on the wire: the initiate call as `PUT`, `exception` as a status of
//! its own, intermediate statuses declared in an XML template, and `errorText` shown in the
//! workflow datastream it was stored from.

use crate::support;

use reqwest::{Method, StatusCode};
use support::api::{DRUID, WF, api, with_google};

#[tokio::test]
async fn initiate_by_put_exception_and_error_text() {
    let a = api().await;
    with_google(&a).await;
    // PUT on the workflow initiates it, as POST does (a robot may; a viewer may not).
    let path = format!("/objects/{DRUID}/workflows/{WF}");
    let (s, _) = a.call(Method::PUT, &path, &a.viewer, None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, body) = a.call(Method::PUT, &path, &a.robot, None).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let (_, shown) = a.get(&path).await;
    assert_eq!(shown.matches("<process ").count(), 9, "{shown}");

    // `exception` is the seed's word for error; errorText is stored and shown again.
    let (s, body) = a
        .put_xml(
            &format!("{path}/google-download"),
            r#"<process name="google-download" status="exception" errorMessage="scanner jam" errorText="at tray 2&#10;retry later"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    // Seed 000: an exception is a status of its own, read back as written, and an error in
    // every other way: its attempts counted, listed with the errors, retried with them.
    let row = support::step(a.t.pool(), DRUID, "google-download").await;
    assert_eq!((row.status.as_str(), row.attempts), ("exception", 1));
    let (_, shown) = a.get(&path).await;
    assert!(
        shown.contains(r#"status="exception" name="google-download" errorMessage="scanner jam" errorText="at tray 2"#),
        "{shown}"
    );
    let (_, listed) = a
        .get(&format!("/workflow_queue?error={WF}:google-download"))
        .await;
    assert!(listed.contains(DRUID), "{listed}");
    // A precondition of `error` names the class; `exception` the status itself.
    let (s, _) = a
        .put_xml(
            &format!("{path}/google-download?current-status=error"),
            r#"<process name="google-download" status="exception" errorMessage="jammed again"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let row = support::step(a.t.pool(), DRUID, "google-download").await;
    assert_eq!((row.status.as_str(), row.attempts), ("exception", 2));
    let retried =
        a.t.store
            .steps_retry(&Default::default(), "test")
            .await
            .expect("retry");
    assert_eq!(
        retried, 1,
        "the default retry takes exceptions with the errors"
    );
    let row = support::step(a.t.pool(), DRUID, "google-download").await;
    // Back in line: waiting, as its prerequisite is not done.
    assert_eq!((row.status.as_str(), row.attempts), ("waiting", 0));
    a.put_xml(
        &format!("{path}/google-download"),
        r#"<process name="google-download" status="exception"/>"#,
    )
    .await;
    let (s, body) = a
        .put_xml(
            &format!("{path}/google-download?current-status=exception"),
            r#"<process name="google-download" status="waiting"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn an_xml_template_declares_intermediate_statuses() {
    let a = api().await;
    support::load(
        &a.t.store,
        "digitize.xml",
        r#"<workflow-def id="digitizeWF" repository="dor">
  <process name="scan"><status>IN PROCESS</status><status>awaiting-qa</status></process>
  <process name="publish"><prereq>scan</prereq></process>
</workflow-def>"#,
    )
    .await;
    let path = "/objects/druid:bc123df4567/workflows/digitizeWF";
    let (s, _) = a.call(Method::POST, path, &a.robot, None).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, body) = a
        .put_xml(
            &format!("{path}/scan"),
            r#"<process name="scan" status="IN PROCESS"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let (s, body) = a
        .put_xml(
            &format!("{path}/scan"),
            r#"<process name="scan" status="not-declared"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        support::step(a.t.pool(), "druid:bc123df4567", "scan")
            .await
            .status,
        "IN PROCESS"
    );
    let e = workdo::model::template::parse(
        "bad.xml",
        workdo::model::template::Format::Xml,
        "<workflow-def id=\"badWF\" repository=\"dor\">\n  <process name=\"scan\"><status> </status></process>\n</workflow-def>",
    )
    .expect_err("an empty status")
    .to_string();
    assert!(e.contains("bad.xml") && e.contains("empty <status>"), "{e}");
}

/// Creating an object records its `registered` milestone (issue 47 item 8), as seed 000 and
/// the README say, in workdo's own views; the workflow service's lifecycle, which records
/// `registered` only through the step that declares it, does not show it.
#[tokio::test]
async fn a_new_object_is_registered() {
    let a = api().await;
    with_google(&a).await;
    a.t.store
        .object_put(
            "druid:bc111bc1111",
            &Default::default(),
            &Default::default(),
            "test",
        )
        .await
        .expect("object");
    a.t.store
        .workflow_start(&workdo::store::StartRequest::new(WF, &[DRUID]))
        .await
        .expect("a start registers its new object");
    for id in ["druid:bc111bc1111", DRUID] {
        let names: Vec<String> =
            a.t.store
                .milestones(id)
                .await
                .expect("milestones")
                .into_iter()
                .map(|m| m.name)
                .collect();
        assert_eq!(
            names.iter().filter(|n| *n == "registered").count(),
            1,
            "{id}: {names:?}"
        );
    }
    let (s, xml) = a.get(&format!("/objects/{DRUID}/lifecycle")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(!xml.contains(">registered<"), "{xml}");
}

/// `queued` is a robot's word: on a step a workdo function runs it means back in the queue
/// (`ready`), as before the hand-off setting, so the step runs; on a robot's step it is kept.
/// And a function's context update on a workflow whose context is a string replaces it (a
/// JSON string `||` an object would be an array, which the database refuses).
#[tokio::test]
async fn queued_on_a_function_step_runs_it_and_a_string_context_takes_an_update() {
    let a = api().await;
    support::load(
        &a.t.store,
        "q.yaml",
        "name: qWF\nsteps:\n  - name: robot\n  - name: run\n    function: { exec: [sh, -c, \"cat >/dev/null; echo '{\\\"status\\\":\\\"completed\\\",\\\"context\\\":{\\\"seen\\\":true}}'\"] }\n",
    )
    .await;
    let path = format!("/objects/{DRUID}/workflows/qWF");
    let (s, body) = a
        .post_json(&path, &a.robot, serde_json::json!({"context": "a string"}))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    for step in ["robot", "run"] {
        let (s, body) = a
            .put_xml(
                &format!("{path}/{step}"),
                &format!(r#"<process name="{step}" status="queued"/>"#),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{step}: {body}");
    }
    assert_eq!(
        support::step(a.t.pool(), DRUID, "robot").await.status,
        "queued"
    );
    assert_eq!(
        support::step(a.t.pool(), DRUID, "run").await.status,
        "ready"
    );
    let rt = support::start(&a.t.store, support::config()).await;
    support::wait_until(
        a.t.pool(),
        "select count(*) = 1 from workdo.steps where name = 'run' and status = 'completed'",
        30,
    )
    .await;
    rt.stop().await;
    let context: serde_json::Value =
        sqlx::query_scalar("select context from workdo.workflows where template = 'qWF'")
            .fetch_one(a.t.pool())
            .await
            .expect("context");
    assert_eq!(context, serde_json::json!({"seen": true}));
}
