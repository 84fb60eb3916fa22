//! What an operator's day needs from the CLI and the engine: numbers kept exactly or refused,
//! `--object` repeatable with unknown objects named, a file registered whole or not at all, a
//! retry that keeps its last error in sight, queues paused and resumed (claims, the robots'
//! queue route, `why`), generated steps counted under their bricklet step, and `up --demo`
//! serving its page until Ctrl-C.

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::Utc;
use support::{db, load};
use workdo::model::status::Status;
use workdo::store::{Change, StartRequest, StepResult};

const LEASE: Duration = Duration::from_secs(60);

fn workdo(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "error")
        .output()
        .expect("workdo");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn numbers_objects_and_files_are_taken_exactly_or_refused() {
    let t = db().await;
    // A 20-digit barcode as a JSON number: refused, naming it and the fix; nothing stored.
    let (code, _, stderr) = workdo(
        &t.url,
        &[
            "objects",
            "add",
            "obj:a",
            "--property-json",
            "barcode=36105010362304123456",
        ],
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("36105010362304123456") && stderr.contains("as a string"),
        "{stderr}"
    );
    let none: i64 = sqlx::query_scalar("select count(*) from workdo.objects")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(none, 0);
    // As a string it is kept digit for digit; a number a double holds stays a number.
    let (code, _, stderr) = workdo(
        &t.url,
        &[
            "objects",
            "add",
            "obj:a",
            "--property",
            "barcode=36105010362304123456",
            "--property-json",
            "year=1854",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let props: serde_json::Value =
        sqlx::query_scalar("select properties from workdo.objects where id = 'obj:a'")
            .fetch_one(t.pool())
            .await
            .expect("props");
    assert_eq!(
        props,
        serde_json::json!({"barcode": "36105010362304123456", "year": 1854})
    );

    // A JSON-lines file is registered whole or not at all: a bad number on line 3 keeps lines
    // 1 and 2 out too, and the error names file and line.
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("objects.jsonl");
    std::fs::write(
        &file,
        "{\"id\": \"obj:b\"}\n{\"id\": \"obj:c\"}\n{\"id\": \"obj:d\", \"properties\": {\"n\": 0.1000000000000000055511151231257827}}\n",
    )
    .expect("file");
    let (code, _, stderr) = workdo(
        &t.url,
        &["objects", "add", "--from", &file.display().to_string()],
    );
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("objects.jsonl:3") && stderr.contains("at column"),
        "the file's line, and the column in it: {stderr}"
    );
    let kept: i64 = sqlx::query_scalar("select count(*) from workdo.objects")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(kept, 1, "only obj:a");

    // --object is repeatable; an object never registered is named, exit 2.
    load(&t.store, "r.yaml", "name: repWF\nsteps:\n  - { name: a }\n").await;
    let req = StartRequest::new("repWF", &["obj:a", "obj:b", "obj:c"]);
    t.store.workflow_start(&req).await.expect("start");
    let (code, stdout, stderr) = workdo(
        &t.url,
        &[
            "skip",
            "--template",
            "repWF",
            "--object",
            "obj:a",
            "--object",
            "obj:c",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("2 steps skipped"), "{stdout}");
    let (code, _, stderr) = workdo(
        &t.url,
        &["skip", "--object", "obj:b", "--object", "obj:nope"],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("obj:nope"), "{stderr}");
    let b: String = sqlx::query_scalar(
        "select status from workdo.steps where object_id = 'obj:b' and template = 'repWF'",
    )
    .fetch_one(t.pool())
    .await
    .expect("status");
    assert_eq!(b, "ready", "nothing skipped when one name is wrong");
}

#[tokio::test]
async fn a_retry_keeps_its_last_error_and_a_paused_queue_claims_nothing() {
    workdo::install_crypto();
    let t = db().await;
    load(
        &t.store,
        "q.yaml",
        "name: qWF\nsteps:\n  - { name: fetch }\n  - { name: shelve, prereqs: [fetch] }\n",
    )
    .await;
    let req = StartRequest::new("qWF", &["obj:one", "obj:two"]);
    t.store.workflow_start(&req).await.expect("start");
    let claimed = t
        .store
        .step_claim("qWF", "fetch", None, 1, "test", LEASE)
        .await
        .expect("claim");
    let c = &claimed[0];
    let mut ch = Change::new(c.id, Status::Retrying, "failed");
    ch.lease = Some(c.lease_token);
    ch.run_at = Some(Utc::now());
    ch.error_message = Some("scanner timeout".into());
    t.store
        .results_commit(
            &[StepResult {
                change: ch,
                object_id: c.object_id.clone(),
                workflow_id: c.workflow_id,
                effects: Default::default(),
            }],
            "test",
        )
        .await
        .expect("commit");
    assert_eq!(t.store.steps_promote_due(10).await.expect("promote"), 1);
    let row = support::step(t.pool(), &c.object_id, "fetch").await;
    assert_eq!(row.status, "ready");
    assert_eq!(
        row.error_message.as_deref(),
        Some("scanner timeout"),
        "due again, its last error still in sight"
    );
    let (_, shown, _) = workdo(&t.url, &["show", &c.object_id]);
    assert!(shown.contains("last error: scanner timeout"), "{shown}");

    // Paused: no claim, the robots' queue route answers empty, `why` says so; resumed: claims.
    let (code, stdout, stderr) = workdo(
        &t.url,
        &["pause", "qWF:fetch", "--reason", "scanner service down"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("qWF:fetch paused"), "{stdout}");
    let (code, _, stderr) = workdo(&t.url, &["pause", "qWF:fetchh"]);
    assert_eq!(code, Some(2), "a misspelt step is named: {stderr}");
    assert!(stderr.contains("fetchh"), "{stderr}");
    let none = t
        .store
        .step_claim("qWF", "fetch", None, 10, "test", LEASE)
        .await
        .expect("claim");
    assert!(none.is_empty(), "paused: nothing claimed");
    let (_, why, _) = workdo(&t.url, &["why", &c.object_id, "qWF", "fetch"]);
    assert!(
        why.contains("paused") && why.contains("scanner service down"),
        "{why}"
    );
    let (_, listed, _) = workdo(&t.url, &["status"]);
    assert!(listed.contains("paused: qWF:fetch"), "{listed}");
    let base = support::serve_api(&t.store, workdo::api::Access::Open).await;
    let queue = reqwest::get(format!("{base}/workflow_queue?waiting=qWF:fetch"))
        .await
        .expect("queue")
        .text()
        .await
        .expect("body");
    assert!(queue.contains(r#"count="0""#), "{queue}");
    // Nor do the robots' other queue routes list it while it is paused.
    for route in [
        "/workflow_queue/lane_ids?step=qWF:fetch",
        "/workflow_queue/all_queued",
    ] {
        let body = reqwest::get(format!("{base}{route}"))
            .await
            .expect("route")
            .text()
            .await
            .expect("body");
        assert!(
            !body.contains("lane id=") && !body.contains("name=\"fetch\""),
            "{route}: {body}"
        );
    }
    let (code, stdout, _) = workdo(&t.url, &["resume", "qWF:fetch"]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("qWF:fetch resumed"), "{stdout}");
    let both = t
        .store
        .step_claim("qWF", "fetch", None, 10, "test", LEASE)
        .await
        .expect("claim");
    assert_eq!(
        both.len(),
        2,
        "resumed: the retry and the other are claimed"
    );
}

#[tokio::test]
async fn generated_steps_are_counted_under_their_bricklet_step() {
    let t = db().await;
    support::lecture_composed(&t, "druid:bb123cd4567").await;
    // Instances, one facet each before; now one row per bricklet step.
    let instances: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where name like 'feature-extraction/b4#%/keywords'",
    )
    .fetch_one(t.pool())
    .await
    .expect("instances");
    assert!(instances >= 2, "the lecture composes several b4 instances");
    let facets = t.store.facets(Some("lectureWF")).await.expect("facets");
    assert!(facets.iter().all(|f| !f.step.contains('#')), "{facets:?}");
    let keywords: i64 = facets
        .iter()
        .filter(|f| f.step == "feature-extraction/b4/keywords")
        .map(|f| f.count)
        .sum();
    assert_eq!(keywords, instances);
    // Pausing the row the overview shows pauses the queue every instance is claimed from.
    assert!(
        t.store
            .step_pause(
                "lectureWF",
                "feature-extraction/b1/key-frames",
                "test",
                None
            )
            .await
            .expect("pause")
    );
    let claim = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from workdo.claim_queue('lectureWF:b1/key-frames', null, 10, 'test', 60)",
        )
        .fetch_one(t.pool())
        .await
        .expect("claim")
    };
    assert_eq!(claim().await, 0, "paused");
    assert!(
        t.store
            .step_resume("lectureWF", "b1/key-frames")
            .await
            .expect("resume")
    );
    assert!(claim().await > 0, "resumed");
    // A machine's calls are counted under the function they call.
    let call: String = sqlx::query_scalar("select workdo.facet_name('call/notify-reviewer#12')")
        .fetch_one(t.pool())
        .await
        .expect("facet name");
    assert_eq!(call, "call/notify-reviewer");
    assert_eq!(
        workdo::store::queue_key("feature-extraction/b4#2/keywords"),
        "b4/keywords"
    );
    assert_eq!(
        workdo::store::queue_key("call/notify-reviewer#3"),
        "call/notify-reviewer"
    );
    // The drill-down lists every instance.
    let status: String = sqlx::query_scalar(
        "select status from workdo.steps where name like 'feature-extraction/b4#%/keywords' limit 1",
    )
    .fetch_one(t.pool())
    .await
    .expect("status");
    let (n, ids) = t
        .store
        .steps_in_all(
            "lectureWF",
            "feature-extraction/b4/keywords",
            &status,
            &Default::default(),
            1000,
        )
        .await
        .expect("steps");
    let in_status: i64 = facets
        .iter()
        .filter(|f| f.step == "feature-extraction/b4/keywords" && f.status == status)
        .map(|f| f.count)
        .sum();
    assert_eq!((n, ids.len() as i64), (in_status, in_status));
}

/// `--async-claims`: a claim made with `p_async`, a statement of its own as the runtime makes
/// it, commits without waiting for the flush; a claim without it stays synchronous, and nothing
/// outlives the claim's transaction. (The test cluster runs with `synchronous_commit = off`;
/// this session turns it on first.)
#[tokio::test]
async fn an_async_claim_turns_off_the_flush_for_its_own_transaction_only() {
    use sqlx::Connection as _;
    let t = db().await;
    let mut conn = t.pool().acquire().await.expect("a connection");
    sqlx::query("set synchronous_commit = on")
        .execute(&mut *conn)
        .await
        .expect("set");
    let claim = |p_async: bool| {
        format!(
            "with c as (select count(*) as n from workdo.claim('x', 'y', null, 1, 'o', 60, p_async => {p_async}))
             select current_setting('synchronous_commit') from c"
        )
    };
    let alone: String = sqlx::query_scalar(sqlx::AssertSqlSafe(claim(true)))
        .fetch_one(&mut *conn)
        .await
        .expect("claim");
    assert_eq!(alone, "off");
    let mut tx = conn.begin().await.expect("begin");
    let plain: String = sqlx::query_scalar(sqlx::AssertSqlSafe(claim(false)))
        .fetch_one(&mut *tx)
        .await
        .expect("claim");
    tx.commit().await.expect("commit");
    assert_eq!(plain, "on", "a claim without p_async stays synchronous");
    let after: String = sqlx::query_scalar("show synchronous_commit")
        .fetch_one(&mut *conn)
        .await
        .expect("show");
    assert_eq!(after, "on", "nothing outlives the claim's transaction");
}

/// The session is the first `workdo_token` cookie sent (the one of the most specific path): a
/// stale or planted one after it does not sign the person out.
#[tokio::test]
async fn the_first_session_cookie_is_the_session() {
    workdo::install_crypto();
    let t = db().await;
    let base = support::browser::serve(&t).await;
    let token = t
        .store
        .token_create(workdo::store::Role::Viewer, "cookie", None)
        .await
        .expect("token")
        .1;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let status = |cookie: String| {
        let http = http.clone();
        let base = base.clone();
        async move {
            http.get(format!("{base}/"))
                .header("cookie", cookie)
                .send()
                .await
                .expect("page")
                .status()
        }
    };
    assert_eq!(
        status(format!("workdo_token={token}; workdo_token=bogus")).await,
        200
    );
    assert_eq!(
        status(format!("workdo_token=bogus; workdo_token={token}")).await,
        303,
        "a bogus first cookie is the session: sent to sign in"
    );
}

// The overview's rows and filters, in a file of their own.
mod overview;
