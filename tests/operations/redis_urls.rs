//! The hand-off's Redis client (the `redis` crate) against Debian's redis-server, as an operator
//! points it: an ACL user name and password over TCP, and `rediss://` over TLS with a
//! certificate made for the test. Each run pushes one step's job, read back from Redis.

use crate::support;
use support::Killed;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{config, db, wait_until};
use workdo::model::handoff::Rules;
use workdo::runtime::handoff::HandoffConfig;
use workdo::store::StartRequest;

fn redis_server(args: &[&str]) -> Killed {
    Killed(
        Command::new("redis-server")
            .args(["--save", "", "--appendonly", "no"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "redis-server is not installed: apt-get install -y redis-server (.ci/run does)",
            ),
    )
}

/// Wait until `url` answers PING, through the same client the hand-off uses.
async fn answering(url: &str) -> redis::aio::MultiplexedConnection {
    answering_with(redis::Client::open(url).expect("a Redis URL"), url).await
}

async fn answering_with(client: redis::Client, url: &str) -> redis::aio::MultiplexedConnection {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tried = match client.get_multiplexed_async_connection().await {
            Ok(mut c) => match redis::cmd("PING").query_async::<String>(&mut c).await {
                Ok(_) => return c,
                Err(e) => e,
            },
            Err(e) => e,
        };
        assert!(
            Instant::now() < deadline,
            "redis-server did not answer at {url}: {tried}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// accessionWF loaded and started on `druid`.
async fn started(druid: &str) -> support::TestDb {
    let t = db().await;
    let loaded = workdo::cli::files::parse_file(
        &support::workflows_dir().join("../tests/fixtures/workflow-service/accessionWF.xml"),
    )
    .expect("template");
    t.store.template_save(&loaded).await.expect("save");
    t.store
        .workflow_start(&StartRequest::new("accessionWF", &[druid]))
        .await
        .expect("start");
    t
}

/// The runtime pushed accessionWF's first robot step for `druid`: the job is in Redis (read
/// through `check`), in Sidekiq's shape.
async fn pushed(t: &support::TestDb, check: &mut redis::aio::MultiplexedConnection, druid: &str) {
    wait_until(
        t.pool(),
        "select count(*) = 1 from workdo.handoff_outbox where pushed_at is not null",
        30,
    )
    .await;
    let queues: Vec<String> = redis::cmd("SMEMBERS")
        .arg("queues")
        .query_async(check)
        .await
        .expect("SMEMBERS");
    assert_eq!(queues.len(), 1, "{queues:?}");
    let jobs: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("queue:{}", queues[0]))
        .arg(0)
        .arg(-1)
        .query_async(check)
        .await
        .expect("LRANGE");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job: serde_json::Value = serde_json::from_str(&jobs[0]).expect("a JSON job");
    assert_eq!(job["args"], serde_json::json!([druid]));
}

/// An ACL user of its own (the default user off), named in the URL.
#[tokio::test]
async fn the_hand_off_signs_in_as_an_acl_user() {
    workdo::install_crypto();
    let port = support::browser::free_port().to_string();
    let _redis = redis_server(&[
        "--port", &port, "--user", "default", "off", "--user", "robot", "on", ">s3cret", "~*",
        "&*", "+@all",
    ]);
    let url = format!("redis://robot:s3cret@127.0.0.1:{port}/0");
    let mut check = answering(&url).await;
    let druid = "druid:bb111cc1111";
    let t = started(druid).await;
    let mut cfg = config();
    cfg.handoff = Some(HandoffConfig {
        redis_url: url,
        rules: Rules::default(),
        push_again_after: workdo::runtime::handoff::PUSH_AGAIN_AFTER,
    });
    let rt = support::start(&t.store, cfg).await;
    pushed(&t, &mut check, druid).await;
    rt.stop().await;
    // The same password without the user name is the default user's, which is off.
    let refused = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}/0"))
        .expect("url")
        .get_multiplexed_async_connection()
        .await;
    assert!(refused.is_err(), "the default user is off");
}

/// `rediss://` reaches a TLS-only redis-server whose certificate a CA of the test's signed: the
/// runtime (`workdo up`, a process of its own) trusts that CA through `SSL_CERT_FILE`, as a site
/// with its own CA gives it, and verifies the server's name.
#[tokio::test]
async fn the_hand_off_speaks_tls() {
    workdo::install_crypto();
    let dir = tempfile::tempdir().expect("tempdir");
    let at = |f: &str| dir.path().join(f).display().to_string();
    let openssl = |args: &[&str]| {
        let made = Command::new("openssl")
            .args(args)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(made.success(), "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
    ]);
    std::fs::write(
        dir.path().join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "req.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "cert.pem",
    ]);
    let port = support::browser::free_port().to_string();
    let _redis = redis_server(&[
        "--port",
        "0",
        "--tls-port",
        &port,
        "--tls-cert-file",
        &at("cert.pem"),
        "--tls-key-file",
        &at("key.pem"),
        "--tls-ca-cert-file",
        &at("ca.pem"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{port}/0");
    let ca = std::fs::read(dir.path().join("ca.pem")).expect("ca");
    let client = redis::Client::build_with_tls(
        url.as_str(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca),
        },
    )
    .expect("a TLS client");
    let mut check = answering_with(client, &url).await;
    let druid = "druid:bb222cc2222";
    let t = started(druid).await;
    let _up = Killed(
        Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(["up", "--no-api", "--sidekiq-redis", &url])
            .env("DATABASE_URL", &t.url)
            .env("SSL_CERT_FILE", at("ca.pem"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("workdo up"),
    );
    pushed(&t, &mut check, druid).await;
}
