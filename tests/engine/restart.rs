//! Postgres stopped hard in the middle of a run and started again: the runtime resumes by
//! itself, and nothing is lost or completed twice. A test binary of its own, since it stops
//! its own cluster.

use crate::support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use workdo::model::template;
use workdo::pg::{Cluster, ClusterOptions};
use workdo::store::{StartRequest, Store, db};

const WORKFLOWS: usize = 300;

/// A runtime on `url`; with `--async-claims`, a claim lost with the server (committed, not
/// flushed) must only return its step to the queue, never let it complete twice
/// (ARCHITECTURE.md "Decisions").
fn spawn_runtime(url: &str, async_claims: bool) -> Child {
    let mut args = vec!["--lease-margin", "2s", "--poll-interval", "200ms"];
    if async_claims {
        args.push("--async-claims");
    }
    support::spawn_up(url, &args)
}

/// Completed workflows, or `None` while the server cannot be reached.
async fn completed(url: &str) -> Option<i64> {
    let pool = db::connect(url, 1).await.ok()?;
    let n = sqlx::query_scalar("select count(*) from workdo.workflows where status = 'completed'")
        .fetch_one(&pool)
        .await
        .ok();
    pool.close().await;
    n
}

async fn wait_for(url: &str, at_least: i64, secs: u64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(n) = completed(url).await
            && n >= at_least
        {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {at_least} workflows completed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_resumes_after_postgres_restarts() {
    resumes_after_a_restart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_async_claims_nothing_completes_twice_across_a_restart() {
    resumes_after_a_restart(true).await;
}

async fn resumes_after_a_restart(async_claims: bool) {
    let dir = tempfile::Builder::new()
        .prefix("workdo-restart-")
        .tempdir()
        .expect("tempdir");
    let opts = ClusterOptions {
        dir: dir.path().to_path_buf(),
        ephemeral: true,
    };
    let cluster = Cluster::ensure(&opts).expect("start a private cluster");
    db::create_database(&cluster.url("postgres"), "restart")
        .await
        .expect("create the database");
    let url = cluster.url("restart");
    let pool = db::connect(&url, 2).await.expect("connect");
    db::migrate(&pool).await.expect("migrate");
    let store = Store::new(pool.clone());
    let fdir = tempfile::tempdir().expect("tempdir");
    let script = support::function_script(
        fdir.path(),
        "step.sh",
        "#!/bin/sh\ncat >/dev/null\nsleep 0.02\necho '{\"status\":\"completed\"}'\n",
    );
    let f = format!("{{ exec: [{:?}], timeout: 5s, concurrency: 8 }}", script);
    let source = format!(
        "name: restartWF\nsteps:\n  - {{ name: a, function: {f} }}\n  - {{ name: b, prereqs: [a], function: {f} }}\n"
    );
    let loaded =
        template::parse("restart.yaml", template::Format::Yaml, &source).expect("template");
    store.template_save(&loaded).await.expect("save");
    let mut req = StartRequest::new("restartWF", &[]);
    req.objects = (0..WORKFLOWS).map(|i| format!("restart:{i:04}")).collect();
    store.workflow_start(&req).await.expect("start");
    pool.close().await;

    let mut runtime = spawn_runtime(&url, async_claims);
    let before = wait_for(&url, 20, 60).await;
    // Stop the server hard (immediate: no checkpoint, connections cut), then start it again.
    let stopped = Command::new("sh")
        .arg("-c")
        .arg(cluster.stop_command())
        .status()
        .expect("stop postgres");
    assert!(stopped.success());
    assert_eq!(completed(&url).await, None, "the server is down");
    let again = Cluster::ensure(&opts).expect("start postgres again");
    assert_eq!(again.port, cluster.port, "same address after the restart");
    // The runtime reconnects by itself and finishes the run.
    let after = wait_for(&url, WORKFLOWS as i64, 120).await;
    assert!(after > before);
    let _ = Command::new("kill")
        .arg(runtime.id().to_string())
        .status()
        .expect("SIGTERM");
    let status = runtime.wait().expect("wait");
    assert!(status.success(), "runtime exited with {status}");

    let pool = db::connect(&url, 1).await.expect("connect");
    let (steps, completions, distinct): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from workdo.steps where status = 'completed'),
                (select count(*) from workdo.events where kind = 'completed'),
                (select count(distinct (workflow_id, step)) from workdo.events where kind = 'completed')",
    )
    .fetch_one(&pool)
    .await
    .expect("counts");
    let expected = 2 * WORKFLOWS as i64;
    assert_eq!(
        (steps, completions, distinct),
        (expected, expected, expected)
    );
    pool.close().await;
    let _ = again.stop();
}
