//! Machine transitions as plans, applied by the store (locked, or unlocked when only events are
//! recorded; racing senders, a signal that waited for the lock, and jobs kept as written): an
//! internal transition keeps its state's alarms and does not re-enter it; a final state skips
//! the job's pending steps through the one status path, each with its `skipped` event; a `}`
//! inside a string and a guarded optional key in a real template.

use crate::support;

use serde_json::json;
use support::db;
use support::machines::{count, job, send, state};

const DESK: &str = r#"
name: deskWF
kind: machine
initial: Idle
states:
  Idle:
    on:
      open: Open
  Open:
    enter:
      - alarm: { signal: close, in: 1h }
      - call: scan
    on:
      pay: { to: Open, internal: true, actions: [ { set: { paid: "${(paid ?? 0) + 1}" } } ] }
      reopen: Open
      note: { to: Open, internal: true, actions: [ { set: { note: "{${signal.data.text ?? '}'}}" } } ] }
      close: Closed
  Closed: { final: true }
functions:
  scan: { builtin: noop }
"#;

#[tokio::test]
async fn an_internal_transition_keeps_the_states_alarms_and_enters_nothing() {
    let t = db().await;
    support::load(&t.store, "desk.yaml", DESK).await;
    let id = job(&t, "deskWF", "obj:desk1").await;
    send(&t, id, "open").await.expect("open");
    let armed = "select count(*) from workdo.alarms where workflow_id = $1 and fired_at is null and cancelled_at is null";
    let calls =
        "select count(*) from workdo.steps where workflow_id = $1 and name like 'call/scan#%'";
    assert_eq!(
        (count(&t, armed, id).await, count(&t, calls, id).await),
        (1, 1)
    );

    for _ in 0..2 {
        send(&t, id, "pay").await.expect("pay");
    }
    let (s, vars) = state(&t, id).await;
    assert_eq!((s.as_str(), &vars["paid"]), ("Open", &json!(2)));
    assert_eq!(
        (count(&t, armed, id).await, count(&t, calls, id).await),
        (1, 1),
        "the alarm stays, the enter actions do not run again"
    );
    assert_eq!(
        count(
            &t,
            "select count(*) from workdo.events where workflow_id = $1 and kind = 'state_entered'",
            id
        )
        .await,
        1
    );

    // A transition back to the same state without `internal` leaves and enters it again.
    send(&t, id, "reopen").await.expect("reopen");
    assert_eq!(
        (count(&t, armed, id).await, count(&t, calls, id).await),
        (1, 2)
    );
    assert_eq!(
        count(
            &t,
            "select count(*) from workdo.alarms where workflow_id = $1 and cancelled_at is not null",
            id
        )
        .await,
        1
    );

    // Braces inside strings, and an optional key guarded.
    t.store
        .machine_signal(id, "note", &json!({"text": "a}b"}), "t")
        .await
        .expect("note");
    assert_eq!(state(&t, id).await.1["note"], json!("{a}b}"));
    send(&t, id, "note").await.expect("note without text");
    assert_eq!(state(&t, id).await.1["note"], json!("{}}"));
}

#[tokio::test]
async fn a_final_state_skips_pending_steps_through_the_status_path() {
    let t = db().await;
    support::load(&t.store, "desk.yaml", DESK).await;
    let id = job(&t, "deskWF", "obj:desk2").await;
    send(&t, id, "open").await.expect("open");
    send(&t, id, "reopen").await.expect("reopen");
    let done = send(&t, id, "close").await.expect("close");
    assert!(done.finished);
    let (skipped, events): (i64, i64) = sqlx::query_as(
        "select (select count(*) from workdo.steps where workflow_id = $1 and status = 'skipped'),
                (select count(*) from workdo.events where workflow_id = $1 and kind = 'skipped')",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("counts");
    assert_eq!(
        (skipped, events),
        (2, 2),
        "each pending call step skipped with its event"
    );
    let (status, unfinished): (String, i32) =
        sqlx::query_as("select status, unfinished from workdo.workflows where id = $1")
            .bind(id)
            .fetch_one(t.pool())
            .await
            .expect("workflow");
    assert_eq!((status.as_str(), unfinished), ("completed", 0));
}

/// The shipped loanReviewWF: a notified review still expires, and reminders from either state
/// are limited to three and keep the expiry running; docs/machines.md shows the file as shipped.
#[tokio::test]
async fn the_shipped_loan_review_expires_once_notified_and_limits_reminders() {
    let t = db().await;
    let path = support::workflows_dir().join("loanReviewWF.yaml");
    let shipped = std::fs::read_to_string(&path).expect("loanReviewWF.yaml");
    support::load(&t.store, "loanReviewWF.yaml", &shipped).await;
    let id = job(&t, "loanReviewWF", "obj:loan1").await;
    assert_eq!(state(&t, id).await.0, "Review");
    let armed = "select count(*) from workdo.alarms where workflow_id = $1 and signal = 'expire' and fired_at is null and cancelled_at is null";
    assert_eq!(count(&t, armed, id).await, 1);
    send(&t, id, "remind").await.expect("a reminder in Review");
    assert_eq!(count(&t, armed, id).await, 1, "a reminder keeps the expiry");
    send(&t, id, "notified").await.expect("notified");
    assert_eq!(state(&t, id).await.0, "Notified");
    assert_eq!(count(&t, armed, id).await, 1, "Notified expires too");
    send(&t, id, "remind").await.expect("second reminder");
    send(&t, id, "notified")
        .await
        .expect("its notice comes back");
    send(&t, id, "remind").await.expect("third reminder");
    let err = send(&t, id, "remind").await.expect_err("a fourth");
    assert!(
        err.to_string().contains("already reminded three times"),
        "{err}"
    );
    let (s, vars) = state(&t, id).await;
    assert_eq!((s.as_str(), &vars["reminders"]), ("Notified", &json!(3)));
    assert_eq!(count(&t, armed, id).await, 1);
    let calls = "select count(*) from workdo.steps where workflow_id = $1 and name like 'call/notify-reviewer#%'";
    assert_eq!(
        count(&t, calls, id).await,
        4,
        "the first notice and three reminders"
    );

    let readme = std::fs::read_to_string(support::workflows_dir().join("../docs/machines.md"))
        .expect("docs/machines.md");
    let body: String = shipped
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("name:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        readme.contains(&body),
        "docs/machines.md's loanReviewWF differs from the shipped file"
    );
}

/// A suspended job takes nothing: a given signal is queued (answered as such), an alarm that
/// falls due waits in the inbox, the runtime's inbox loop passes it by; resuming takes what
/// waited, in order. Both are events.
#[tokio::test]
async fn a_suspended_job_takes_nothing_until_it_is_resumed() {
    let t = db().await;
    support::load(&t.store, "desk.yaml", &DESK.replace("in: 1h", "in: 1s")).await;
    let id = job(&t, "deskWF", "obj:desk3").await;
    send(&t, id, "open").await.expect("open");
    let s = t
        .store
        .machine_suspend(id, true, "t")
        .await
        .expect("suspend");
    assert!(s.changed && s.suspended);
    let again = t.store.machine_suspend(id, true, "t").await.expect("again");
    assert!(!again.changed, "suspending twice changes nothing");

    let queued = send(&t, id, "pay").await.expect("queued");
    assert!(queued.queued, "{queued:?}");
    // A signal its state does not accept is refused now, suspended or not.
    let err = send(&t, id, "nosuch").await.expect_err("not accepted");
    assert!(err.to_string().contains("not accepted in Open"), "{err}");
    // The alarm falls due and fires into the inbox; nothing takes it while suspended.
    support::wait_until(
        t.pool(),
        "select now() > due_at from workdo.alarms where signal = 'close'",
        10,
    )
    .await;
    t.store.machine_alarms_fire(100).await.expect("alarms");
    assert_eq!(t.store.machine_inbox_run(100).await.expect("inbox"), 0);
    // `why` (and show) say it is suspended and what waits in its inbox.
    let view = t
        .store
        .machine_view(id)
        .await
        .expect("view")
        .expect("a job");
    let waiting: Vec<&str> = view
        .inbox
        .iter()
        .filter_map(|s| s["signal"].as_str())
        .collect();
    assert!(view.suspended);
    assert_eq!(waiting, ["pay", "close"]);
    let (s, vars) = state(&t, id).await;
    assert_eq!(
        (s.as_str(), &vars["paid"]),
        ("Open", &serde_json::Value::Null)
    );

    let resumed = t
        .store
        .machine_suspend(id, false, "t")
        .await
        .expect("resume");
    let taken: Vec<String> = resumed.taken.iter().map(|(s, _)| s.clone()).collect();
    assert_eq!(taken, ["pay", "close"], "what waited, in order");
    let (s, vars) = state(&t, id).await;
    assert_eq!((s.as_str(), &vars["paid"]), ("Closed", &json!(1)));
    let kinds = sqlx::query_scalar::<_, String>(
        "select kind from workdo.events where workflow_id = $1 and kind like 'job_%' order by id",
    )
    .bind(id)
    .fetch_all(t.pool())
    .await
    .expect("events");
    assert_eq!(kinds, ["job_started", "job_suspended", "job_resumed"]);
    let err = t
        .store
        .machine_suspend(id, true, "t")
        .await
        .expect_err("finished");
    assert!(
        err.to_string()
            .contains("not a machine job that is still running"),
        "{err}"
    );
}

/// A signal whose transition only records events is written unlocked, on the condition that
/// the job is still the version read (store/machine/unlocked.rs); when two senders race, the
/// loser's write applies to nothing and is decided again under the lock. Every one of 2 × 150
/// bumps must count once, each with its `signal_received` event, and a bump past the limit
/// (an action that fails) is still rolled back with its event, the count kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_senders_at_once_count_every_signal_once() {
    let t = db().await;
    let counter = support::machines::COUNTER.replace("limit: 100", "limit: 300");
    support::load(&t.store, "counter.yaml", &counter).await;
    let id = job(&t, "counterWF", "obj:race1").await;
    let mut senders = tokio::task::JoinSet::new();
    for who in ["a", "b"] {
        let store = t.store.clone();
        senders.spawn(async move {
            for _ in 0..150 {
                store
                    .machine_signal(id, "bump", &json!({}), who)
                    .await
                    .expect("bump");
            }
        });
    }
    while let Some(done) = senders.join_next().await {
        done.expect("a sender");
    }
    let (s, vars) = state(&t, id).await;
    assert_eq!((s.as_str(), &vars["count"]), ("Idle", &json!(300)));
    let received = "select count(*) from workdo.events
                     where workflow_id = $1 and kind = 'signal_received'";
    assert_eq!(count(&t, received, id).await, 300);
    let refused = send(&t, id, "bump").await;
    assert!(refused.is_err(), "past the limit: {refused:?}");
    assert_eq!(state(&t, id).await.1["count"], json!(300));
    let rolled = "select count(*) from workdo.events
                   where workflow_id = $1 and kind = 'transition_rollback'";
    assert_eq!(count(&t, rolled, id).await, 1);
}

const RACE: &str = r#"
name: raceWF
kind: machine
initial: A
states:
  A:
    on: { go: B }
  B:
    enter:
      - alarm: { signal: tick, in: 1h }
    on:
      next: C
      tick: C
  C: {}
"#;

/// A signal that waits for the job's lock sees what the transaction it waited for wrote: here
/// that transaction moves the job to B and sets B's alarm, and the waiting `next` leaves B, so
/// it must cancel that alarm. (A statement that waits for a row lock evaluates its subqueries in
/// the snapshot it started with: read with the lock, the alarm would not be seen, left set, and
/// ring later into C.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_that_waited_for_the_lock_sees_the_alarm_set_meanwhile() {
    let t = db().await;
    support::load(&t.store, "race.yaml", RACE).await;
    let id = job(&t, "raceWF", "obj:race2").await;
    // Another transaction holds the job and makes the transition `go` would.
    let mut other = t.pool.begin().await.expect("begin");
    sqlx::query("select id from workdo.workflows where id = $1 for update")
        .bind(id)
        .execute(&mut *other)
        .await
        .expect("lock");
    let store = t.store.clone();
    let waiting = tokio::spawn(async move {
        store
            .machine_signal(id, "next", &json!({}), "t")
            .await
            .expect("next")
    });
    // The signal is refused unlocked (A does not take `next`) and waits for the lock.
    while support::lock_waiters(t.pool()).await == 0 {
        tokio::task::yield_now().await;
    }
    sqlx::query(
        "update workdo.workflows set machine = jsonb_set(machine, '{state}', '\"B\"') where id = $1",
    )
    .bind(id)
    .execute(&mut *other)
    .await
    .expect("to B");
    sqlx::query(
        "insert into workdo.alarms (workflow_id, state, signal, due_at)
         values ($1, 'B', 'tick', now() + interval '1 hour')",
    )
    .bind(id)
    .execute(&mut *other)
    .await
    .expect("alarm");
    other.commit().await.expect("commit");
    let moved = waiting.await.expect("the signal");
    assert_eq!((moved.from.as_str(), moved.to.as_str()), ("B", "C"));
    let set = "select count(*) from workdo.alarms
                where workflow_id = $1 and fired_at is null and cancelled_at is null";
    assert_eq!(
        count(&t, set, id).await,
        0,
        "B's alarm is cancelled on leaving B"
    );
}

/// A job this process signalled is kept as written, so that its next signal is planned without
/// reading it. Changed since by another process (another store, with a cache of its own), the
/// kept version must not be written over: the signal is planned again from the job as it is.
#[tokio::test]
async fn a_job_changed_elsewhere_is_planned_afresh_not_from_what_was_kept() {
    let t = db().await;
    support::load(&t.store, "counter.yaml", support::machines::COUNTER).await;
    let id = job(&t, "counterWF", "obj:kept1").await;
    let elsewhere = workdo::store::Store::new(t.pool().clone());
    send(&t, id, "bump").await.expect("bump here");
    for _ in 0..2 {
        elsewhere
            .machine_signal(id, "bump", &json!({}), "other")
            .await
            .expect("bump elsewhere");
    }
    for _ in 0..2 {
        send(&t, id, "bump").await.expect("bump here again");
    }
    assert_eq!(state(&t, id).await.1["count"], json!(5), "no bump lost");
    let received = "select count(*) from workdo.events
                     where workflow_id = $1 and kind = 'signal_received'";
    assert_eq!(count(&t, received, id).await, 5);
}

const KIDS: &str = r#"
name: kidsWF
kind: machine
initial: Idle
states:
  Idle:
    on:
      go: { to: Idle, internal: true, actions: [ { fork: { template: kidWF, object: "obj:kid1" } } ] }
      count: { to: Idle, internal: true, actions: [ { set: { kids: "${children.running}" } } ] }
"#;

/// What a kept job cannot show by its row version, its children still running, is checked by
/// the write: a child that ended since (which writes the child, not the job) makes the signal
/// planned again, and the count it records is the one now.
#[tokio::test]
async fn a_child_that_ended_since_the_job_was_kept_is_counted_out() {
    let t = db().await;
    support::load(
        &t.store,
        "kid.yaml",
        "name: kidWF\nsteps:\n  - { name: a }\n",
    )
    .await;
    support::load(&t.store, "kids.yaml", KIDS).await;
    let id = job(&t, "kidsWF", "obj:kids1").await;
    send(&t, id, "go").await.expect("fork");
    send(&t, id, "count").await.expect("count one");
    assert_eq!(state(&t, id).await.1["kids"], json!(1));
    t.store
        .step_set(&workdo::store::SetRequest::new(
            "obj:kid1",
            "kidWF",
            "a",
            "completed",
        ))
        .await
        .expect("the child's step completes");
    send(&t, id, "count").await.expect("count none");
    assert_eq!(
        state(&t, id).await.1["kids"],
        json!(0),
        "the ended child counted out"
    );
}

const GREET: &str = r#"
name: greetWF
kind: machine
initial: Hello
states:
  Hello:
    enter:
      - signal: ready
    on:
      ready: Ready
  Ready: {}
"#;

/// Jobs whose initial state signals itself take that signal when their start returns, with no
/// runtime running; a start of many finds those jobs by their inboxes, not by opening each.
#[tokio::test]
async fn a_start_takes_the_signals_its_jobs_sent_themselves() {
    let t = db().await;
    support::load(&t.store, "greet.yaml", GREET).await;
    let mut req = workdo::store::StartRequest::new("greetWF", &[]);
    req.objects = (0..5).map(|i| format!("obj:greet{i}")).collect();
    let started = t.store.workflow_start(&req).await.expect("start");
    assert_eq!(started.len(), 5);
    for s in &started {
        assert_eq!(state(&t, s.workflow_id).await.0, "Ready", "{}", s.object_id);
    }
    let pending = "select count(*) from workdo.signals
                    where workflow_id = $1 and processed_at is null";
    assert_eq!(count(&t, pending, started[0].workflow_id).await, 0);
}
