//! workdo through PgBouncer (Debian's package, started by the test) in session mode, with only
//! `ignore_startup_parameters = extra_float_digits` — what every sqlx or JDBC user already
//! sets: workdo sends no `options` startup parameter (it turns `jit` off with a `SET` after
//! connecting), migrates, listens and runs a workflow to the end through the pooler.

use crate::support;
use support::Killed;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::db;

/// Host, port, database and password of a `postgres://user[:password]@host:port/db` URL (the
/// private cluster asks for its password; a server given by DATABASE_URL may not).
fn parts(url: &str) -> (String, String, String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let password = rest
        .rsplit_once('@')
        .and_then(|(creds, _)| creds.split_once(':'))
        .map(|(_, pw)| pw.to_string())
        .unwrap_or_default();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let (hostport, db) = rest.split_once('/').unwrap_or((rest, "postgres"));
    let db = db.split('?').next().unwrap_or(db);
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
    (host.to_string(), port.to_string(), db.to_string(), password)
}

/// A PgBouncer started for the test in front of `url`'s server, in `mode`.
struct Bouncer {
    url: String,
    dir: tempfile::TempDir,
    /// Host, port and password of the server behind it, for rewriting its configuration.
    server: (String, String, String),
    _process: Killed,
}

async fn pgbouncer(url: &str, mode: &str) -> Bouncer {
    pgbouncer_with(url, mode, "").await
}

/// [`pgbouncer`] with more `[pgbouncer]` settings (`extra`, lines of `key = value`).
async fn pgbouncer_with(url: &str, mode: &str, extra: &str) -> Bouncer {
    let exe = ["pgbouncer", "/usr/sbin/pgbouncer"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("pgbouncer is not installed: apt-get install -y pgbouncer (.ci/run does)");
    let (host, port, dbname, password) = parts(url);
    let dir = tempfile::tempdir().expect("tempdir");
    // PgBouncer refuses to run as root: as root it runs as `postgres`, which must write here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let ini = write_ini(
        dir.path(),
        &host,
        &port,
        &password,
        &format!("{mode}\n{extra}"),
    );
    let mut cmd = Command::new(exe);
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if root {
        cmd.args(["-u", "postgres"]);
    }
    let process = Killed(
        cmd.arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer"),
    );
    let socket = dir.path().join(".s.PGSQL.6432");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "pgbouncer did not listen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let url = format!(
        "postgres://postgres@localhost/{dbname}?host={}&port=6432",
        dir.path().display()
    );
    Bouncer {
        url,
        dir,
        server: (host, port, password),
        _process: process,
    }
}

/// PgBouncer's configuration in `dir`, pooling in `mode`, in front of `host:port`.
fn write_ini(
    dir: &std::path::Path,
    host: &str,
    port: &str,
    password: &str,
    mode: &str,
) -> std::path::PathBuf {
    let password = if password.is_empty() {
        String::new()
    } else {
        format!(" password={password}")
    };
    let ini = dir.join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\n* = host={host} port={port} user=postgres{password}\n\n[pgbouncer]\nlisten_addr =\nlisten_port = 6432\nunix_socket_dir = {d}\nauth_type = any\npool_mode = {mode}\nignore_startup_parameters = extra_float_digits\nlogfile = {d}/pgbouncer.log\npidfile = {d}/pgbouncer.pid\n",
            d = dir.display()
        ),
    )
    .expect("ini");
    ini
}

impl Bouncer {
    /// Rewrite the configuration with `mode` and have the running PgBouncer reload it (SIGHUP,
    /// as `RELOAD` on its console does), under whatever clients it has.
    fn switch(&self, mode: &str) {
        let (host, port, password) = &self.server;
        write_ini(self.dir.path(), host, port, password, mode);
        let pid = std::fs::read_to_string(self.dir.path().join("pgbouncer.pid")).expect("pidfile");
        let status = Command::new("kill")
            .args(["-HUP", pid.trim()])
            .status()
            .expect("kill -HUP");
        assert!(status.success(), "pgbouncer did not take SIGHUP");
    }
}

#[tokio::test]
async fn workdo_runs_through_pgbouncer_in_session_mode() {
    let t = db().await;
    let bouncer = pgbouncer(&t.url, "session").await;
    let (url, dir) = (&bouncer.url, &bouncer.dir);

    // Connecting, migrating and jit off, through the pooler.
    let pool = workdo::store::db::connect(url, 2)
        .await
        .unwrap_or_else(|e| panic!("through pgbouncer: {e}"));
    workdo::store::db::migrate(&pool).await.expect("migrate");
    let jit: String = sqlx::query_scalar("show jit")
        .fetch_one(&pool)
        .await
        .expect("show jit");
    assert_eq!(jit, "off");
    pool.close().await;

    // The CLI and a runtime (LISTEN included) through the pooler: a chain of three steps on ten
    // objects runs to the end.
    let template = dir.path().join("chain.yaml");
    std::fs::write(
        &template,
        "name: chainWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n  - { name: b, prereqs: [a], function: { builtin: noop } }\n  - { name: c, prereqs: [b], function: { builtin: noop } }\n",
    )
    .expect("template");
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    workdo(&["templates", "load", &template.display().to_string()]);
    let objects: Vec<String> = (0..10).map(|i| format!("obj:pool{i}")).collect();
    let mut start = vec!["start", "chainWF"];
    start.extend(objects.iter().map(String::as_str));
    workdo(&start);
    let _up = Killed(
        Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(["up", "--no-api", "--max-connections", "6"])
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("workdo up"),
    );
    support::wait_until(
        t.pool(),
        "select count(*) = 30 from workdo.steps where template = 'chainWF' and status = 'completed'",
        60,
    )
    .await;
    let (events, distinct): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct (workflow_id, step)) from workdo.events where kind = 'completed' and template = 'chainWF'",
    )
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert_eq!((events, distinct), (30, 30), "each step completed once");
}

/// In transaction mode two client sessions take turns on one server connection, which would
/// lose LISTEN and leak advisory locks and `SET`s between processes: workdo refuses it at once,
/// saying what to configure, and takes nothing.
#[tokio::test]
async fn a_transaction_pooler_is_refused_with_what_to_configure() {
    let t = db().await;
    support::load(
        &t.store,
        "chain.yaml",
        "name: txWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n",
    )
    .await;
    t.store
        .workflow_start(&workdo::store::StartRequest::new("txWF", &["obj:tx1"]))
        .await
        .expect("start");
    let bouncer = pgbouncer(&t.url, "transaction").await;

    let err = workdo::store::db::connect(&bouncer.url, 2)
        .await
        .expect_err("a transaction pooler is refused")
        .to_string();
    assert!(
        err.contains("transaction") && err.contains("pool_mode = session"),
        "{err}"
    );
    for args in [&["status"][..], &["up", "--no-api"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &bouncer.url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("pool_mode = session"),
            "{args:?} through a transaction pooler: {stderr}"
        );
    }
    let s = support::step(t.pool(), "obj:tx1", "a").await;
    assert_eq!(s.status, "ready", "nothing was claimed through the pooler");
}

/// The first line `workdo up ARGS` (on `url`) writes to stderr that contains `needle`.
fn up_says(url: &str, args: &[&str], needle: &str) -> String {
    use std::io::BufRead;
    let mut up = Killed(
        Command::new(env!("CARGO_BIN_EXE_workdo"))
            .arg("up")
            .args(args)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("workdo up"),
    );
    let stderr = up.0.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                assert!(Instant::now() < deadline, "workdo up never said {needle:?}");
            }
            Err(e) => panic!("workdo up ended without saying {needle:?}: {e}"),
        }
    }
}

/// `workdo up` says at start when the server cannot hold the connections it may open.
#[tokio::test]
async fn up_warns_when_the_server_has_no_room_for_its_connections() {
    let t = db().await;
    let max: i64 = sqlx::query_scalar("select current_setting('max_connections')::bigint")
        .fetch_one(t.pool())
        .await
        .expect("max_connections");
    let asked = (max + 10).to_string();
    let warned = up_says(
        &t.url,
        &["--no-api", "--max-connections", &asked],
        "database connections",
    );
    assert!(
        warned.contains(&format!("up to {}", max + 10 + 1)) && warned.contains("max_connections"),
        "{warned}"
    );
}

/// Through PgBouncer, `workdo up` reads the pool's size from its console and says when the
/// process may hold more connections than the pool gives (issue 47: a pool of 20 under two
/// processes took 11 times as long as one of 40).
#[tokio::test]
async fn up_warns_when_pgbouncers_pool_is_smaller_than_its_connections() {
    let t = db().await;
    let bouncer = pgbouncer_with(&t.url, "session", "default_pool_size = 4").await;
    let warned = up_says(
        &bouncer.url,
        &["--no-api", "--max-connections", "6"],
        "default_pool_size",
    );
    assert!(
        warned.contains("up to 7 database connections")
            && warned.contains("PgBouncer pools 4 server connections"),
        "{warned}"
    );
}

/// A pooler switched to transaction mode under two running runtimes (PgBouncer's `pool_mode`
/// rewritten and reloaded): each runtime notices, says what to configure and stops claiming;
/// nothing panics; a CLI run through it meanwhile is refused with the same words, never a raw
/// statement error. Switched back, the runtimes resume and every step completes exactly once.
#[tokio::test]
async fn a_pooler_switched_to_transaction_mode_under_running_runtimes_stops_them_until_it_is_right()
{
    let t = db().await;
    let bouncer = pgbouncer(&t.url, "session").await;
    let (url, dir) = (&bouncer.url, &bouncer.dir);
    let template = dir.path().join("switch.yaml");
    std::fs::write(
        &template,
        "name: switchWF\nsteps:\n  - { name: a, function: { builtin: noop } }\n  - { name: b, prereqs: [a], function: { builtin: noop } }\n  - { name: c, prereqs: [b], function: { builtin: noop } }\n",
    )
    .expect("template");
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "error")
            .output()
            .expect("workdo")
    };
    let out = cli(&["templates", "load", &template.display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects: Vec<String> = (0..5000).map(|i| format!("obj:switch{i}")).collect();
    let mut start = vec!["start", "switchWF"];
    start.extend(objects.iter().map(String::as_str));
    let out = cli(&start);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let logs: Vec<std::path::PathBuf> = (0..2)
        .map(|i| dir.path().join(format!("up{i}.log")))
        .collect();
    let mut ups: Vec<Killed> = logs
        .iter()
        .map(|log| {
            Killed(
                Command::new(env!("CARGO_BIN_EXE_workdo"))
                    .args(["up", "--no-api", "--max-connections", "8"])
                    .env("DATABASE_URL", url)
                    .env("RUST_LOG", "warn")
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(log).expect("log"))
                    .spawn()
                    .expect("workdo up"),
            )
        })
        .collect();
    let read = |log: &std::path::Path| std::fs::read_to_string(log).unwrap_or_default();
    support::wait_until(
        t.pool(),
        "select count(*) >= 300 from workdo.steps where template = 'switchWF' and status = 'completed'",
        60,
    )
    .await;

    bouncer.switch("transaction");
    support::wait_for("both runtimes to notice the transaction pooler", 60, || {
        let seen = logs
            .iter()
            .all(|l| read(l).contains("pool_mode = session, then RELOAD"));
        async move { seen }
    })
    .await;
    // A CLI run through the switched pooler: refused at connect or at its first broken
    // statement, with what to configure, or answered; never a raw statement error or a panic.
    for _ in 0..5 {
        let out = cli(&["status"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || stderr.contains("pool_mode = session"),
            "status through a transaction pooler: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    for up in &mut ups {
        assert!(
            up.0.try_wait().expect("try_wait").is_none(),
            "a runtime ended under the transaction pooler"
        );
    }

    bouncer.switch("session");
    support::wait_until(
        t.pool(),
        "select count(*) = 15000 from workdo.steps where template = 'switchWF' and status = 'completed'",
        120,
    )
    .await;
    for log in &logs {
        let text = read(log);
        assert!(!text.contains("panicked"), "{text}");
        assert!(text.contains("claiming resumes"), "{text}");
    }
    let (events, distinct): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct (workflow_id, step)) from workdo.events where kind = 'completed' and template = 'switchWF'",
    )
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert_eq!(
        (events, distinct),
        (15000, 15000),
        "each step completed once"
    );
    let errors: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where template = 'switchWF' and status <> 'completed'",
    )
    .fetch_one(t.pool())
    .await
    .expect("errors");
    assert_eq!(errors, 0);
}
