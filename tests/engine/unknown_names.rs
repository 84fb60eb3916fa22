//! A name that names nothing is an error naming it, never "0 steps": `skip`, `retry`,
//! `prioritize` with a misspelt template or step exit 2; `POST /api/retry`, a queue route with a
//! misspelt step or `completed=` step answer 404 — a robot polling a misspelt queue would
//! otherwise idle for ever. (The workflow service's `skip-all` on a workflow no template names
//! still answers 204, as the service does: its client relies on it.)

use crate::support;

use std::process::Command;

use reqwest::StatusCode;
use serde_json::json;
use support::api::{DRUID, WF, api, with_google};

#[tokio::test]
async fn misspelt_names_are_errors_that_name_them() {
    let a = api().await;
    with_google(&a).await;
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &a.t.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, named) in [
        (&["skip", "--template", "nopeWF"][..], "nopeWF"),
        (&["retry", "--template", WF, "--step", "typo"][..], "typo"),
        (
            &["prioritize", "5", "--step", "typo-step"][..],
            "no loaded template has a step \"typo-step\"",
        ),
        // An object never registered is named as such, not blamed on its workflow.
        (
            &[
                "step",
                "set",
                "druid:zz999zz9999",
                WF,
                "google-download",
                "completed",
            ][..],
            "no object \"druid:zz999zz9999\"",
        ),
    ] {
        let (code, stderr) = workdo(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    // A workflow of steps asked for its machine job says so, not `has no step ""`; and a time
    // taken that is no number of seconds is refused by name.
    a.t.store
        .workflow_start(&workdo::store::StartRequest::new(WF, &[DRUID]))
        .await
        .expect("start");
    let (code, stderr) = workdo(&["why", DRUID, WF]);
    assert!(
        code != Some(0) && stderr.contains("has no active state-machine job"),
        "{stderr}"
    );
    let (code, stderr) = workdo(&[
        "step",
        "set",
        DRUID,
        WF,
        "google-download",
        "completed",
        "--elapsed=-5",
    ]);
    assert!(code != Some(0) && stderr.contains("elapsed"), "{stderr}");
    // A correct name with nothing to do is still fine: 0 steps, exit 0.
    let (code, stderr) = workdo(&["retry", "--template", WF, "--step", "google-download"]);
    assert_eq!(code, Some(0), "{stderr}");

    let (s, body) = a
        .post_json("/api/retry", &a.robot, json!({"template": "nopeWF"}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("nopeWF"), "{body}");
    for path in [
        format!("/workflow_queue?waiting={WF}:typo"),
        format!("/workflow_queue?waiting={WF}:google-download&completed={WF}:typo"),
        format!("/workflow_queue?error={WF}:typo"),
        format!("/api/queues/{WF}/google-download?completed={WF}:typo"),
        "/api/facets?template=typo".to_string(),
    ] {
        let (s, body) = a.get(&path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(body.contains("typo"), "{path}: {body}");
    }
    let skip = format!("/objects/{DRUID}/workflows/noWF/skip-all");
    assert_eq!(
        a.call(reqwest::Method::POST, &skip, &a.robot, None).await.0,
        StatusCode::NO_CONTENT
    );
}

/// Issue 47 item 15: the commands that broke the rule — a workflow id, a queue, a template's
/// status and version that name nothing exit 2 — and the inputs refused by name instead of
/// being taken: an empty lane, a poll interval of 0 s, a token name with a newline.
#[tokio::test]
async fn every_command_naming_nothing_exits_2_and_bad_settings_are_refused() {
    let t = support::db().await;
    support::load(&t.store, "g.xml", support::GOOGLE_XML).await;
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, named) in [
        (&["workflows", "delete", "0"][..], "there is no workflow 0"),
        (&["resume", "nopeWF:x"][..], "nopeWF"),
        (&["resume", &format!("{WF}:typo")][..], "typo"),
        (&["status", "--template", "nopeWF"][..], "nopeWF"),
        (&["templates", "use", "nopeWF", "abc123"][..], "nopeWF"),
    ] {
        let (code, stderr) = workdo(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    for (args, said) in [
        (
            &[
                "queues",
                "define",
                "q1",
                "--waiting",
                &format!("{WF}:shelve"),
                "--lane",
                "",
            ][..],
            "lane",
        ),
        (
            &["up", "--no-api", "--poll-interval", "0s"][..],
            "at least 1ms",
        ),
        (
            &["tokens", "create", "--role", "viewer", "--name", "a\nb"][..],
            "control character",
        ),
    ] {
        let (code, stderr) = workdo(args);
        assert!(
            code.is_some_and(|c| c != 0),
            "{args:?} was accepted: {stderr}"
        );
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    let tokens: i64 = sqlx::query_scalar("select count(*) from workdo.tokens")
        .fetch_one(t.pool())
        .await
        .expect("tokens");
    assert_eq!(tokens, 0, "no token was made");
}

/// A `current-status` precondition that is no status at all is a malformed request (400),
/// not a mismatch (409): nothing changes either way.
#[tokio::test]
async fn a_malformed_current_status_is_a_bad_request() {
    let a = api().await;
    with_google(&a).await;
    a.t.store
        .workflow_start(&workdo::store::StartRequest::new(WF, &[DRUID]))
        .await
        .expect("start");
    let url = |cs: &str| {
        format!(
            "{}/objects/{DRUID}/workflows/{WF}/descriptive-metadata?current-status={cs}",
            a.base
        )
    };
    let put = |cs: &str| {
        a.http
            .put(url(cs))
            .bearer_auth(&a.robot)
            .body(r#"<process name="descriptive-metadata" status="completed"/>"#)
            .send()
    };
    assert_eq!(
        put("%25%25bad").await.expect("put").status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        put("completed").await.expect("put").status(),
        StatusCode::CONFLICT
    );
    let status: String =
        sqlx::query_scalar("select status from workdo.steps where name = 'descriptive-metadata'")
            .fetch_one(a.t.pool())
            .await
            .expect("status");
    assert_ne!(status, "completed", "nothing changed");
}
