//! Leases kept honest: renewed while a long call runs, so they can be short; and a claim whose
//! answer was lost with the connection is given back when the server answers again, instead of
//! sitting `started` until its lease expires.

use crate::support;

use std::time::Duration;

use support::db;
use workdo::store::StartRequest;

/// A function that runs three times longer than `--lease`: its lease is renewed while it runs,
/// so no other runtime's sweep takes the step, and it completes on its first attempt.
#[tokio::test]
async fn a_lease_is_renewed_while_a_long_call_runs() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let slow = support::function_script(
        dir.path(),
        "slow.sh",
        "#!/bin/sh\ncat >/dev/null\nsleep 9\necho '{\"status\":\"completed\"}'\n",
    );
    support::load(
        &t.store,
        "long.yaml",
        &format!("name: longWF\nsteps:\n  - {{ name: a, function: {{ exec: ['{slow}'], timeout: 60s }} }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("longWF", &["obj:long"]))
        .await
        .expect("start");
    let mut config = support::config();
    config.lease = Duration::from_secs(3);
    let running = support::start(&t.store, config).await;
    support::wait_until(
        t.pool(),
        "select count(*) = 1 from workdo.steps where template = 'longWF' and status = 'completed'",
        60,
    )
    .await;
    running.stop().await;
    let kinds = support::event_kinds(t.pool(), "obj:long", "a").await;
    assert!(
        !kinds.iter().any(|k| k == "lease_expired"),
        "the lease lapsed while the call ran: {kinds:?}"
    );
    let s = support::step(t.pool(), "obj:long", "a").await;
    assert_eq!(s.attempts, 1, "{kinds:?}");
}

/// Steps leased to a runtime that it does not hold (a claim that committed while its answer was
/// lost) go back to the queue with their attempts; steps it holds, and other runtimes' steps,
/// stay as they are.
#[tokio::test]
async fn steps_leased_but_not_held_are_given_back() {
    let t = db().await;
    support::load(
        &t.store,
        "held.yaml",
        "name: heldWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new(
            "heldWF",
            &["obj:h1", "obj:h2", "obj:h3", "obj:h4"],
        ))
        .await
        .expect("start");
    let hour = Duration::from_secs(3600);
    let mine = t
        .store
        .step_claim("heldWF", "a", None, 3, "me", hour)
        .await
        .expect("claim");
    let theirs = t
        .store
        .step_claim("heldWF", "a", None, 1, "other", hour)
        .await
        .expect("claim");
    assert_eq!((mine.len(), theirs.len()), (3, 1));
    let returned = t
        .store
        .steps_return_leases("me", &[mine[0].id])
        .await
        .expect("return");
    assert_eq!(returned, 2);
    let ids = [mine[0].id, mine[1].id, mine[2].id, theirs[0].id];
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "select s.status, s.attempts from unnest($1::bigint[]) with ordinality as i(id, n)
           join workdo.steps s on s.id = i.id order by i.n",
    )
    .bind(&ids[..])
    .fetch_all(t.pool())
    .await
    .expect("steps");
    let started = ("started".to_string(), 1);
    let ready = ("ready".to_string(), 0);
    assert_eq!(rows, [started.clone(), ready.clone(), ready, started]);
    let kinds = support::event_kinds(t.pool(), &mine[1].object_id, "a").await;
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("released"),
        "{kinds:?}"
    );
}

/// End to end: a step claimed under the runtime's name whose answer it never saw (claimed here,
/// with a lease of an hour) is given back and run as soon as the runtime's connection to the
/// server is cut and comes back — not an hour later.
#[tokio::test]
async fn a_runtime_that_reconnects_gives_back_what_it_does_not_hold() {
    let t = db().await;
    support::load(
        &t.store,
        "lost.yaml",
        "name: lostWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("lostWF", &["obj:lost"]))
        .await
        .expect("start");
    let mut config = support::config();
    config.owner = "runtime-that-lost-an-answer".into();
    let claimed = t
        .store
        .step_claim(
            "lostWF",
            "a",
            None,
            1,
            &config.owner,
            Duration::from_secs(3600),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let running = support::start(&t.store, config).await;
    // The runtime is listening; cut its LISTEN connection as a failover or network fault would.
    support::wait_for("the runtime to listen", 30, || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pg_stat_activity where datname = current_database() and query ilike 'listen%'",
        )
        .fetch_one(t.pool())
        .await
        .is_ok_and(|n| n > 0)
    })
    .await;
    let s = support::step(t.pool(), "obj:lost", "a").await;
    assert_eq!(
        s.status, "started",
        "nothing gives it back before the connection is lost"
    );
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity
          where datname = current_database() and query ilike 'listen%'",
    )
    .execute(t.pool())
    .await
    .expect("terminate");
    support::wait_until(
        t.pool(),
        "select count(*) = 1 from workdo.steps where template = 'lostWF' and status = 'completed'",
        30,
    )
    .await;
    running.stop().await;
    let kinds = support::event_kinds(t.pool(), "obj:lost", "a").await;
    assert!(kinds.iter().any(|k| k == "released"), "{kinds:?}");
}

/// Renewing locks the steps in id order, the order a commit locks them in: a renewal that
/// locked them in the order the runtime held them waited for a commit holding one while
/// holding another the commit wanted next (Postgres then aborts one of the two as a deadlock).
#[tokio::test]
async fn renewing_leases_locks_steps_in_the_order_commits_do() {
    let t = db().await;
    support::load(
        &t.store,
        "two.yaml",
        "name: twoWF\nsteps:\n  - { name: a }\n",
    )
    .await;
    // Enough steps that the renewal's plan is what it is in production: the steps read by
    // their primary key, in the order the runtime's list gives them.
    let mut req = StartRequest::new("twoWF", &[]);
    req.objects = (0..50_000).map(|i| format!("obj:r{i}")).collect();
    t.store.workflow_start(&req).await.expect("start");
    sqlx::query("analyze workdo.steps")
        .execute(t.pool())
        .await
        .expect("analyze");
    // The two claimed are the newest (the highest ids), as a long-running runtime's are.
    sqlx::query(
        "update workdo.steps set priority = 1 where object_id in ('obj:r49998', 'obj:r49999')",
    )
    .execute(t.pool())
    .await
    .expect("prioritize");
    let mut claimed = t
        .store
        .step_claim("twoWF", "a", None, 2, "test", Duration::from_secs(60))
        .await
        .expect("claim");
    claimed.sort_by_key(|c| c.id);
    // Many more leased, as under a busy runtime: the renewal's plan then reads the steps by
    // their primary key in the list's order, not through the lease index.
    let others = t
        .store
        .step_claim("twoWF", "a", None, 5_000, "test", Duration::from_secs(60))
        .await
        .expect("claim");
    assert_eq!(others.len(), 5_000);
    sqlx::query("analyze workdo.steps")
        .execute(t.pool())
        .await
        .expect("analyze");
    let [first, second] = &claimed[..] else {
        panic!("two steps claimed: {claimed:?}");
    };
    // A commit in progress holds the first step and will want the second.
    let mut commit = t.pool().begin().await.expect("begin");
    sqlx::query("set local lock_timeout = '10s'")
        .execute(&mut *commit)
        .await
        .expect("timeout");
    sqlx::query("select 1 from workdo.steps where id = $1 for update")
        .bind(first.id)
        .execute(&mut *commit)
        .await
        .expect("lock first");
    // The runtime renews both, as it happens to hold them: second, first.
    let held = vec![
        (second.id, second.lease_token, 60.0),
        (first.id, first.lease_token, 60.0),
    ];
    let store = t.store.clone();
    let renewal = tokio::spawn(async move { store.steps_renew_leases(&held).await });
    support::wait_for("the renewal to wait for the commit's lock", 30, || async {
        support::lock_waiters(t.pool()).await == 1
    })
    .await;
    // The commit takes the second step: the renewal must not be holding it.
    sqlx::query("select 1 from workdo.steps where id = $1 for update")
        .bind(second.id)
        .execute(&mut *commit)
        .await
        .expect("the commit takes its second step without a deadlock");
    commit.commit().await.expect("commit");
    let renewed = renewal.await.expect("joined").expect("renewed");
    assert_eq!(renewed, 2);
}
