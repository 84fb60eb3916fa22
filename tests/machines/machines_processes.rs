//! State machines across processes and over HTTP: access rules and scoped tokens on the signal
//! routes, the loan review run by `workdo up` and driven by the CLI, the API and SQL, a kill -9
//! between a signal's commit and its follow-ups, and two processes taking one inbox.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::machines::{count, job, send, state};
use support::{config, db, load, start, wait_until};

#[tokio::test]
async fn access_and_scoped_tokens_decide_who_signals_over_http() {
    use workdo::api::{Access, AppState, app};
    use workdo::store::Role;
    workdo::install_crypto();
    let t = db().await;
    load(
        &t.store,
        "guarded.yaml",
        "name: guardedWF\nkind: machine\naccess: { start: [robot], signals: { approve: [admin], \"*\": [robot] } }\ninitial: Open\nstates:\n  Open:\n    on: { approve: Done, poke: Open, reject: Done }\n  Done: { final: true }\n",
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let app_state = AppState {
        store: t.store.clone(),
        access: Access::Tokens,
    };
    tokio::spawn(async move { axum::serve(listener, app(app_state)).await });
    let robot = t
        .store
        .token_create(Role::Robot, "r", None)
        .await
        .expect("token")
        .1;
    let viewer = t
        .store
        .token_create(Role::Viewer, "v", None)
        .await
        .expect("token")
        .1;
    let http = reqwest::Client::new();
    let post = |path: String, token: String, body: Value| {
        let http = http.clone();
        let base = base.clone();
        async move {
            let r = http
                .post(format!("{base}{path}"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .expect("request");
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        }
    };
    // Start: robots may; viewers may not.
    let (s, _) = post(
        "/api/workflows".into(),
        viewer.clone(),
        json!({"template": "guardedWF", "objects": ["obj:g"]}),
    )
    .await;
    assert_eq!(s, 403);
    let (s, body) = post(
        "/api/workflows".into(),
        robot.clone(),
        json!({"template": "guardedWF", "objects": ["obj:g"]}),
    )
    .await;
    assert_eq!(s, 201, "{body}");
    let id = t
        .store
        .machine_job("obj:g", "guardedWF")
        .await
        .expect("job");
    // A robot may poke but not approve; a viewer may do neither.
    let (s, body) = post(
        format!("/api/workflows/{id}/signals"),
        robot.clone(),
        json!({"signal": "poke"}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let (s, _) = post(
        format!("/api/workflows/{id}/signals"),
        robot.clone(),
        json!({"signal": "approve"}),
    )
    .await;
    assert_eq!(s, 403);
    let (s, _) = post(
        "/api/objects/obj:g/workflows/guardedWF/signals".into(),
        viewer.clone(),
        json!({"signal": "poke"}),
    )
    .await;
    assert_eq!(s, 403);
    // A token scoped to this job and `approve` does exactly that, and nothing else.
    let (_, scoped) = t
        .store
        .token_create_scoped(id, &["approve".to_string()], "reviewer", None)
        .await
        .expect("scoped");
    let (s, _) = post(
        format!("/api/workflows/{id}/signals"),
        scoped.clone(),
        json!({"signal": "reject"}),
    )
    .await;
    assert_eq!(s, 403);
    let r = http
        .get(format!("{base}/api/workflows/{id}"))
        .bearer_auth(&scoped)
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 403, "a scoped token reads nothing");
    assert_eq!(state(&t, id).await.0, "Open");
    let (s, body) = post(
        format!("/api/workflows/{id}/signals"),
        scoped.clone(),
        json!({"signal": "approve"}),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(state(&t, id).await.0, "Done");
    // A signal to a finished job is a conflict.
    let (s, body) = post(
        format!("/api/workflows/{id}/signals"),
        scoped,
        json!({"signal": "approve"}),
    )
    .await;
    assert_eq!(s, 409, "{body}");
    // Expired scoped tokens are refused.
    let (_, expired) = t
        .store
        .token_create_scoped(
            id,
            &["approve".to_string()],
            "old",
            Some(chrono::Utc::now() - chrono::Duration::seconds(1)),
        )
        .await
        .expect("scoped");
    let (s, _) = post(
        format!("/api/workflows/{id}/signals"),
        expired,
        json!({"signal": "approve"}),
    )
    .await;
    assert_eq!(s, 401);
}

#[tokio::test]
async fn the_loan_review_runs_under_workdo_up_driven_by_cli_api_and_sql() {
    workdo::install_crypto();
    let t = db().await;
    let root = support::workflows_dir().join("..");
    let workdo = env!("CARGO_BIN_EXE_workdo");
    let cli = |args: &[&str]| {
        std::process::Command::new(workdo)
            .args(args)
            .env("DATABASE_URL", &t.url)
            .env("RUST_LOG", "error")
            .current_dir(&root)
            .output()
            .expect("workdo")
    };
    let ok = |args: &[&str]| {
        let out = cli(args);
        assert!(
            out.status.success(),
            "workdo {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ok(&[
        "templates",
        "load",
        "workflows/loanReviewWF.yaml",
        "workflows/proposedDeletion.yaml",
        "workflows/articlesForDeletion.yaml",
    ]);
    for o in ["obj:loan-cli", "obj:loan-api", "obj:loan-sql"] {
        ok(&["start", "loanReviewWF", o]);
    }
    ok(&["start", "articlesForDeletion", "obj:afd-up"]);
    let (_, token) = t
        .store
        .token_create(workdo::store::Role::Admin, "test", None)
        .await
        .expect("token");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let listen = format!("127.0.0.1:{port}");
    let mut up = support::spawn_workdo(
        &t.url,
        &["up", "--listen", &listen, "--poll-interval", "200ms"],
    );
    // The notify-reviewer function runs under `workdo up` and signals `notified` back.
    wait_until(
        t.pool(),
        "select count(*) = 3 from workdo.workflows where machine ->> 'state' = 'Notified'",
        60,
    )
    .await;
    // CLI: a refused signal exits 1 with the reason; an accepted one prints the transition.
    let refused = cli(&["signal", "obj:loan-cli", "loanReviewWF", "open"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not accepted in Notified"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let moved = ok(&["signal", "obj:loan-cli", "loanReviewWF", "approve"]);
    assert!(moved.contains("Notified --approve--> Approved"), "{moved}");
    // API.
    let http = reqwest::Client::new();
    let url =
        format!("http://127.0.0.1:{port}/api/objects/obj:loan-api/workflows/loanReviewWF/signals");
    let answered = loop {
        match http
            .post(&url)
            .bearer_auth(&token)
            .json(&json!({"signal": "reject"}))
            .send()
            .await
        {
            Ok(r) => break r,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert_eq!(answered.status().as_u16(), 200);
    // SQL: taken by the runtime.
    let sql_job = t
        .store
        .machine_job("obj:loan-sql", "loanReviewWF")
        .await
        .expect("job");
    sqlx::query("select workdo.signal($1, 'cancel')")
        .bind(sql_job)
        .execute(t.pool())
        .await
        .expect("signal");
    // The AfD example under the same runtime: kept by the CLI, the keep reversed through the API.
    let kept = ok(&["signal", "obj:afd-up", "articlesForDeletion", "keep"]);
    assert!(kept.contains("Discussion --keep--> Keep"), "{kept}");
    // Its self-stimulated `review` is taken by this command or by the runtime, once.
    wait_until(
        t.pool(),
        "select machine ->> 'state' = 'Review' from workdo.workflows where object_id = 'obj:afd-up'",
        30,
    )
    .await;
    let reversed = http
        .post(format!(
            "http://127.0.0.1:{port}/api/objects/obj:afd-up/workflows/articlesForDeletion/signals"
        ))
        .bearer_auth(&token)
        .json(&json!({"signal": "reverse"}))
        .send()
        .await
        .expect("reverse");
    assert_eq!(reversed.status().as_u16(), 200);
    wait_until(
        t.pool(),
        "select count(*) = 4 from workdo.workflows where status = 'completed'",
        30,
    )
    .await;
    up.kill().expect("stop");
    up.wait().expect("reaped");
    let afd: String = sqlx::query_scalar(
        "select machine ->> 'state' from workdo.workflows where object_id = 'obj:afd-up'",
    )
    .fetch_one(t.pool())
    .await
    .expect("afd");
    assert_eq!(afd, "Reversed");
    let states: Vec<String> = sqlx::query_scalar(
        "select machine ->> 'state' from workdo.workflows
          where template = 'loanReviewWF' order by object_id",
    )
    .fetch_all(t.pool())
    .await
    .expect("states");
    assert_eq!(states, vec!["Rejected", "Approved", "Cancelled"]);
    // show --json and why describe a job.
    let shown: Value =
        serde_json::from_str(&ok(&["--json", "show", "obj:loan-cli"])).expect("json");
    assert_eq!(shown["workflows"][0]["machine"]["state"], "Approved");
    assert_eq!(
        shown["workflows"][0]["machine"]["variables"]["approved_by"],
        "cli"
    );
    let graph = ok(&["graph", "obj:loan-cli", "loanReviewWF"]);
    assert!(graph.starts_with("stateDiagram-v2"), "{graph}");
    assert!(graph.contains("Review --> Approved: approve"), "{graph}");
}

/// A chain of 200 self-stimulated transitions, started by `workdo signal` (which takes the
/// follow-ups itself) and killed with SIGKILL part-way: the runtime started afterwards finishes
/// the chain, and every transition happened exactly once.
#[tokio::test]
async fn kill_9_between_a_signals_commit_and_its_follow_ups_loses_and_repeats_nothing() {
    let t = db().await;
    load(
        &t.store,
        "chain.yaml",
        "name: chainWF\nkind: machine\nvariables: { count: 0 }\ninitial: Idle\nstates:\n  Idle:\n    on:\n      go: Loop\n  Loop:\n    enter:\n      - signal: tick\n    on:\n      tick:\n        to: Loop\n        actions:\n          - fail: { when: \"count >= 200\", message: done }\n          - set: { count: \"${count + 1}\" }\n",
    )
    .await;
    let id = job(&t, "chainWF", "obj:chain").await;
    let mut signal = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["signal", "obj:chain", "chainWF", "go"])
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("workdo signal");
    // Kill it once the chain is under way, not before and not after.
    wait_until(
        t.pool(),
        "select (machine -> 'variables' ->> 'count')::int >= 20 from workdo.workflows where object_id = 'obj:chain'",
        60,
    )
    .await;
    signal.kill().expect("kill -9");
    signal.wait().expect("reaped");
    let at_kill = state(&t, id).await.1["count"].as_i64().unwrap_or_default();
    assert!(at_kill < 200, "the chain ended before the kill ({at_kill})");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) = 0 from workdo.signals where processed_at is null",
        60,
    )
    .await;
    rt.stop().await;
    assert_eq!(state(&t, id).await.1["count"], 200);
    let ticks = count(
        &t,
        "select count(*) from workdo.signals where workflow_id = $1 and signal = 'tick'",
        id,
    )
    .await;
    // 200 counted ticks and the one the guard refused.
    assert_eq!(ticks, 201);
    let rollbacks = count(
        &t,
        "select count(*) from workdo.events where workflow_id = $1 and kind = 'transition_rollback'",
        id,
    )
    .await;
    assert_eq!(rollbacks, 1);
}

/// Two takers of one job's inbox at once (a command taking its follow-ups while the runtime's
/// loop does the same): every signal is taken exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_taking_one_inbox_take_each_signal_once() {
    let t = db().await;
    load(
        &t.store,
        "chain.yaml",
        "name: chainWF\nkind: machine\nvariables: { count: 0 }\ninitial: Idle\nstates:\n  Idle:\n    on:\n      go: Loop\n  Loop:\n    enter:\n      - signal: tick\n    on:\n      tick:\n        to: Loop\n        actions:\n          - fail: { when: \"count >= 200\", message: done }\n          - set: { count: \"${count + 1}\" }\n",
    )
    .await;
    let id = job(&t, "chainWF", "obj:race").await;
    let store = t.store.clone();
    let racer = tokio::spawn(async move {
        for _ in 0..2000 {
            store.machine_inbox_run(10).await.expect("inbox");
            tokio::task::yield_now().await;
        }
    });
    send(&t, id, "go").await.expect("go");
    racer.await.expect("racer");
    t.store.machine_inbox_run(10).await.expect("inbox");
    assert_eq!(state(&t, id).await.1["count"], 200);
    let rollbacks = count(
        &t,
        "select count(*) from workdo.events where workflow_id = $1 and kind = 'transition_rollback'",
        id,
    )
    .await;
    assert_eq!(rollbacks, 1);
    let received = count(
        &t,
        "select count(*) from workdo.events where workflow_id = $1 and kind = 'signal_received'",
        id,
    )
    .await;
    // go and the 200 ticks counted (the refused one rolled back with its event).
    assert_eq!(received, 201);
}
