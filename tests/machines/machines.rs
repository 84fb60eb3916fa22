//! State machines against a real Postgres: every action, rollback, serialised signals, alarms
//! (once with two runtimes, after a restart, cancelled on leaving), function actions, global
//! signals, migration, SQL signals, descriptions checked at load, the Articles-for-Deletion
//! example driven to its final states, and machines that would run for ever, bounded.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::machines::{COUNTER, count, job, send, state};
use support::{config, db, load, start, wait_until};
use workdo::store::{StartRequest, StoreError};

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
    // ... and leaves a trace: a `signal_refused` event with the signal, actor, state and why.
    let refused: serde_json::Value = sqlx::query_scalar(
        "select detail from workdo.events where workflow_id = $1 and kind = 'signal_refused'",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("a signal_refused event");
    assert_eq!(
        (&refused["signal"], &refused["actor"], &refused["state"]),
        (&json!("nope"), &json!("ann"), &json!("Idle"))
    );
    assert!(
        refused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not accepted in Idle")),
        "{refused}"
    );
    let err = t
        .store
        .machine_signal(id, "add", &json!({"n": "a\u{0}b"}), "ann")
        .await
        .expect_err("NUL");
    assert!(err.to_string().contains("NUL character"), "{err}");
    let long = "s".repeat(201);
    let err = t
        .store
        .machine_signal(id, &long, &json!({}), "ann")
        .await
        .expect_err("a name over 200 characters");
    assert!(
        err.to_string()
            .contains("name has 201 characters, over the limit of 200"),
        "{err}"
    );
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
    support::all_completed(t.pool(), 60).await;
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
    // Issue 47 item 12: what loading missed — an expression nested in a `set` value, an
    // `alarm at:` that is no time, an alarm's signal that is no name, a mail to no address.
    let worse = "name: worseWF\nkind: machine\ninitial: A\nstates:\n  A:\n    enter:\n      - set: { x: { y: [ \"${1 +}\" ] } }\n      - alarm: { signal: s, at: tomorrow }\n      - alarm: { signal: \"no good\", in: 5m }\n      - mail: { to: not-an-address, subject: hi }\n";
    let err = parse("worse.yaml", Format::Yaml, worse).expect_err("refused");
    let all = err.to_string();
    for expected in [
        "set: ",
        "at: \"tomorrow\" is not an RFC 3339 time",
        "alarm: invalid signal name \"no good\"",
        "mail: to: \"not-an-address\" is not an address",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    // One address, not a list, is taken.
    let one = "name: oneWF\nkind: machine\ninitial: A\nstates:\n  A:\n    enter:\n      - mail: { to: ops@library.example.org, subject: hi }\n";
    parse("one.yaml", Format::Yaml, one).expect("a single address");
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
    let said = err.to_string();
    assert!(said.contains("nest more than 16 deep"), "{said}");
    // Said once, as the chain of templates (issue 47 item 24: 5.8 KB of nested rollbacks).
    assert_eq!(said.matches("rolled back").count(), 1, "{said}");
    assert!(said.contains("foreverWF → foreverWF"), "{said}");
    assert!(said.len() < 1_000, "{} bytes: {said}", said.len());
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
