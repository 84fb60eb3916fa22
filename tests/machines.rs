//! State machines against a real Postgres: every action, rollback, serialised signals, alarms
//! (once with two runtimes, after a restart, cancelled on leaving), function actions, global
//! signals, migration, SQL signals, access control and scoped tokens over real HTTP, and the
//! Articles-for-Deletion example driven to its final states.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{TestDb, config, db, load, start, wait_until};
use workdo::store::{StartRequest, StoreError};

/// A machine exercising the builtin actions.
const COUNTER: &str = r#"
name: counterWF
kind: machine
config: { grace: 1 hour, limit: 100 }
variables: { count: 0 }
initial: Idle
global:
  stop: Stopped
states:
  Idle:
    enter:
      - set: { entered: "${now}" }
    on:
      bump:
        to: Idle
        actions:
          - fail: { when: "count >= limit", message: "the limit is ${limit}" }
          - set: { count: "${count + 1}", by: "${signal.actor}" }
      add: { to: Idle, actions: [ { set: { count: "${count + signal.data.n}" } } ] }
      arm: Armed
      boom: { to: Armed, actions: [ { set: { count: 999 } }, { fail: "boom" } ] }
      chain: Chained
  Chained:
    enter:
      - signal: next
    on:
      next: Idle
  Armed:
    enter:
      - alarm: { signal: ring, in: "${grace}" }
    on:
      ring: Rung
      disarm: Idle
  Rung: { final: true }
  Stopped: { final: true }
"#;

/// Signal `signal` (no data) to job `id`, as actor "t".
async fn send(t: &TestDb, id: i64, signal: &str) -> Result<workdo::store::Signalled, StoreError> {
    t.store.machine_signal(id, signal, &json!({}), "t").await
}

async fn job(t: &TestDb, template: &str, object: &str) -> i64 {
    let started = t
        .store
        .workflow_start(&StartRequest::new(template, &[object]))
        .await
        .expect("start");
    started[0].workflow_id
}

async fn state(t: &TestDb, id: i64) -> (String, Value) {
    let record: Value = sqlx::query_scalar("select machine from workdo.workflows where id = $1")
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("machine");
    (
        record["state"].as_str().unwrap_or_default().to_string(),
        record["variables"].clone(),
    )
}

async fn count(t: &TestDb, sql: &str, id: i64) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("count")
}

#[tokio::test]
async fn signals_move_a_job_and_refusals_change_nothing() {
    let t = db().await;
    load(&t.store, "counter.yaml", COUNTER).await;
    let id = job(&t, "counterWF", "obj:c1").await;
    assert_eq!(state(&t, id).await.0, "Idle");
    let done = t
        .store
        .machine_signal(id, "bump", &json!({}), "ann")
        .await
        .expect("bump");
    assert_eq!((done.from.as_str(), done.to.as_str()), ("Idle", "Idle"));
    t.store
        .machine_signal(id, "add", &json!({"n": 5}), "bob")
        .await
        .expect("add");
    let (_, vars) = state(&t, id).await;
    assert_eq!(
        (vars["count"].clone(), vars["by"].clone()),
        (json!(6), json!("ann"))
    );
    // An unknown signal is refused, names what the state accepts, and changes nothing.
    let err = t
        .store
        .machine_signal(id, "nope", &json!({}), "ann")
        .await
        .expect_err("refused");
    assert!(matches!(err, StoreError::SignalRefused(_)), "{err}");
    assert!(
        err.to_string()
            .contains("accepts add, arm, boom, bump, chain, stop"),
        "{err}"
    );
    let err = t
        .store
        .machine_signal(id, "add", &json!({"n": "a\u{0}b"}), "ann")
        .await
        .expect_err("NUL");
    assert!(err.to_string().contains("NUL character"), "{err}");
    // A failing action rolls the whole transition back: state, variables, alarms untouched.
    let before = state(&t, id).await;
    let err = t
        .store
        .machine_signal(id, "boom", &json!({}), "ann")
        .await
        .expect_err("rolled back");
    assert!(matches!(err, StoreError::TransitionRolledBack(_)), "{err}");
    assert_eq!(state(&t, id).await, before);
    assert_eq!(
        count(
            &t,
            "select count(*) from workdo.alarms where workflow_id = $1",
            id
        )
        .await,
        0
    );
    let rollback: Value = sqlx::query_scalar(
        "select detail from workdo.events where workflow_id = $1 and kind = 'transition_rollback'",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("rollback event");
    assert_eq!(rollback["state"], "Idle");
    assert_eq!(rollback["transition"], "boom");
    assert!(
        rollback["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("boom")
    );
    // A self-stimulated signal follows its transition at once.
    let done = t
        .store
        .machine_signal(id, "chain", &json!({}), "ann")
        .await
        .expect("chain");
    assert_eq!(done.to, "Chained");
    assert_eq!(
        done.followed,
        vec![("next".to_string(), "Idle".to_string())]
    );
    // A global signal from any state, then a finished job refuses everything.
    let done = t
        .store
        .machine_signal(id, "stop", &json!({}), "ann")
        .await
        .expect("stop");
    assert!(done.finished);
    let status: String = sqlx::query_scalar("select status from workdo.workflows where id = $1")
        .bind(id)
        .fetch_one(t.pool())
        .await
        .expect("status");
    assert_eq!(status, "completed");
    let err = t
        .store
        .machine_signal(id, "bump", &json!({}), "ann")
        .await
        .expect_err("finished");
    assert!(err.to_string().contains("finished"), "{err}");
    // The event log has the RFC's events.
    let kinds: Vec<String> = sqlx::query_scalar(
        "select distinct kind from workdo.events where workflow_id = $1 order by kind",
    )
    .bind(id)
    .fetch_all(t.pool())
    .await
    .expect("kinds");
    for k in [
        "job_started",
        "signal_received",
        "action_fired",
        "state_entered",
        "transition_rollback",
    ] {
        assert!(kinds.contains(&k.to_string()), "{k} missing from {kinds:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_signals_to_one_job_are_serialised() {
    let t = db().await;
    load(&t.store, "counter.yaml", COUNTER).await;
    let id = job(&t, "counterWF", "obj:c50").await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..50 {
        let store = t.store.clone();
        tasks.spawn(async move {
            store
                .machine_signal(id, "bump", &json!({}), &format!("actor{i}"))
                .await
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task").expect("bump");
    }
    assert_eq!(state(&t, id).await.1["count"], 50);
}

#[tokio::test]
async fn an_alarm_fires_once_with_two_runtimes_and_is_cancelled_on_leaving() {
    let t = db().await;
    load(
        &t.store,
        "counter.yaml",
        &COUNTER.replace("grace: 1 hour", "grace: 300ms"),
    )
    .await;
    let rings = job(&t, "counterWF", "obj:ring").await;
    let disarmed = job(&t, "counterWF", "obj:disarm").await;
    send(&t, rings, "arm").await.expect("arm");
    send(&t, disarmed, "arm").await.expect("arm");
    send(&t, disarmed, "disarm").await.expect("disarm");
    let a = start(&t.store, config()).await;
    let b = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select machine ->> 'state' = 'Rung' from workdo.workflows where object_id = 'obj:ring'",
        30,
    )
    .await;
    // Both runtimes stopped: any pass either of them was in has finished. A second firing
    // would need an alarm still armed (unfired, uncancelled) or a second event.
    a.stop().await;
    b.stop().await;
    let armed = count(
        &t,
        "select count(*) from workdo.alarms where workflow_id = $1 and fired_at is null and cancelled_at is null",
        rings,
    )
    .await;
    assert_eq!(armed, 0, "an alarm is still armed after it fired");
    let fired = count(
        &t,
        "select count(*) from workdo.events where workflow_id = $1 and kind = 'alarm_fired'",
        rings,
    )
    .await;
    assert_eq!(fired, 1);
    assert_eq!(state(&t, disarmed).await.0, "Idle");
    let cancelled = count(
        &t,
        "select count(*) from workdo.alarms where workflow_id = $1 and cancelled_at is not null and fired_at is null",
        disarmed,
    )
    .await;
    assert_eq!(cancelled, 1);
}

#[tokio::test]
async fn an_alarm_due_while_no_runtime_ran_fires_after_a_restart() {
    let t = db().await;
    load(
        &t.store,
        "counter.yaml",
        &COUNTER.replace("grace: 1 hour", "grace: 100ms"),
    )
    .await;
    let id = job(&t, "counterWF", "obj:late").await;
    send(&t, id, "arm").await.expect("arm");
    // No runtime: the alarm comes due (waited for in the database, not by a sleep) and stays
    // unfired, the job in its state, until a runtime runs.
    wait_until(
        t.pool(),
        "select bool_and(a.due_at <= now()) from workdo.alarms a join workdo.workflows w on w.id = a.workflow_id where w.object_id = 'obj:late'",
        30,
    )
    .await;
    assert_eq!(state(&t, id).await.0, "Armed");
    let unfired = count(
        &t,
        "select count(*) from workdo.alarms where workflow_id = $1 and fired_at is null",
        id,
    )
    .await;
    assert_eq!(unfired, 1);
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select machine ->> 'state' = 'Rung' from workdo.workflows where object_id = 'obj:late'",
        30,
    )
    .await;
    rt.stop().await;
}

#[tokio::test]
async fn a_function_actions_result_comes_back_as_a_signal_and_its_failure_as_error() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let ok = support::function_script(
        dir.path(),
        "ok.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\",\"signal\":\"checked\",\"note\":\"fine\"}'\n",
    );
    let bad = support::function_script(
        dir.path(),
        "bad.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'no' >&2\nexit 2\n",
    );
    let machine = format!(
        "name: callWF\nkind: machine\ninitial: Wait\nstates:\n  Wait:\n    on:\n      go: {{ to: Checking, actions: [ {{ call: check }} ] }}\n      fail: {{ to: Failing, actions: [ {{ call: broken }} ] }}\n  Checking:\n    on:\n      checked: Done\n  Failing:\n    on:\n      error: Failed\n  Done: {{ final: true }}\n  Failed: {{ final: true }}\nfunctions:\n  check: {{ exec: {ok} }}\n  broken: {{ exec: {bad} }}\n"
    );
    load(&t.store, "call.yaml", &machine).await;
    let good = job(&t, "callWF", "obj:good").await;
    let failing = job(&t, "callWF", "obj:failing").await;
    send(&t, good, "go").await.expect("go");
    send(&t, failing, "fail").await.expect("fail");
    let mut cfg = config();
    cfg.backoff.max = Duration::from_millis(100);
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.workflows",
        60,
    )
    .await;
    rt.stop().await;
    assert_eq!(state(&t, good).await.0, "Done");
    assert_eq!(state(&t, failing).await.0, "Failed");
    let data: Value = sqlx::query_scalar(
        "select data from workdo.signals where workflow_id = $1 and signal = 'checked'",
    )
    .bind(good)
    .fetch_one(t.pool())
    .await
    .expect("signal");
    assert_eq!(data["note"], "fine");
    // The failure went through the usual alert path.
    let alerts = count(
        &t,
        "select count(*) from workdo.alert_outbox where workflow_id = $1 and kind = 'step_error'",
        failing,
    )
    .await;
    assert_eq!(alerts, 1);
}

#[tokio::test]
async fn a_signal_from_sql_is_taken_by_the_runtime_exactly_once() {
    let t = db().await;
    load(&t.store, "counter.yaml", COUNTER).await;
    let id = job(&t, "counterWF", "obj:sql").await;
    // As if a process committed signals and died before taking them: they wait in the inbox.
    for _ in 0..3 {
        sqlx::query("select workdo.signal($1, 'bump', '{}')")
            .bind(id)
            .execute(t.pool())
            .await
            .expect("signal");
    }
    let refused = sqlx::query("select workdo.signal(-1, 'bump')")
        .execute(t.pool())
        .await
        .expect_err("not a job");
    assert!(
        refused.to_string().contains("not a machine job"),
        "{refused}"
    );
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) = 0 from workdo.signals where processed_at is null",
        30,
    )
    .await;
    rt.stop().await;
    assert_eq!(state(&t, id).await.1["count"], 3);
}

#[tokio::test]
async fn migration_moves_jobs_with_a_map_and_refuses_without_one() {
    let t = db().await;
    load(&t.store, "counter.yaml", COUNTER).await;
    let id = job(&t, "counterWF", "obj:mig").await;
    send(&t, id, "arm").await.expect("arm");
    // Version 2 renames Armed to Primed.
    let v2 = COUNTER.replace("Armed", "Primed");
    load(&t.store, "counter.yaml", &v2).await;
    let sha = workdo::model::template::sha256_hex(&v2);
    let err = t
        .store
        .machine_migrate("counterWF", &sha[..16], &Default::default(), None, "t")
        .await
        .expect_err("refused");
    assert!(
        err.to_string()
            .contains("states Armed are not in counterWF"),
        "{err}"
    );
    assert_eq!(state(&t, id).await.0, "Armed");
    let mut map = std::collections::BTreeMap::new();
    map.insert("Armed".to_string(), "Primed".to_string());
    let n = t
        .store
        .machine_migrate("counterWF", &sha, &map, None, "t")
        .await
        .expect("migrated");
    assert_eq!(n, 1);
    assert_eq!(state(&t, id).await.0, "Primed");
    // The job now runs on version 2, alarms included.
    send(&t, id, "disarm").await.expect("disarm");
    // A no-op migration back is allowed (Idle exists in both) and recorded.
    let v1 = workdo::model::template::sha256_hex(COUNTER);
    t.store
        .machine_migrate("counterWF", &v1, &Default::default(), Some(id), "t")
        .await
        .expect("no-op migration");
    assert_eq!(
        count(
            &t,
            "select count(*) from workdo.events where workflow_id = $1 and kind = 'migrated'",
            id
        )
        .await,
        2
    );
}

#[tokio::test]
async fn the_articles_for_deletion_example_reaches_its_final_states() {
    let t = db().await;
    let dir = support::workflows_dir();
    for f in ["proposedDeletion.yaml", "articlesForDeletion.yaml"] {
        let loaded = workdo::cli::files::parse_file(&dir.join(f)).expect("valid");
        t.store.template_save(&loaded).await.expect("saved");
    }
    let start_afd = |object: &'static str, context: Value| {
        let store = t.store.clone();
        async move {
            let mut req = StartRequest::new("articlesForDeletion", &[object]);
            req.context = context;
            store.workflow_start(&req).await.expect("start")[0].workflow_id
        }
    };
    // 1. Kept by the discussion, then reversed on review.
    let kept = start_afd("obj:afd-keep", json!({})).await;
    assert_eq!(state(&t, kept).await.0, "Discussion");
    let done = send(&t, kept, "keep").await.expect("keep");
    assert_eq!(
        done.followed,
        vec![("review".to_string(), "Review".to_string())]
    );
    send(&t, kept, "reverse").await.expect("reverse");
    assert_eq!(state(&t, kept).await.0, "Reversed");
    // 2. Extended twice, a third extension refused by the guard; early renomination keeps it.
    let extended = start_afd("obj:afd-extend", json!({})).await;
    for _ in 0..2 {
        send(&t, extended, "extend").await.expect("extend");
    }
    let err = send(&t, extended, "extend").await.expect_err("guarded");
    assert!(err.to_string().contains("extended twice already"), "{err}");
    send(&t, extended, "early_renomination")
        .await
        .expect("global");
    assert_eq!(state(&t, extended).await.0, "Review");
    // 3. PROD: the child's alarm deletes, it tells the parent, whose review is endorsed by alarm.
    let prod = start_afd(
        "obj:afd-prod",
        json!({"prod": true, "prod_grace_period": "300ms", "longer_grace_period": "300ms"}),
    )
    .await;
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select machine ->> 'state' = 'Endorsed' from workdo.workflows where object_id = 'obj:afd-prod' and parent_id is null",
        30,
    )
    .await;
    rt.stop().await;
    let (_, vars) = state(&t, prod).await;
    assert_eq!(vars["outcome"], "delete");
    let child: (String, Option<i64>) = sqlx::query_as(
        "select machine ->> 'state', parent_id from workdo.workflows where template = 'proposedDeletion'",
    )
    .fetch_one(t.pool())
    .await
    .expect("child");
    assert_eq!(child, ("Deleted".to_string(), Some(prod)));
    let mails = count(
        &t,
        "select count(*) from workdo.alert_outbox where workflow_id = $1 and kind = 'mail'",
        prod,
    )
    .await;
    assert_eq!(mails, 1);
}

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

#[test]
fn machine_descriptions_are_checked_when_loading() {
    use workdo::model::template::{Format, parse};
    let bad = "name: badWF\nkind: machine\ninitial: Nowhere\nglobal:\n  cancel: Gone\nstates:\n  A:\n    enter:\n      - set: { x: \"${1 +}\" }\n      - call: missing\n      - alarm: { signal: s, in: soon }\n    on:\n      go: B\n  F:\n    final: true\n    on: { go: A }\n";
    let err = parse("bad.yaml", Format::Yaml, bad).expect_err("refused");
    let all = err.to_string();
    for expected in [
        "initial: \"Nowhere\" is not one of the states",
        "global: global cancel --> \"Gone\": no such state",
        "A --go--> \"B\": no such state",
        "call: \"missing\" is not one of the functions",
        "alarm \"s\": \"soon\" is not a duration",
        "final state F cannot take signals",
        "set: ",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    assert!(
        err.problems
            .iter()
            .all(|p| p.file == "bad.yaml" && p.line.is_some()),
        "{all}"
    );
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

#[tokio::test]
async fn a_machine_that_forks_itself_or_signals_itself_for_ever_is_bounded() {
    let t = db().await;
    // Forks itself (on a new object each time) on entering its first state: the 16th
    // generation's start fails, and with it the whole start (nothing of it is kept).
    load(
        &t.store,
        "forever.yaml",
        "name: foreverWF\nkind: machine\nconfig: { n: 0 }\ninitial: A\nstates:\n  A:\n    enter:\n      - fork: { template: foreverWF, object: \"obj:f${n + 1}\", context: { n: \"${n + 1}\" } }\n",
    )
    .await;
    let err = t
        .store
        .workflow_start(&StartRequest::new("foreverWF", &["obj:forever"]))
        .await
        .expect_err("bounded");
    assert!(err.to_string().contains("nest more than 16 deep"), "{err}");
    let left: i64 = sqlx::query_scalar("select count(*) from workdo.workflows")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(left, 0);
    // Forking its own template on its own object would replace itself: refused.
    load(
        &t.store,
        "self.yaml",
        "name: selfWF\nkind: machine\ninitial: A\nstates:\n  A:\n    on: { go: { to: A, actions: [ { fork: { template: selfWF } } ] } }\n",
    )
    .await;
    let me = job(&t, "selfWF", "obj:self").await;
    let err = send(&t, me, "go").await.expect_err("refused");
    assert!(
        err.to_string()
            .contains("cannot fork its own template on its own object"),
        "{err}"
    );
    // Signals itself for ever: a command takes 1,000 follow-ups and returns; the rest wait.
    load(
        &t.store,
        "loop.yaml",
        "name: loopWF\nkind: machine\ninitial: Idle\nstates:\n  Idle:\n    on: { go: Spin }\n  Spin:\n    enter:\n      - signal: again\n    on: { again: Spin }\n",
    )
    .await;
    let id = job(&t, "loopWF", "obj:loop").await;
    let done = send(&t, id, "go").await.expect("go");
    assert_eq!(done.followed.len(), 1000);
    let pending = count(
        &t,
        "select count(*) from workdo.signals where workflow_id = $1 and processed_at is null",
        id,
    )
    .await;
    assert_eq!(pending, 1);
}
