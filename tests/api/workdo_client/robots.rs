//! Robots over the workflow service's routes: lyber-core robots with the hand-off in use, and
//! robot-master's polling with it disabled; and the `workdo handoff` setting both rest on.

use std::process::Command;

use super::*;

/// A robot as lyber-core 7.7 runs one: given a druid, read the workflow, work the step only if
/// it is `queued` (or `retrying`), PUT `started`, do the work, PUT `completed`. Twenty objects
/// through accessionWF, every robot offered every object again and again (as a queue that
/// over-delivers would): each step is worked exactly once, and a step not yet queued — or kept
/// out of queues — is skipped, never worked.
#[tokio::test]
async fn lyber_core_robots_move_twenty_objects_through_accession_wf() {
    let (c, t) = setup().await;
    let druids: Vec<String> = (0..20)
        .map(|i| format!("druid:bb{:03}cd{:04}", 100 + i, 1000 + i))
        .collect();
    for d in &druids {
        let (code, body) = c
            .send(
                Method::POST,
                &format!("objects/{d}/workflows/accessionWF?lane-id=default&version=1"),
                Some("application/json"),
                "",
            )
            .await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
    }
    let robots = [
        "start-accession",
        "stage",
        "technical-metadata",
        "shelve",
        "publish",
        "update-doi",
        "update-orcid-work",
        "sdr-ingest-transfer",
        "reset-workspace",
        "end-accession",
    ];
    let mut worked: std::collections::BTreeMap<(String, &str), u32> = Default::default();
    let mut skipped = 0;
    for _round in 0..30 {
        let mut progress = false;
        for robot in robots {
            for d in &druids {
                let status = c.status(d, "accessionWF", robot).await;
                if !matches!(status.as_deref(), Some("queued" | "retrying")) {
                    skipped += 1;
                    continue;
                }
                let started =
                    format!(r#"name="{robot}" status="started" elapsed="1.0" note="robot-host""#);
                assert_eq!(
                    c.put_process(d, "accessionWF", &started, "").await,
                    StatusCode::OK
                );
                *worked.entry((d.clone(), robot)).or_default() += 1;
                let done = format!(
                    r#"name="{robot}" status="completed" elapsed="0.25" note="robot-host""#
                );
                assert_eq!(
                    c.put_process(d, "accessionWF", &done, "").await,
                    StatusCode::OK
                );
                progress = true;
                // Preservation says it has the object (sdr-ingest-received is skip-queue: no
                // robot works it; the preservation service PUTs it).
                if robot == "sdr-ingest-transfer" {
                    let received = r#"name="sdr-ingest-received" status="completed" elapsed="0" note="preservation""#;
                    assert_eq!(
                        c.put_process(d, "accessionWF", received, "").await,
                        StatusCode::OK
                    );
                }
            }
        }
        if !progress {
            break;
        }
    }
    assert_eq!(
        worked.len(),
        20 * robots.len(),
        "every object through every robot"
    );
    assert!(
        worked.values().all(|n| *n == 1),
        "a step worked twice: {worked:?}"
    );
    assert!(
        skipped > 0,
        "robots were offered steps not yet queued and skipped them"
    );
    let done: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows where template = 'accessionWF' and status = 'completed'",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(done, 20);
    for d in &druids {
        let (_, xml) = c.get(&format!("objects/{d}/lifecycle")).await;
        let m = milestones(&xml);
        for name in ["submitted", "published", "deposited", "accessioned"] {
            assert!(m.contains(&name.to_string()), "{d}: {xml}");
        }
    }
}

/// Robot-master as it ran before Sidekiq, with the hand-off disabled: for each robot step,
/// poll `?waiting=accessionWF:STEP` with its prerequisites as `completed=` scopes, set each
/// object's step `queued` (`current-status=waiting`), and enqueue it; the lyber-core robot then
/// checks for `queued`, PUTs `started`, works, PUTs `completed`. A step set `queued` leaves
/// `?waiting=`, and a second `queued` with `current-status=waiting` is a 409, so nothing is
/// enqueued twice. Twenty objects through the real accessionWF.
#[tokio::test]
async fn robot_master_polling_waiting_moves_twenty_objects_with_the_hand_off_disabled() {
    let (c, t) = setup().await;
    t.store.handoff_set(None, "test").await.expect("hand-off");
    let druids: Vec<String> = (0..20)
        .map(|i| format!("druid:bc{:03}df{:04}", 100 + i, 2000 + i))
        .collect();
    for d in &druids {
        let (code, body) = c
            .send(
                Method::POST,
                &format!("objects/{d}/workflows/accessionWF?lane-id=default&version=1"),
                Some("application/json"),
                "",
            )
            .await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
    }
    let spec = t
        .store
        .template_current("accessionWF")
        .await
        .expect("accessionWF")
        .spec;
    let robots: Vec<(String, Vec<String>)> = spec
        .steps
        .iter()
        .filter(|s| !s.skip_queue)
        .map(|s| (s.name.clone(), s.prereqs.clone()))
        .collect();
    let mut worked: std::collections::BTreeMap<(String, String), u32> = Default::default();
    for _round in 0..30 {
        let mut progress = false;
        for (robot, prereqs) in &robots {
            let mut query = format!("workflow_queue?waiting=accessionWF:{robot}");
            for p in prereqs {
                query.push_str(&format!("&completed=accessionWF:{p}"));
            }
            let (code, xml) = c.get(&query).await;
            assert_eq!(code, StatusCode::OK, "{xml}");
            let doc = roxmltree::Document::parse(&xml).expect("objects XML");
            let listed: Vec<String> = doc
                .descendants()
                .filter(|n| n.has_tag_name("object"))
                .filter_map(|n| n.attribute("id").map(str::to_string))
                .collect();
            for d in listed.iter().filter(|d| druids.contains(d)) {
                // robot-master: mark it queued, only if it still waits.
                let queued = format!(r#"name="{robot}" status="queued""#);
                assert_eq!(
                    c.put_process(d, "accessionWF", &queued, "?current-status=waiting")
                        .await,
                    StatusCode::OK,
                    "{d} {robot}"
                );
                assert_eq!(
                    c.put_process(d, "accessionWF", &queued, "?current-status=waiting")
                        .await,
                    StatusCode::CONFLICT,
                    "a queued step no longer waits: enqueued once"
                );
                // The lyber-core robot: work it only if it is queued.
                assert_eq!(
                    c.status(d, "accessionWF", robot).await.as_deref(),
                    Some("queued")
                );
                let started = format!(r#"name="{robot}" status="started" elapsed="1.0""#);
                assert_eq!(
                    c.put_process(d, "accessionWF", &started, "?current-status=queued")
                        .await,
                    StatusCode::OK
                );
                *worked.entry((d.clone(), robot.clone())).or_default() += 1;
                let done = format!(r#"name="{robot}" status="completed" elapsed="0.25""#);
                assert_eq!(
                    c.put_process(d, "accessionWF", &done, "").await,
                    StatusCode::OK
                );
                progress = true;
                if robot == "sdr-ingest-transfer" {
                    let received = r#"name="sdr-ingest-received" status="completed" elapsed="0""#;
                    assert_eq!(
                        c.put_process(d, "accessionWF", received, "").await,
                        StatusCode::OK
                    );
                }
            }
        }
        if !progress {
            break;
        }
    }
    assert_eq!(
        worked.len(),
        20 * robots.len(),
        "every object through every robot step"
    );
    assert!(
        worked.values().all(|n| *n == 1),
        "a step worked twice: {worked:?}"
    );
    let done: i64 = sqlx::query_scalar(
        "select count(*) from workdo.workflows where template = 'accessionWF' and status = 'completed'",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(done, 20);
}

/// `workdo handoff enable sidekiq|disable|show`: one setting in the database, said back; an
/// unknown target is refused by name (exit 2) and changes nothing.
#[tokio::test]
async fn the_hand_off_setting_is_kept_in_the_database() {
    let t = db().await;
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = workdo(&["handoff", "show"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("hand-off: none"), "{out}");
    let (code, out, _) = workdo(&["handoff", "enable", "sidekiq"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("hand-off: sidekiq, enabled now"), "{out}");
    assert!(t.store.handoff_enabled().await.expect("read"));
    let (code, _, err) = workdo(&["handoff", "enable", "rabbit"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("rabbit") && err.contains("sidekiq"), "{err}");
    assert_eq!(
        t.store.handoff_target().await.expect("read").as_deref(),
        Some("sidekiq")
    );
    let (code, out, _) = workdo(&["--json", "handoff", "disable"]);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(v, json!({"handoff": null, "changed": true}));
    assert!(!t.store.handoff_enabled().await.expect("read"));
}
