//! The workflow service's queue routes over XML: `?waiting=` with `completed=` scopes, lanes,
//! errors, `completed=` alone, `lane_ids` and `all_queued`, with the hand-off off and on.

use super::*;

#[tokio::test]
async fn xml_queues() {
    let a = api().await;
    with_google(&a).await;
    for (druid, lane) in [
        ("druid:bb111cc2222", "default"),
        ("druid:bb333cc4444", "fast"),
        ("druid:bb555cc6666", "default"),
    ] {
        a.post_json(
            &format!("/objects/{druid}/workflows/{WF}?lane-id={lane}"),
            &a.robot,
            json!({}),
        )
        .await;
    }
    for druid in ["druid:bb111cc2222", "druid:bb333cc4444"] {
        a.put_xml(
            &format!("/objects/{druid}/workflows/{WF}/descriptive-metadata"),
            r#"<process name="descriptive-metadata" status="completed"/>"#,
        )
        .await;
    }
    let a = &a;
    let q = |query: String| {
        let path = format!("/workflow_queue?{query}");
        async move { a.get(&path).await }
    };
    let (s, body) = q(format!("waiting={WF}:google-download&completed={WF}:descriptive-metadata&completed={WF}:register-object")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(body.starts_with(r#"<objects count="2">"#), "{body}");
    assert!(
        body.contains(r#"<object id="druid:bb111cc2222"/>"#)
            && body.contains(r#"<object id="druid:bb333cc4444"/>"#)
    );
    let (_, body) = q(format!(
        "waiting={WF}:google-download&completed={WF}:descriptive-metadata&lane-id=fast"
    ))
    .await;
    assert_eq!(
        body,
        r#"<objects count="1"><object id="druid:bb333cc4444"/></objects>"#
    );
    let (_, body) = q(format!(
        "waiting={WF}:google-download&completed={WF}:descriptive-metadata&limit=1"
    ))
    .await;
    assert!(body.starts_with(r#"<objects count="1">"#));
    a.put_xml(
        &format!("/objects/druid:bb555cc6666/workflows/{WF}/descriptive-metadata"),
        r#"<process name="descriptive-metadata" status="error" errorMessage="x"/>"#,
    )
    .await;
    let (_, body) = q(format!("error={WF}:descriptive-metadata")).await;
    assert_eq!(
        body,
        r#"<objects count="1"><object id="druid:bb555cc6666"/></objects>"#
    );
    assert_eq!(q("waiting=nocolon".into()).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(q(String::new()).await.0, StatusCode::BAD_REQUEST);
    // objects_for_step_spec.rb:230, 239: `completed=STEP&workflow=WF` without `waiting` lists
    // the objects with that step completed, `repository=` or not.
    for query in [
        format!("completed=descriptive-metadata&repository=dor&workflow={WF}"),
        format!("completed=descriptive-metadata&workflow={WF}"),
    ] {
        let (s, body) = q(query).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            body,
            r#"<objects count="2"><object id="druid:bb111cc2222"/><object id="druid:bb333cc4444"/></objects>"#
        );
    }
    let (_, body) = a
        .get(&format!(
            "/workflow_queue/lane_ids?step={WF}:google-convert"
        ))
        .await;
    assert_eq!(
        body,
        r#"<lanes><lane id="default"/><lane id="fast"/></lanes>"#
    );
    // Without a hand-off nothing is `queued` but what a robot set so itself.
    let (_, body) = a.get("/workflow_queue/all_queued").await;
    assert_eq!(body, "<workflows></workflows>");
    // With the hand-off in use, as the service always runs (objects_for_step_spec.rb 24, 109,
    // 119): a ready step is `queued`, so `?waiting=` and `lane_ids` list only steps still
    // waiting, and `current-status=waiting` on a queued step is a 409.
    a.t.store
        .handoff_set(Some("sidekiq"), "test")
        .await
        .expect("hand-off");
    let (_, body) = q(format!(
        "waiting={WF}:google-download&completed={WF}:descriptive-metadata"
    ))
    .await;
    assert_eq!(body, r#"<objects count="0"></objects>"#);
    let (_, body) = q(format!("waiting={WF}:google-download")).await;
    assert_eq!(
        body, r#"<objects count="1"><object id="druid:bb555cc6666"/></objects>"#,
        "only the object whose google-download still waits for its prerequisites"
    );
    let (_, body) = a
        .get(&format!(
            "/workflow_queue/lane_ids?step={WF}:descriptive-metadata"
        ))
        .await;
    assert_eq!(
        body, "<lanes></lanes>",
        "every descriptive-metadata is queued or done"
    );
    let (s, body) = a
        .put_xml(
            &format!(
                "/objects/druid:bb111cc2222/workflows/{WF}/google-download?current-status=waiting"
            ),
            r#"<process name="google-download" status="started"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert_eq!(
        body,
        "Status in params (waiting) does not match current status (queued)"
    );
    // all_queued_spec.rb:21, 47, 55: `<workflows>` of `<workflow name process druid laneId/>`,
    // and `hours-ago=N` keeps only those queued longer than N hours.
    let (_, body) = a.get("/workflow_queue/all_queued").await;
    assert_eq!(body.matches("<workflow ").count(), 4, "{body}");
    assert!(body.starts_with("<workflows><workflow name=\""), "{body}");
    let doc = roxmltree::Document::parse(&body).expect("all_queued XML");
    for w in doc.descendants().filter(|n| n.has_tag_name("workflow")) {
        let attrs: Vec<&str> = w.attributes().map(|a| a.name()).collect();
        assert_eq!(attrs, ["name", "process", "druid", "laneId"], "{body}");
    }
    let (_, body) = a
        .get("/workflow_queue/all_queued?repository=dor&limit=3&hours-ago=24")
        .await;
    assert_eq!(body, "<workflows></workflows>", "none queued a day ago");
    let (_, body) = a
        .get("/workflow_queue/all_queued?limit=2&hours-ago=0")
        .await;
    assert_eq!(body.matches("<workflow ").count(), 2, "{body}");
    // A ready skip-queue step is no worker's: not queued.
    support::load(
        &a.t.store,
        "sq.xml",
        r#"<workflow-def id="sqWF" repository="dor"><process name="logged" skip-queue="true" sequence="1"/></workflow-def>"#,
    )
    .await;
    a.t.store
        .workflow_start(&workdo::store::StartRequest::new(
            "sqWF",
            &["druid:bb777cc8888"],
        ))
        .await
        .expect("start");
    let (_, body) = a.get("/workflow_queue/all_queued").await;
    assert!(
        body.matches("<workflow ").count() == 4 && !body.contains("sqWF"),
        "{body}"
    );
}
