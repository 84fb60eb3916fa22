//! A name that names nothing is an error naming it, never "0 steps": `skip`, `retry`,
//! `prioritize` with a misspelt template or step exit 2; `POST /api/retry`, a queue route with a
//! misspelt step or `completed=` step answer 404 — a robot polling a misspelt queue would
//! otherwise idle for ever. (The workflow service's `skip-all` on a workflow no template names
//! still answers 204, as the service does: its client relies on it.)

mod support;

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
