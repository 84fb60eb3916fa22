//! A runtime's life: kill -9 mid-flight and restart, NOTIFY wake-ups, shutdown with calls still
//! running, bindings that name what is wrong, steps whose inputs cannot be read, templates
//! loaded while it runs, and claims side by side.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::{TestDb, config, db, event_kinds, load, start, step, wait_until};
use workdo::runtime;
use workdo::store::StartRequest;

/// Write an executable script into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    support::function_script(dir, name, body)
}

#[tokio::test]
async fn kill_9_mid_flight_then_restart_completes_every_step_exactly_once() {
    let t: TestDb = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = dir.path().join("invocations");
    let f = script(
        dir.path(),
        "slow.sh",
        &format!(
            "#!/bin/sh\nevent=$(cat)\nid=$(echo \"$event\" | sed 's/.*\"step_id\":\\([0-9]*\\).*/\\1/')\necho \"$id\" >> '{}'\nsleep 0.2\necho '{{\"status\":\"completed\",\"object\":{{\"properties\":{{\"done\":true}}}}}}'\n",
            counter.display()
        ),
    );
    load(
        &t.store,
        "k.yaml",
        &format!("name: killWF\nsteps:\n  - name: work\n    function: {{ exec: {f}, timeout: 2s, concurrency: 4 }}\n"),
    )
    .await;
    let objects: Vec<String> = (0..40).map(|i| format!("obj:{i:02}")).collect();
    let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("killWF", &refs))
        .await
        .expect("start");
    let up = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args([
                "up",
                "--lease-margin",
                "500ms",
                "--poll-interval",
                "100ms",
                "--grace",
                "10s",
            ])
            .env("DATABASE_URL", url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start workdo up")
    };
    let mut first = up(&t.url);
    // Kill it while calls are in flight: some steps done, some held under its leases.
    wait_until(
        t.pool(),
        "select count(*) filter (where status = 'completed') >= 8 and count(*) filter (where status = 'started') > 0 from workdo.steps",
        60,
    )
    .await;
    first.kill().expect("kill -9");
    first.wait().expect("reap");
    let held: i64 =
        sqlx::query_scalar("select count(*) from workdo.steps where status = 'started'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert!(held > 0, "the killed runtime held leases");
    let mut second = up(&t.url);
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        90,
    )
    .await;
    // SIGTERM: a graceful stop, exit status 0.
    let pid = second.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    let status = second.wait().expect("wait");
    assert!(status.success(), "graceful shutdown exits 0: {status}");

    // Exactly once: one completion event per step, 40 in all.
    let (events, distinct): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct step || object_id) from workdo.events where kind = 'completed'",
    )
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert_eq!((events, distinct), (40, 40));
    // Every step ran at least once; the ones cut off by the kill ran again.
    let calls = std::fs::read_to_string(&counter).expect("counter file");
    let ids: Vec<i64> = calls
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let distinct_ids: std::collections::HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct_ids.len(), 40);
    assert!(ids.len() >= 40);
    let expired: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'lease_expired'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(
        expired, held,
        "every step held by the dead process came back through its lease"
    );
}

#[tokio::test]
async fn notify_wakes_dependants_without_polling() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = support::completing_function(dir.path());
    load(
        &t.store,
        "n.yaml",
        &format!(
            "name: chainWF\nsteps:\n  - name: a\n    function: {{ exec: {f} }}\n  - name: b\n    prereqs: [a]\n    function: {{ exec: {f} }}\n  - name: c\n    prereqs: [b]\n    function: {{ exec: {f} }}\n"
        ),
    )
    .await;
    let mut cfg = config();
    // Polling effectively off: only NOTIFY can move the chain along within the deadline.
    cfg.poll_interval = Duration::from_secs(3600);
    t.store
        .workflow_start(&StartRequest::new("chainWF", &["obj:n"]))
        .await
        .expect("start");
    // b and c become ready while the workers wait; only a notification can wake them in time.
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        20,
    )
    .await;
    rt.stop().await;
}

#[tokio::test]
async fn shutdown_releases_calls_that_outlive_the_grace_period() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "slow.sh",
        "#!/bin/sh\ncat >/dev/null\nsleep 30\necho '{\"status\":\"completed\"}'\n",
    );
    load(
        &t.store,
        "s.yaml",
        &format!("name: slowWF\nsteps:\n  - name: run\n    function: {{ exec: {f}, timeout: 60s, concurrency: 3 }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("slowWF", &["obj:1", "obj:2", "obj:3"]))
        .await
        .expect("start");
    let mut cfg = config();
    cfg.grace = Duration::from_millis(300);
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select count(*) = 3 from workdo.steps where status = 'started'",
        20,
    )
    .await;
    rt.stop().await;
    let rows: Vec<(String, i32)> =
        sqlx::query_as("select status, attempts from workdo.steps order by id")
            .fetch_all(t.pool())
            .await
            .expect("rows");
    assert_eq!(
        rows,
        vec![("ready".to_string(), 0); 3],
        "back in the queue, attempt given back"
    );
    let released: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'released'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(released, 3);
}

#[tokio::test]
async fn worker_bindings_name_what_is_wrong() {
    let t = db().await;
    load(
        &t.store,
        "b.yaml",
        "name: bindWF\nsteps:\n  - name: auto\n    function: { builtin: noop }\n  - name: human\n  - name: logged\n    skip-queue: true\n    function: { builtin: noop }\n",
    )
    .await;
    let all = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let keys: Vec<String> = all.iter().map(|b| b.key()).collect();
    assert_eq!(
        keys,
        vec!["bindWF:auto"],
        "human and skip-queue steps get no worker"
    );
    let err = runtime::bindings(&t.store, &["bindWF:human".to_string()])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bindWF:human has no function to run (a human or skip-queue step)"
    );
    let err = runtime::bindings(&t.store, &["bindWF:nope".to_string()])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no step \"nope\""), "{err}");
    let err = runtime::bindings(&t.store, &["noWF:x".to_string()])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("unknown template \"noWF\""),
        "{err}"
    );
}

/// A template loaded while the runtime runs gets its workers without a restart (the runtime
/// hears the template's NOTIFY), and a new version whose function changed is worked by the new
/// function.
#[tokio::test]
async fn templates_loaded_while_the_runtime_runs_are_worked() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = start(&t.store, config()).await;
    load(
        &t.store,
        "live.yaml",
        "name: liveWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("liveWF", &["obj:live1"]))
        .await
        .expect("start");
    wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where object_id = 'obj:live1'",
        30,
    )
    .await;
    let v2 = script(
        dir.path(),
        "v2.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\",\"note\":\"worked by v2\"}'\n",
    );
    load(
        &t.store,
        "live.yaml",
        &format!("name: liveWF\nsteps:\n  - name: a\n    function: {{ exec: {v2} }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("liveWF", &["obj:live2"]))
        .await
        .expect("start");
    wait_until(
        t.pool(),
        "select status = 'completed' and note = 'worked by v2' from workdo.steps where object_id = 'obj:live2'",
        30,
    )
    .await;
    rt.stop().await;
}

/// A function is never called without the documents it asked for: while they cannot be read,
/// claimed steps go back to the queue with their attempt, and run once they can.
#[tokio::test]
async fn steps_whose_inputs_cannot_be_read_are_given_back_not_run() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "needs-mods.sh",
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n  *'<mods/>'*) echo '{\"status\":\"completed\",\"note\":\"saw the MODS\"}' ;;\n  *) echo '{\"status\":\"error\",\"message\":\"called without the MODS\"}' ;;\nesac\n",
    );
    load(
        &t.store,
        "docs.yaml",
        &format!(
            "name: docsWF\nsteps:\n  - name: read\n    function: {{ exec: {f}, documents: [descMetadata] }}\n"
        ),
    )
    .await;
    let mut docs = std::collections::BTreeMap::new();
    docs.insert("descMetadata".to_string(), "<mods/>".to_string());
    t.store
        .object_put("obj:d", &Default::default(), &docs, "test")
        .await
        .expect("object");
    // Documents cannot be read while their table is away.
    sqlx::query("alter table workdo.documents rename to documents_away")
        .execute(t.pool())
        .await
        .expect("rename");
    t.store
        .workflow_start(&StartRequest::new("docsWF", &["obj:d"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) >= 2 from workdo.events where object_id = 'obj:d' and kind = 'released'
            and detail ->> 'reason' like 'reading inputs failed:%'",
        30,
    )
    .await;
    sqlx::query("alter table workdo.documents_away rename to documents")
        .execute(t.pool())
        .await
        .expect("rename back");
    wait_until(
        t.pool(),
        "select count(*) = 1 from workdo.steps where object_id = 'obj:d' and status = 'completed'",
        30,
    )
    .await;
    rt.stop().await;
    let s = step(t.pool(), "obj:d", "read").await;
    assert_eq!(s.note.as_deref(), Some("saw the MODS"));
    assert_eq!(s.attempts, 1, "every release gave its attempt back");
    let k = event_kinds(t.pool(), "obj:d", "read").await;
    assert!(
        !k.iter().any(|k| k.starts_with("failed")),
        "the function never ran without its input: {k:?}"
    );
    assert_eq!(k.last().map(String::as_str), Some("completed"), "{k:?}");
}

/// A worker whose batches are single steps claims as many at once as its concurrency holds, once
/// a claim has come back full: here the first claim takes the one step nothing holds up, and the
/// three claims after it wait together inside their UPDATE (a trigger waits for a lock the test
/// holds), where a worker claiming one after the other would have only one waiting. Then each
/// step runs once.
#[tokio::test]
async fn single_step_batches_are_claimed_side_by_side() {
    let t = db().await;
    load(
        &t.store,
        "side.yaml",
        "name: sideWF\nsteps:\n  - { name: work, batch-limit: 1, function: { builtin: noop, concurrency: 3 } }\n",
    )
    .await;
    sqlx::raw_sql(
        "create function side_hold() returns trigger language plpgsql as $$
         begin
             if new.object_id <> 'side:first' and new.status = 'started' then
                 perform pg_advisory_xact_lock_shared(4242);
             end if;
             return new;
         end $$;
         create trigger side_hold before update on workdo.steps
             for each row execute function side_hold();",
    )
    .execute(t.pool())
    .await
    .expect("trigger");
    let mut first = StartRequest::new("sideWF", &["side:first"]);
    first.priority = 10;
    t.store.workflow_start(&first).await.expect("start first");
    let mut req = StartRequest::new("sideWF", &[]);
    req.objects = (0..9).map(|i| format!("side:{i}")).collect();
    t.store.workflow_start(&req).await.expect("start");
    let mut holder = t.pool().acquire().await.expect("connection");
    sqlx::query("select pg_advisory_lock(4242)")
        .execute(&mut *holder)
        .await
        .expect("lock");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) = 3 from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock'
            and query like '%workdo.claim(%'",
        30,
    )
    .await;
    sqlx::query("select pg_advisory_unlock(4242)")
        .execute(&mut *holder)
        .await
        .expect("unlock");
    wait_until(
        t.pool(),
        "select count(*) = 10 from workdo.steps where template = 'sideWF' and status = 'completed'",
        30,
    )
    .await;
    rt.stop().await;
    let (attempts, completions): (i64, i64) = sqlx::query_as(
        "select (select sum(attempts) from workdo.steps where template = 'sideWF'),
                (select count(*) from workdo.events where template = 'sideWF' and kind = 'completed')",
    )
    .fetch_one(t.pool())
    .await
    .expect("counts");
    assert_eq!((attempts, completions), (10, 10), "each step ran once");
}
