//! Chaos: runtimes killed with SIGKILL at random moments, again and again, while they work.
//! Whatever the moment, no step is lost and none completes twice.

use crate::support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use support::{db, load};
use workdo::store::StartRequest;

/// Workflows of three steps each (`WORKDO_CHAOS_WORKFLOWS` for a longer run).
const WORKFLOWS: usize = 600;
/// Kills of a runtime process (`WORKDO_CHAOS_KILLS` for a longer run).
const KILLS: usize = 24;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn spawn_runtime(url: &str) -> Child {
    support::spawn_up(
        url,
        &[
            "--lease-margin",
            "1s",
            "--poll-interval",
            "200ms",
            "--grace",
            "1s",
            "--no-schedules",
        ],
    )
}

async fn scalar(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_runtimes_lose_no_step_and_complete_none_twice() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = support::function_script(
        dir.path(),
        "step.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\"}'\n",
    );
    let f = format!("{{ exec: [{:?}], timeout: 2s, concurrency: 4 }}", script);
    load(
        &t.store,
        "chaos.yaml",
        &format!(
            // A step whose call a kill interrupts has used an attempt (as with any crash); under
            // this much chaos a step is interrupted three times now and then, so the limit is
            // set out of reach: the test is about steps lost or run twice, not attempts.
            "name: chaosWF\nsteps:\n  - {{ name: a, error-limit: 1000, function: {f} }}\n  - {{ name: b, prereqs: [a], error-limit: 1000, function: {f} }}\n  - {{ name: c, prereqs: [b], error-limit: 1000, function: {f} }}\n"
        ),
    )
    .await;
    let mut req = StartRequest::new("chaosWF", &[]);
    let workflows = setting("WORKDO_CHAOS_WORKFLOWS", WORKFLOWS);
    let kill_target = setting("WORKDO_CHAOS_KILLS", KILLS);
    req.objects = (0..workflows).map(|i| format!("chaos:{i:05}")).collect();
    t.store.workflow_start(&req).await.expect("start");

    let mut procs = [spawn_runtime(&t.url), spawn_runtime(&t.url)];
    let began = Instant::now();
    let mut kills = 0;
    let mut mid_work = 0;
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        // xorshift: a different moment and victim each time, the same sequence each run.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    while kills < kill_target {
        // The chaos schedule itself: a kill every 80–330 ms.
        tokio::time::sleep(Duration::from_millis(80 + next() % 250)).await;
        let victim = (next() % 2) as usize;
        let p = &mut procs[victim];
        // Whether this kill lands mid-work: steps under a lease just before it.
        if scalar(
            t.pool(),
            "select count(*) from workdo.steps where status = 'started'",
        )
        .await
            > 0
        {
            mid_work += 1;
        }
        p.kill().expect("kill -9");
        p.wait().expect("reap");
        kills += 1;
        procs[victim] = spawn_runtime(&t.url);
        assert!(
            began.elapsed() < Duration::from_secs(60 + kill_target as u64),
            "kill loop took too long"
        );
    }
    // Let the survivors finish the work: every workflow completes.
    let deadline = Instant::now() + Duration::from_secs(90 + workflows as u64 / 20);
    loop {
        let open = scalar(
            t.pool(),
            "select count(*) from workdo.workflows where status <> 'completed'",
        )
        .await;
        if open == 0 {
            break;
        }
        if Instant::now() >= deadline {
            let by_status: Vec<(String, i64)> = sqlx::query_as(
                "select status, count(*) from workdo.steps where status <> 'completed' group by 1",
            )
            .fetch_all(t.pool())
            .await
            .unwrap_or_default();
            panic!("{open} workflows unfinished after the kills; steps by status: {by_status:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in &mut procs {
        // SIGTERM: a clean stop still works after all this.
        let _ = Command::new("kill")
            .arg(p.id().to_string())
            .status()
            .expect("send SIGTERM");
        let status = p.wait().expect("wait");
        assert!(status.success(), "runtime exited with {status}");
    }

    let steps = (3 * workflows) as i64;
    // No step lost: every step completed, no lease left behind.
    assert_eq!(
        scalar(
            t.pool(),
            "select count(*) from workdo.steps where status = 'completed'"
        )
        .await,
        steps
    );
    assert_eq!(
        scalar(
            t.pool(),
            "select count(*) from workdo.steps where lease_token is not null"
        )
        .await,
        0
    );
    // None completed twice: one `completed` event per step.
    let completions = scalar(
        t.pool(),
        "select count(*) from workdo.events where kind = 'completed'",
    )
    .await;
    let distinct = scalar(
        t.pool(),
        "select count(distinct (workflow_id, step)) from workdo.events where kind = 'completed'",
    )
    .await;
    assert_eq!((completions, distinct), (steps, steps));
    // Counters consistent with the rows.
    assert_eq!(
        scalar(
            t.pool(),
            "select count(*) from workdo.workflows where unfinished <> 0 or completed_at is null"
        )
        .await,
        0
    );
    assert_eq!(
        scalar(
            t.pool(),
            "select count(*) from workdo.steps where pending <> 0"
        )
        .await,
        0
    );
    let released = scalar(
        t.pool(),
        "select count(*) from workdo.events where kind in ('lease_expired', 'released')",
    )
    .await;
    // The kills did land in the middle of work: leases were held when they came, and steps
    // were given back to the queue after them (otherwise this test proves nothing).
    assert!(mid_work > 0, "no kill found a step under a lease");
    assert!(released > 0, "no step was given back after a kill");
    println!(
        "chaos: {kills} kills ({mid_work} mid-work), {steps} steps, 0 lost, 0 completed twice, {released} steps given back after a kill, {:.1} s",
        began.elapsed().as_secs_f64()
    );
}
