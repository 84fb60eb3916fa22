//! The workflow-service XML routes through real HTTP: create, show and re-create, updates with
//! preconditions (one winner among concurrent ones), skip-all, delete, lifecycle, templates,
//! queues, and a robot that drives the demo workflows to the end over XML alone.

mod queues;
use crate::support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::api::{DRUID, WF, api, err, with_google};
use support::load;

#[tokio::test]
async fn xml_create_show_and_recreate() {
    let a = api().await;
    with_google(&a).await;
    // As the workflow service always runs: ready steps are handed off (issue 48).
    a.t.store
        .handoff_set(Some("sidekiq"), "test")
        .await
        .expect("hand-off");
    let path = format!("/objects/{DRUID}/workflows/{WF}?version=2&lane-id=fast");
    let (s, _) = a
        .post_json(&path, &a.robot, json!({"context": {"batch": 9}}))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        body.starts_with(&format!(
            r#"<workflow repository="dor" objectId="{DRUID}" id="{WF}">"#
        )),
        "{body}"
    );
    assert_eq!(body.matches("<process ").count(), 9);
    assert!(
        body.contains(r#"laneId="fast""#) && body.contains(r#"version="2""#),
        "{body}"
    );
    assert!(
        body.contains(r#"status="completed" name="register-object""#),
        "{body}"
    );
    assert!(
        body.contains(r#"status="queued" name="descriptive-metadata""#),
        "ready shows as queued, as the workflow service says it: {body}"
    );
    // Without a hand-off, ready reads `waiting`: robots that poll `?waiting=` find it.
    a.t.store.handoff_set(None, "test").await.expect("hand-off");
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert!(
        body.contains(r#"status="waiting" name="descriptive-metadata""#),
        "{body}"
    );
    a.t.store
        .handoff_set(Some("sidekiq"), "test")
        .await
        .expect("hand-off");
    assert!(body.contains(r#"lifecycle="inprocess""#));
    // Re-POST replaces, never duplicates.
    assert_eq!(
        a.post_json(&path, &a.robot, json!({})).await.0,
        StatusCode::CREATED
    );
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows")).await;
    assert!(body.starts_with(&format!(r#"<workflows objectId="{DRUID}">"#)));
    assert_eq!(body.matches("<process ").count(), 9);
    // Unknown template: 400 and nothing created.
    let (s, body) = a
        .post_json(
            "/objects/druid:cc111dd2222/workflows/noSuchWF",
            &a.robot,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(err(&body), r#"unknown workflow template "noSuchWF""#);
    assert!(
        !a.t.store
            .object_exists("druid:cc111dd2222")
            .await
            .expect("query")
    );
    // Malformed JSON, a non-object context, a bad druid, a bad version: 400.
    let raw = a
        .call(
            reqwest::Method::POST,
            &format!("/objects/{DRUID}/workflows/{WF}"),
            &a.robot,
            Some(("application/json", "{nope".into())),
        )
        .await;
    assert_eq!(raw.0, StatusCode::BAD_REQUEST);
    assert!(err(&raw.1).starts_with("invalid JSON body:"), "{}", raw.1);
    assert_eq!(
        a.post_json(
            &format!("/objects/{DRUID}/workflows/{WF}"),
            &a.robot,
            json!({"context": 3})
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
    let (s, body) = a
        .post_json(
            &format!("/objects/not-a-druid/workflows/{WF}"),
            &a.robot,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        err(&body).starts_with("invalid object id \"not-a-druid\""),
        "{body}"
    );
    let (s, body) = a
        .post_json(
            &format!("/objects/{DRUID}/workflows/{WF}?version=two"),
            &a.robot,
            json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        err(&body),
        r#"query parameter version="two" is not a number"#
    );
}

#[tokio::test]
async fn xml_update_process_successes_and_failures() {
    let a = api().await;
    with_google(&a).await;
    a.t.store
        .handoff_set(Some("sidekiq"), "test")
        .await
        .expect("hand-off");
    a.post_json(
        &format!("/objects/{DRUID}/workflows/{WF}"),
        &a.robot,
        json!({}),
    )
    .await;
    let url = |p: &str| format!("/objects/{DRUID}/workflows/{WF}/{p}");
    // Unknown step: 404.
    let (s, body) = a
        .put_xml(
            &url("no-such-step"),
            r#"<process name="no-such-step" status="completed"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    // Body name differs from the URL: 400 naming both.
    let (s, body) = a
        .put_xml(
            &url("descriptive-metadata"),
            r#"<process name="shelve" status="completed"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // update_step_spec.rb:192: the service's sentence, as plain text.
    assert_eq!(
        body,
        "Process name in body (shelve) does not match process name in URI (descriptive-metadata)"
    );
    // Status precondition fails: 409 naming both, nothing changes.
    let (s, body) = a
        .put_xml(
            &format!("{}?current-status=started", url("descriptive-metadata")),
            r#"<process name="descriptive-metadata" status="completed"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    // update_step_spec.rb:186.
    assert_eq!(
        body,
        "Status in params (started) does not match current status (queued)"
    );
    // Malformed XML, a wrong root, an invalid status, a bad elapsed: 400.
    for (xml, expect) in [
        ("<process name=", "malformed XML body"),
        (
            r#"<step name="descriptive-metadata" status="completed"/>"#,
            "root element is <step>",
        ),
        (
            r#"<process name="descriptive-metadata" status="done!"/>"#,
            "invalid status",
        ),
        (
            r#"<process name="descriptive-metadata" status="completed" elapsed="fast"/>"#,
            "elapsed=",
        ),
    ] {
        let (s, body) = a.put_xml(&url("descriptive-metadata"), xml).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{xml}");
        assert!(err(&body).contains(expect), "{body}");
    }
    // An error, then completion: the message cleared, lifecycle kept. The service's `attempts`
    // stays 0 (workdo's own count is on its JSON API), its elapsed is a Ruby float, its
    // datetime whole seconds (all_workflows_for_one_object_spec.rb:21, 43).
    let (s, _) = a
        .put_xml(&url("descriptive-metadata"), r#"<process name="descriptive-metadata" status="error" errorMessage="catalogue down" errorText="503"/>"#)
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert!(
        body.contains(r#"elapsed="0.0" attempts="0" "#)
            && body.contains(r#"errorMessage="catalogue down""#)
            && !body.contains("priority="),
        "{body}"
    );
    let (s, body) = a
        .put_xml(
            &format!("{}?current-status=error", url("descriptive-metadata")),
            r#"<process name="descriptive-metadata" status="completed" elapsed="1.5" lifecycle="described" note="ok"/>"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let next: Value = serde_json::from_str(&body).expect("json");
    let mut steps: Vec<String> = serde_json::from_value(next["next_steps"].clone()).expect("list");
    steps.sort();
    assert_eq!(steps, vec!["google-convert", "google-download"]);
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert!(!body.contains("errorMessage"), "cleared: {body}");
    assert!(
        body.contains(r#"lifecycle="described" laneId="default" elapsed="1.5""#),
        "{body}"
    );
    // Oversized body: 413.
    let huge = format!(
        r#"<process name="shelve" status="completed" note="{}"/>"#,
        "x".repeat(2 * 1024 * 1024)
    );
    assert_eq!(
        a.put_xml(&url("shelve"), &huge).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
}

#[tokio::test]
async fn concurrent_puts_with_a_precondition_let_exactly_one_win() {
    let a = api().await;
    with_google(&a).await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/{WF}"),
        &a.robot,
        json!({}),
    )
    .await;
    let url = format!(
        "{}/objects/{DRUID}/workflows/{WF}/descriptive-metadata?current-status=waiting",
        a.base
    );
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let req = a
            .http
            .put(&url)
            .bearer_auth(&a.robot)
            .body(r#"<process name="descriptive-metadata" status="started"/>"#);
        tasks.push(tokio::spawn(
            async move { req.send().await.map(|r| r.status()) },
        ));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.expect("task").expect("response"));
    }
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::OK).count(),
        1,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == StatusCode::CONFLICT).count(),
        11,
        "{codes:?}"
    );
}

#[tokio::test]
async fn xml_skip_all_delete_lifecycle_and_templates() {
    let a = api().await;
    with_google(&a).await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/{WF}"),
        &a.robot,
        json!({}),
    )
    .await;
    let (s, body) = a.get(&format!("/objects/{DRUID}/lifecycle")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        body.starts_with(&format!(
            r#"<lifecycle objectId="{DRUID}"><milestone date=""#
        )),
        "{body}"
    );
    assert!(
        !body.contains(">registered</milestone>") && body.contains(">inprocess</milestone>"),
        "{body}"
    );
    // An object the service has never seen has an empty lifecycle, as the service answers.
    let (code, body) = a.get("/objects/druid:zz999zz9999/lifecycle").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        body,
        r#"<lifecycle objectId="druid:zz999zz9999"></lifecycle>"#
    );

    // lifecycle_spec.rb: with active-only, version N's milestones while it has a step left...
    let active = format!("/objects/{DRUID}/lifecycle?active-only=true&version=1");
    let (_, body) = a.get(&active).await;
    assert!(body.contains("</milestone>"), "{body}");
    let skip = format!("/objects/{DRUID}/workflows/{WF}/skip-all");
    assert_eq!(
        a.call(reqwest::Method::POST, &skip, &a.robot, None).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, body) = a.get(&format!("/objects/{DRUID}/workflows/{WF}")).await;
    assert_eq!(body.matches(r#"status="skipped""#).count(), 8);
    // ...and none once every step of it is done (skipped counts as done).
    let (_, body) = a.get(&active).await;
    assert_eq!(
        body,
        format!(r#"<lifecycle objectId="{DRUID}"></lifecycle>"#)
    );
    assert_eq!(
        a.call(
            reqwest::Method::POST,
            &format!("/objects/{DRUID}/workflows/noWF/skip-all"),
            &a.robot,
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT,
        "nothing to skip is not an error, as the service answers"
    );
    load(
        &a.t.store,
        "one.yaml",
        "name: oneWF\nsteps:\n  - name: work\n",
    )
    .await;
    a.post_json(
        &format!("/objects/{DRUID}/workflows/oneWF"),
        &a.robot,
        json!({}),
    )
    .await;
    let one = format!("/objects/{DRUID}/workflows/oneWF");
    assert_eq!(
        a.call(reqwest::Method::DELETE, &one, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    // Deleting again: nothing to delete, 204, as the service answers.
    assert_eq!(
        a.call(reqwest::Method::DELETE, &one, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let all = format!("/objects/{DRUID}/workflows");
    assert_eq!(
        a.call(reqwest::Method::DELETE, &all, &a.admin, None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let (_, body) = a.get(&all).await;
    assert_eq!(
        body,
        format!(r#"<workflows objectId="{DRUID}"></workflows>"#)
    );

    let (_, names) = a.get("/workflow_templates").await;
    assert_eq!(
        serde_json::from_str::<Value>(&names).expect("json"),
        json!([WF, "oneWF"])
    );
    let (_, t) = a.get(&format!("/workflow_templates/{WF}")).await;
    let t: Value = serde_json::from_str(&t).expect("json");
    assert_eq!(
        t["processes"][0],
        json!({"name": "register-object", "label": ""})
    );
    assert_eq!(
        t["processes"][4],
        json!({"name": "process-content", "label": ""}),
        "the service's processes have a name and a label, nothing else (show_workflow_template_spec.rb:11)"
    );
    assert_eq!(
        a.get("/workflow_templates/noWF").await.0,
        StatusCode::NOT_FOUND
    );
}

/// A robot written only against the WorkDo XML routes drives the shipped workflows to the end:
/// create the workflow, poll /workflow_queue for each step, PUT started then completed.
#[tokio::test]
async fn an_xml_only_robot_drives_the_demo_workflows_to_the_end() {
    let a = api().await;
    for f in workdo::cli::files::find_files(&support::workflows_dir()).expect("workflows") {
        a.t.store
            .template_save(&workdo::cli::files::parse_file(&f).expect("template"))
            .await
            .expect("save");
    }
    let druids = ["druid:bc123df4567", "druid:bc123df4568"];
    for d in druids {
        assert_eq!(
            a.post_json(&format!("/objects/{d}/workflows/{WF}"), &a.robot, json!({}))
                .await
                .0,
            StatusCode::CREATED
        );
    }
    let mut done = 0;
    for workflow in [WF, "accessionWF"] {
        let (_, t) = a.get(&format!("/workflow_templates/{workflow}")).await;
        let t: Value = serde_json::from_str(&t).expect("json");
        let processes = t["processes"].as_array().expect("processes").clone();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let mut progressed = false;
            for p in &processes {
                let name = p["name"].as_str().expect("name");
                let query = format!("/workflow_queue?waiting={workflow}:{name}");
                let (_, objects) = a.get(&query).await;
                let doc = roxmltree::Document::parse(&objects).expect("objects XML");
                for o in doc.descendants().filter(|n| n.has_tag_name("object")) {
                    let d = o.attribute("id").expect("id");
                    let url = format!("/objects/{d}/workflows/{workflow}/{name}");
                    let (s, _) = a
                        .put_xml(
                            &format!("{url}?current-status=waiting"),
                            &format!(r#"<process name="{name}" status="started"/>"#),
                        )
                        .await;
                    assert_eq!(s, StatusCode::OK);
                    let (s, _) = a
                        .put_xml(
                            &format!("{url}?current-status=started"),
                            &format!(
                                r#"<process name="{name}" status="completed" elapsed="0.1"/>"#
                            ),
                        )
                        .await;
                    assert_eq!(s, StatusCode::OK);
                    done += 1;
                    progressed = true;
                    if workflow == WF && name == "cleanup" {
                        // googleScannedBookWF's last step hands over to accessioning.
                        a.post_json(
                            &format!("/objects/{d}/workflows/accessionWF"),
                            &a.robot,
                            json!({}),
                        )
                        .await;
                    }
                }
            }
            if !progressed {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "robot made no progress"
            );
        }
    }
    assert_eq!(
        done,
        2 * (8 + 3),
        "every non-bootstrap step of both workflows, for both objects"
    );
    for d in druids {
        let (_, body) = a.get(&format!("/objects/{d}/workflows")).await;
        let steps = body.matches("<process ").count();
        assert_eq!(
            body.matches(r#"status="completed""#).count(),
            steps,
            "{body}"
        );
        let (_, lc) = a.get(&format!("/objects/{d}/lifecycle")).await;
        assert!(lc.contains(">accessioned</milestone>"), "{lc}");
    }
}
