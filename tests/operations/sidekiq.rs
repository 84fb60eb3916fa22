//! The hand-off to Sidekiq robots, with a real Redis (Debian's redis-server, on a Unix socket
//! of the test's own) and a real Sidekiq (Debian's ruby-sidekiq) running a robot suite in the
//! shape of the sul-dlss ones (tests/fixtures/robots/accession_robots.rb): twenty objects
//! through accessionWF, every step pushed once per readiness and worked once.

use crate::support;
use support::Killed;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{config, db, wait_until};
use workdo::api::Access;
use workdo::model::handoff::Rules;
use workdo::runtime::handoff::HandoffConfig;
use workdo::store::{Role, StartRequest};

/// A redis-server of the test's own, listening on the Unix socket `socket` only.
fn redis_on(socket: &std::path::Path) -> Killed {
    Killed(
        Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocket",
            ])
            .arg(socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server"),
    )
}

/// Sidekiq running the accessionWF robot suite (tests/fixtures/robots/accession_robots.rb) on
/// the Redis at `socket`, against the workflow routes at `base`; it logs to `log`, its stderr
/// goes to `dir/sidekiq.err`.
fn sidekiq_robots(
    socket: &std::path::Path,
    base: &str,
    token: &str,
    log: &std::path::Path,
    dir: &std::path::Path,
) -> Killed {
    let robots = support::workflows_dir().join("../tests/fixtures/robots/accession_robots.rb");
    Killed(
        Command::new("sidekiq")
            .args([
                "-c",
                "4",
                "-q",
                "accessionWF_default",
                "-q",
                "accessionWF_default_dsa",
                "-r",
            ])
            .arg(&robots)
            .env("REDIS_URL", format!("unix://{}", socket.display()))
            .env("WORKFLOW_URL", base)
            .env("WORKFLOW_TOKEN", token)
            .env("ROBOT_LOG", log)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("sidekiq.err")).expect("stderr file"))
            .spawn()
            .expect("sidekiq"),
    )
}

/// The workflow service's accessionWF (tests/fixtures/workflow-service).
async fn load_accession(store: &workdo::store::Store) {
    let path = support::workflows_dir().join("../tests/fixtures/workflow-service/accessionWF.xml");
    let loaded = workdo::cli::files::parse_file(&path).expect("accessionWF");
    store.template_save(&loaded).await.expect("save");
}

/// Whether `sql` (a boolean) became true within `secs`.
async fn reached(pool: &sqlx::PgPool, sql: &'static str, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if sqlx::query_scalar::<_, Option<bool>>(sql)
            .fetch_one(pool)
            .await
            .ok()
            .flatten()
            .unwrap_or(false)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The hand-off outbox and the handed-off steps, for a failure's message.
async fn outbox_state(pool: &sqlx::PgPool) -> String {
    let rows: Vec<(String, i32, Option<String>, bool)> = sqlx::query_as(
        "select step, attempts, last_error, pushed_at is not null from workdo.handoff_outbox order by id",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let steps: Vec<(String, String)> =
        sqlx::query_as("select template, step from workdo.handoff_steps")
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    format!("{rows:?}; handed-off steps {steps:?}")
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidekiq_robots_take_twenty_objects_through_accession_wf() {
    for p in ["redis-server", "sidekiq"] {
        assert!(
            installed(p),
            "{p} is not installed: apt-get install -y redis-server ruby-sidekiq (.ci/run does)"
        );
    }
    workdo::install_crypto();
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("redis.sock");
    let _redis = redis_on(&socket);
    listening(&socket).await;

    load_accession(&t.store).await;
    // The workflow service's routes, for the robots.
    let base = support::serve_api(&t.store, Access::Tokens).await;
    let token = t
        .store
        .token_create(Role::Robot, "robots", None)
        .await
        .expect("token")
        .1;

    let mut cfg = config();
    cfg.handoff = Some(HandoffConfig {
        redis_url: format!("unix://{}", socket.display()),
        rules: Rules::default(),
        push_again_after: workdo::runtime::handoff::PUSH_AGAIN_AFTER,
    });
    let rt = support::start(&t.store, cfg).await;

    let log = dir.path().join("robots.log");
    std::fs::write(&log, "").expect("log");
    let _sidekiq = sidekiq_robots(&socket, &base, &token, &log, dir.path());

    let druids: Vec<String> = (0..20)
        .map(|i| format!("druid:bc{:03}df{:04}", 100 + i, 2000 + i))
        .collect();
    let refs: Vec<&str> = druids.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("accessionWF", &refs))
        .await
        .expect("start");
    if !reached(
        t.pool(),
        "select count(*) = 20 from workdo.workflows where template = 'accessionWF' and status = 'completed'",
        120,
    )
    .await
    {
        let robots = std::fs::read_to_string(&log).unwrap_or_default();
        let err = std::fs::read_to_string(dir.path().join("sidekiq.err")).unwrap_or_default();
        let tail: String = err.chars().skip(err.chars().count().saturating_sub(3000)).collect();
        panic!(
            "not all 20 done; outbox {}; robots: {robots}; sidekiq: {tail}",
            outbox_state(t.pool()).await
        );
    }
    rt.stop().await;

    // Every handed-off step of every object pushed once, to the service's queues.
    let (rows, pushed, distinct): (i64, i64, i64) = sqlx::query_as(
        "select count(*), count(pushed_at), count(distinct (object_id, step)) from workdo.handoff_outbox",
    )
    .fetch_one(t.pool())
    .await
    .expect("outbox");
    assert_eq!((rows, pushed, distinct), (200, 200, 200));
    let queues: Vec<(String, String, i64)> = sqlx::query_as(
        "select step, queue, count(*) from workdo.handoff_outbox group by 1, 2 order by 1",
    )
    .fetch_all(t.pool())
    .await
    .expect("queues");
    for (step, queue, n) in &queues {
        assert_eq!(*n, 20, "{step}");
        let dsa = [
            "shelve",
            "publish",
            "reset-workspace",
            "sdr-ingest-transfer",
            "update-doi",
            "update-orcid-work",
        ]
        .contains(&step.as_str());
        let expected = if dsa {
            "accessionWF_default_dsa"
        } else {
            "accessionWF_default"
        };
        assert_eq!(queue, expected, "{step}");
    }
    // Each step worked exactly once, by the robot of its class.
    let text = std::fs::read_to_string(&log).expect("robot log");
    let worked: Vec<&str> = text.lines().filter(|l| l.starts_with("worked ")).collect();
    let unique: std::collections::BTreeSet<&&str> = worked.iter().collect();
    assert_eq!(worked.len(), 200, "{text}");
    assert_eq!(unique.len(), 200, "a step worked twice");
    let performed = text.lines().filter(|l| l.starts_with("performed ")).count();
    println!(
        "sidekiq: 20 objects, {} steps handed off, {pushed} pushes, {performed} jobs performed, {} worked, 0 twice",
        rows,
        worked.len()
    );
}

/// Redis is not there when steps become ready: the pushes wait in the outbox with their error
/// and a back-off, the admin page shows them, and once Redis listens every readiness is pushed,
/// once (LLEN of the queue equals the objects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_wait_while_redis_is_down_and_none_is_lost() {
    assert!(
        installed("redis-server") && installed("redis-cli"),
        "redis-server is not installed: apt-get install -y redis-server (.ci/run does)"
    );
    workdo::install_crypto();
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("redis.sock");
    load_accession(&t.store).await;
    let mut cfg = config();
    cfg.handoff = Some(HandoffConfig {
        redis_url: format!("unix://{}", socket.display()),
        rules: Rules::default(),
        push_again_after: workdo::runtime::handoff::PUSH_AGAIN_AFTER,
    });
    let rt = support::start(&t.store, cfg).await;
    let druids: Vec<String> = (0..5)
        .map(|i| format!("druid:bd{:03}fg{:04}", 100 + i, 3000 + i))
        .collect();
    let refs: Vec<&str> = druids.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("accessionWF", &refs))
        .await
        .expect("start");
    if !reached(
        t.pool(),
        "select count(*) = 5 from workdo.handoff_outbox where pushed_at is null and attempts > 0 and last_error is not null",
        30,
    )
    .await
    {
        panic!(
            "pushes did not wait with their error: outbox {}, runtime finished: {}",
            outbox_state(t.pool()).await,
            rt.handle.is_finished()
        );
    }
    // The page shows them waiting, with the error.
    let base = support::serve_api(&t.store, Access::Open).await;
    let page = reqwest::get(format!("{base}/ui/schedules"))
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(
        page.contains("Handed off to Sidekiq") && page.contains("waiting"),
        "{page}"
    );

    let _redis = redis_on(&socket);
    wait_until(
        t.pool(),
        "select count(*) = 5 from workdo.handoff_outbox where pushed_at is not null",
        60,
    )
    .await;
    rt.stop().await;
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(&socket)
        .args(["llen", "queue:accessionWF_default"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5");
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(&socket)
        .args(["lrange", "queue:accessionWF_default", "0", "0"])
        .output()
        .expect("redis-cli");
    let job: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("a Sidekiq job as JSON");
    assert_eq!(job["class"], "Robots::DorRepo::Accession::StartAccession");
    assert_eq!(job["retry"], true);
    assert!(
        job["args"][0]
            .as_str()
            .is_some_and(|d| druids.iter().any(|x| x == d))
    );
    assert_eq!(job["jid"].as_str().map(str::len), Some(24));

    // Had they stayed queued for 13 hours, the page would list them as lost (the runtime,
    // stopped here, would push them again).
    sqlx::query("update workdo.handoff_outbox set pushed_at = now() - interval '13 hours'")
        .execute(t.pool())
        .await
        .expect("age");
    let page = reqwest::get(format!("{base}/ui/schedules"))
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(page.contains("Queued in Sidekiq over 12 hours"), "{page}");
    let lost = t
        .store
        .handoff_queued_over(workdo::runtime::handoff::PUSH_AGAIN_AFTER, 10)
        .await
        .expect("lost");
    assert_eq!(lost.len(), 5, "{lost:?}");
}

/// A runtime killed while it hands off pushes again at most the one job it was pushing (issue
/// 47 item 21: a pass committed once for 200 rows, and a crash pushed all of them again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_killed_while_it_hands_off_pushes_at_most_one_again() {
    assert!(
        installed("redis-server") && installed("redis-cli"),
        "redis-server is not installed: apt-get install -y redis-server (.ci/run does)"
    );
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("redis.sock");
    let _redis = redis_on(&socket);
    load_accession(&t.store).await;
    let total: i64 = 300;
    let druids: Vec<String> = (0..total)
        .map(|i| format!("druid:bd{:03}fg{:04}", i % 1000, i))
        .collect();
    let refs: Vec<&str> = druids.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("accessionWF", &refs))
        .await
        .expect("start");
    let llen = || {
        let out = Command::new("redis-cli")
            .arg("-s")
            .arg(&socket)
            .args(["llen", "queue:accessionWF_default"])
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .unwrap_or(0)
    };
    while !socket.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let redis_url = format!("unix://{}", socket.display());
    let up = || support::spawn_up(&t.url, &["--sidekiq-redis", &redis_url]);
    let mut kills = 0;
    for _ in 0..3 {
        let mut runtime = up();
        let before = llen();
        // Killed in the middle of handing off: once it has pushed some, and not all.
        let deadline = Instant::now() + Duration::from_secs(60);
        while llen() < before + 10 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = runtime.kill();
        let _ = runtime.wait();
        kills += 1;
        if llen() >= total {
            break;
        }
    }
    let mut last = up();
    let done = reached(
        t.pool(),
        "select count(*) = 300 from workdo.handoff_outbox where pushed_at is not null",
        120,
    )
    .await;
    let _ = last.kill();
    let _ = last.wait();
    assert!(
        done,
        "not every row was pushed: {}",
        outbox_state(t.pool()).await
    );
    let pushed = llen();
    assert!(
        pushed >= total && pushed <= total + kills as i64,
        "{pushed} jobs for {total} readinesses after {kills} kills"
    );
}

/// Wait until `socket` takes connections.
async fn listening(socket: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 48 item 8: Redis without persistence killed twice, once holding twenty pushed jobs no
/// robot had taken yet and once mid-run under Sidekiq. Every push lost with it is pushed again
/// once its step has stayed `queued` past the wait (here 2 s; the service's sweeper waits
/// 12 h), each recorded as a `handoff_pushed_again` event; all twenty objects finish, and no
/// step is worked twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_lost_with_a_redis_killed_mid_run_are_pushed_again_and_none_is_worked_twice() {
    for p in ["redis-server", "sidekiq"] {
        assert!(
            installed(p),
            "{p} is not installed: apt-get install -y redis-server ruby-sidekiq (.ci/run does)"
        );
    }
    workdo::install_crypto();
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("redis.sock");
    let mut redis = redis_on(&socket);
    listening(&socket).await;
    load_accession(&t.store).await;
    let base = support::serve_api(&t.store, Access::Tokens).await;
    let token = t
        .store
        .token_create(Role::Robot, "robots", None)
        .await
        .expect("token")
        .1;
    let mut cfg = config();
    cfg.handoff = Some(HandoffConfig {
        redis_url: format!("unix://{}", socket.display()),
        rules: Rules::default(),
        push_again_after: Duration::from_secs(2),
    });
    let rt = support::start(&t.store, cfg).await;
    let druids: Vec<String> = (0..20)
        .map(|i| format!("druid:bf{:03}gh{:04}", 100 + i, 4000 + i))
        .collect();
    let refs: Vec<&str> = druids.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("accessionWF", &refs))
        .await
        .expect("start");
    // Twenty start-accession jobs sit in Redis, taken by no one: kill it, and them with it.
    wait_until(
        t.pool(),
        "select count(*) = 20 from workdo.handoff_outbox where pushed_at is not null",
        60,
    )
    .await;
    drop(redis);
    redis = redis_on(&socket);
    listening(&socket).await;

    let log = dir.path().join("robots.log");
    std::fs::write(&log, "").expect("log");
    let _sidekiq = sidekiq_robots(&socket, &base, &token, &log, dir.path());
    // Mid-run, under Sidekiq: kill it again.
    wait_until(
        t.pool(),
        "select count(*) >= 80 from workdo.handoff_outbox where pushed_at is not null",
        120,
    )
    .await;
    drop(redis);
    let _redis = redis_on(&socket);
    listening(&socket).await;

    if !reached(
        t.pool(),
        "select count(*) = 20 from workdo.workflows where template = 'accessionWF' and status = 'completed'",
        180,
    )
    .await
    {
        let robots = std::fs::read_to_string(&log).unwrap_or_default();
        let err = std::fs::read_to_string(dir.path().join("sidekiq.err")).unwrap_or_default();
        let tail: String = err.chars().skip(err.chars().count().saturating_sub(3000)).collect();
        panic!(
            "not all 20 done; outbox {}; robots: {robots}; sidekiq: {tail}",
            outbox_state(t.pool()).await
        );
    }
    rt.stop().await;
    let again: i64 = sqlx::query_scalar(
        "select count(*) from workdo.events where kind = 'handoff_pushed_again'",
    )
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert!(
        again >= 20,
        "the twenty lost start-accession jobs were pushed again: {again}"
    );
    let text = std::fs::read_to_string(&log).expect("robot log");
    let worked: Vec<&str> = text.lines().filter(|l| l.starts_with("worked ")).collect();
    let unique: std::collections::BTreeSet<&&str> = worked.iter().collect();
    assert_eq!(unique.len(), 200, "every step worked: {text}");
    assert_eq!(worked.len(), 200, "a step worked twice: {text}");
    // The page and `status` read the same query: nothing is left queued past the wait.
    let left = t
        .store
        .handoff_queued_over(Duration::from_secs(2), 10)
        .await
        .expect("left");
    assert!(left.is_empty(), "{left:?}");
    println!(
        "sidekiq, Redis killed twice: 20 objects done, {again} pushes again, 200 steps worked once each"
    );
}
