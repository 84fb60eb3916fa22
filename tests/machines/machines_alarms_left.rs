//! An alarm that has rung while its job was busy (or while no runtime ran) waits in the inbox
//! as a signal. It used to be taken whatever state the job had reached by then: a job the first
//! alarm escalated was then expired by the old state's second alarm, and an extension that
//! re-entered a state was undone by the alarm it replaced. Leaving a state now cancels its rung
//! alarms too, and a rung alarm of a state the job has left is refused when taken.

use crate::support;

use serde_json::json;
use support::machines::{job, state};
use support::{db, load};

/// What taking job `id`'s `signal` from its inbox did.
async fn outcome(t: &support::TestDb, id: i64, signal: &str) -> String {
    sqlx::query_scalar("select outcome from workdo.signals where workflow_id = $1 and signal = $2")
        .bind(id)
        .bind(signal)
        .fetch_one(t.pool())
        .await
        .expect("the signal's outcome")
}

const ESCALATE: &str = "name: escWF\nkind: machine\ninitial: Review\nstates:\n  Review:\n    enter:\n      - alarm: { signal: remind, in: 1 hour }\n      - alarm: { signal: expire, in: 2 hours }\n    on:\n      remind: Escalated\n      expire: Expired\n      extend: Review\n  Escalated:\n    enter:\n      - alarm: { signal: expire, in: 10 hours }\n    on:\n      expire: Expired\n  Expired: { final: true }\n";

/// Both of Review's alarms ring before the job takes either: `remind` moves it to Escalated,
/// and Review's `expire`, rung but not taken, must not end it.
#[tokio::test]
async fn an_old_states_rung_alarm_does_not_move_the_job_on() {
    let t = db().await;
    load(&t.store, "esc.yaml", ESCALATE).await;
    let id = job(&t, "escWF", "obj:esc").await;
    // The runtime was down past both: remind due first, then expire.
    sqlx::query(
        "update workdo.alarms set due_at = now() - case signal when 'remind' then interval '2 minutes'
                                                              else interval '1 minute' end
          where workflow_id = $1",
    )
    .bind(id)
    .execute(t.pool())
    .await
    .expect("due");
    assert_eq!(t.store.machine_alarms_fire(100).await.expect("fire"), 2);
    t.store.machine_inbox_run(10).await.expect("take the inbox");
    assert_eq!(state(&t, id).await.0, "Escalated");
    let outcomes: Vec<(String, String)> = sqlx::query_as(
        "select signal, outcome from workdo.signals where workflow_id = $1 order by id",
    )
    .bind(id)
    .fetch_all(t.pool())
    .await
    .expect("inbox");
    assert_eq!(outcomes.len(), 2);
    assert_eq!(outcomes[0], ("remind".into(), "Escalated".into()));
    assert!(
        outcomes[1].0 == "expire" && outcomes[1].1.contains("set in Review, which the job left"),
        "{outcomes:?}"
    );
    // Escalated's own alarm is still set, and still moves it.
    let pending: i64 = sqlx::query_scalar(
        "select count(*) from workdo.alarms
          where workflow_id = $1 and fired_at is null and cancelled_at is null and state = 'Escalated'",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("alarms");
    assert_eq!(pending, 1);
}

/// Review's `remind` rings (it waits in the inbox); then an `extend` is sent. A job's signals
/// are taken in the order they arrived (issue 47 item 4): the alarm first, which escalates the
/// review, and then the extension, which Escalated does not accept. (Before, the given signal
/// overtook the rung alarm, which was then refused as being of a state the job had left.)
#[tokio::test]
async fn a_signal_sent_after_an_alarm_rang_is_taken_after_it() {
    let t = db().await;
    load(&t.store, "esc.yaml", ESCALATE).await;
    let id = job(&t, "escWF", "obj:ext").await;
    sqlx::query(
        "update workdo.alarms set due_at = now() - interval '1 minute'
          where workflow_id = $1 and signal = 'remind'",
    )
    .bind(id)
    .execute(t.pool())
    .await
    .expect("due");
    assert_eq!(t.store.machine_alarms_fire(100).await.expect("fire"), 1);
    let err = t
        .store
        .machine_signal(id, "extend", &json!({}), "t")
        .await
        .expect_err("taken after the alarm, in Escalated");
    assert!(
        err.to_string().contains("not accepted in Escalated"),
        "{err}"
    );
    assert_eq!(state(&t, id).await.0, "Escalated");
    assert_eq!(outcome(&t, id, "remind").await, "Escalated");
}

/// The alarm loop fires Review's `remind` (its transaction not yet committed) while an
/// `extend` re-enters Review and waits to cancel that alarm's row. The signal the loop wrote is
/// invisible to the extension's statement; the alarm must be cancelled all the same, and its
/// signal refused when taken — not escalate the extended review.
#[tokio::test]
async fn an_alarm_firing_while_its_state_is_re_entered_is_refused() {
    let t = db().await;
    load(&t.store, "esc.yaml", ESCALATE).await;
    let id = job(&t, "escWF", "obj:race").await;
    let remind: i64 = sqlx::query_scalar(
        "select id from workdo.alarms where workflow_id = $1 and signal = 'remind'",
    )
    .bind(id)
    .fetch_one(t.pool())
    .await
    .expect("alarm");
    // What the alarm loop writes for it, held open.
    let mut firing = t.pool().begin().await.expect("begin");
    sqlx::query("update workdo.alarms set fired_at = now() where id = $1")
        .bind(remind)
        .execute(&mut *firing)
        .await
        .expect("fired");
    sqlx::query(
        "insert into workdo.signals (workflow_id, signal, data, actor)
         values ($1, 'remind', jsonb_build_object('alarm', $2::bigint), 'alarm')",
    )
    .bind(id)
    .bind(remind)
    .execute(&mut *firing)
    .await
    .expect("its signal");
    let store = t.store.clone();
    let extend =
        tokio::spawn(async move { store.machine_signal(id, "extend", &json!({}), "t").await });
    support::wait_for("the extension to wait for the alarm's row", 30, || async {
        support::lock_waiters(t.pool()).await >= 1
    })
    .await;
    firing.commit().await.expect("the alarm fired");
    extend.await.expect("task").expect("extend");
    t.store.machine_inbox_run(10).await.expect("take the inbox");
    assert_eq!(state(&t, id).await.0, "Review", "the extension holds");
    let outcome = outcome(&t, id, "remind").await;
    assert!(outcome.contains("which the job left"), "{outcome}");
}
