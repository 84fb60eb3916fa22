//! Failover: a primary and a streaming standby (`pg_basebackup -R`) on loopback, `workdo up` on
//! the multi-host URL `postgres://…@primary,standby/workdo?target_session_attrs=read-write`, the
//! primary stopped hard (`pg_ctl stop -m immediate`) mid-run and the standby promoted. With
//! synchronous replication every step completes, none runs twice, and work resumes within
//! seconds of the promotion.
//!
//! `WORKDO_FAILOVER_ASYNC=1` runs the same with asynchronous replication and prints the figures
//! instead of asserting "none twice" (an acknowledged completion the standby had not received
//! is lost with the primary and its step runs again): how the closing note's asynchronous
//! figures were measured.

use crate::support;
use support::Killed;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// A server of the test's own, started with `pg_ctl` (as `postgres` when we are root).
struct Server {
    bin: PathBuf,
    pgdata: PathBuf,
    port: u16,
}

fn root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn pg(bin: &Path, program: &str, args: &[&str]) -> Output {
    let exe = bin.join(program);
    let out = if root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&exe)
            .args(args)
            .output()
    } else {
        Command::new(&exe).args(args).output()
    }
    .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Server {
    fn start(&self, extra: &str) {
        let dir = self.pgdata.parent().expect("parent");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100 -c jit=off {extra}",
            self.port,
            dir.display()
        );
        let log = format!("{}.log", self.pgdata.display());
        let pgdata = self.pgdata.display().to_string();
        pg(
            &self.bin,
            "pg_ctl",
            &[
                "start", "-D", &pgdata, "-w", "-t", "60", "-l", &log, "-o", &opts,
            ],
        );
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let pgdata = self.pgdata.display().to_string();
        let _ = Command::new(self.bin.join("pg_ctl"))
            .args(["stop", "-D", &pgdata, "-m", "immediate"])
            .output();
        if root() {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"))
                .args(["stop", "-D", &pgdata, "-m", "immediate"])
                .output();
        }
    }
}

async fn completed(pool: &PgPool) -> Option<i64> {
    sqlx::query_scalar(
        "select count(*) from workdo.steps where template = 'failWF' and status = 'completed'",
    )
    .fetch_one(pool)
    .await
    .ok()
}

#[tokio::test]
async fn a_primary_stopped_hard_mid_run_loses_nothing_and_runs_nothing_twice() {
    const OBJECTS: usize = 150;
    const STEPS: i64 = 3 * OBJECTS as i64;
    let asynchronous = std::env::var("WORKDO_FAILOVER_ASYNC").is_ok_and(|v| v == "1");
    // The directory the server binaries really live in (PATH may hold links to a few of them),
    // where pg_basebackup is too.
    let bin = workdo::pg::find_bin_dir()
        .and_then(|d| d.join("initdb").canonicalize().ok())
        .and_then(|f| f.parent().map(Path::to_path_buf))
        .expect("no PostgreSQL server binaries: apt-get install -y postgresql");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let primary = Server {
        bin: bin.clone(),
        pgdata: dir.path().join("primary"),
        port: free_port(),
    };
    let standby = Server {
        bin: bin.clone(),
        pgdata: dir.path().join("standby"),
        port: free_port(),
    };
    let p = primary.pgdata.display().to_string();
    pg(
        &bin,
        "initdb",
        &[
            "-D",
            &p,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
        ],
    );
    primary.start(if asynchronous {
        ""
    } else {
        "-c synchronous_standby_names=*"
    });
    let port = primary.port.to_string();
    let s = standby.pgdata.display().to_string();
    pg(
        &bin,
        "pg_basebackup",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-D",
            &s,
            "-R",
            "-X",
            "stream",
        ],
    );
    standby.start("");
    let admin = workdo::store::db::connect(&primary.url("postgres"), 2)
        .await
        .expect("primary");
    support::wait_for("the standby to stream", 60, || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from pg_stat_replication where state = 'streaming'",
        )
        .fetch_one(&admin)
        .await
        .is_ok_and(|n| n == 1)
    })
    .await;
    workdo::store::db::create_database(&primary.url("postgres"), "workdo")
        .await
        .expect("create workdo");
    admin.close().await;

    // Three steps per object through a function that records every call by step id.
    let runs = dir.path().join("runs");
    let function = support::function_script(
        dir.path(),
        "record.sh",
        &format!(
            "#!/bin/sh\ncat | grep -o '\"step_id\":[0-9]*' | head -n 1 >> '{}'\nsleep 0.05\necho '{{\"status\":\"completed\"}}'\n",
            runs.display()
        ),
    );
    let template = dir.path().join("fail.yaml");
    std::fs::write(
        &template,
        format!(
            "name: failWF\nsteps:\n  - {{ name: a, function: {{ exec: ['{function}'], concurrency: 8 }} }}\n  - {{ name: b, prereqs: [a], function: {{ exec: ['{function}'], concurrency: 8 }} }}\n  - {{ name: c, prereqs: [b], function: {{ exec: ['{function}'], concurrency: 8 }} }}\n"
        ),
    )
    .expect("template");
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/workdo?target_session_attrs=read-write",
        primary.port, standby.port
    );
    let workdo = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
            .args(args)
            .env("DATABASE_URL", &url)
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
    let objects: Vec<String> = (0..OBJECTS).map(|i| format!("obj:fo{i}")).collect();
    let mut start = vec!["start", "failWF"];
    start.extend(objects.iter().map(String::as_str));
    workdo(&start);

    let _up = Killed(support::spawn_up(&url, &["--poll-interval", "200ms"]));
    let on_primary = workdo::store::db::connect(&primary.url("workdo"), 2)
        .await
        .expect("primary");
    support::wait_for("a third of the steps to complete", 120, || async {
        completed(&on_primary).await.is_some_and(|n| n >= STEPS / 3)
    })
    .await;

    // Asynchronous: a standby that has fallen behind, as under load or across a slow link. Its
    // WAL receiver is stopped while the primary acknowledges more completions, and killed with
    // it (the acknowledged completions it never received are lost with the primary).
    let receiver: Option<i32> = if asynchronous {
        let on_standby = workdo::store::db::connect(&standby.url("postgres"), 1)
            .await
            .expect("standby");
        let pid: i32 = sqlx::query_scalar("select pid from pg_stat_wal_receiver")
            .fetch_one(&on_standby)
            .await
            .expect("the WAL receiver");
        on_standby.close().await;
        let before = completed(&on_primary).await.unwrap_or(0);
        let _ = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status();
        support::wait_for("more completions on the primary alone", 60, || async {
            completed(&on_primary)
                .await
                .is_some_and(|n| n >= before + 60)
        })
        .await;
        Some(pid)
    } else {
        None
    };
    let acknowledged = completed(&on_primary).await.unwrap_or(0);
    // Stop the primary hard mid-run and promote the standby.
    pg(&bin, "pg_ctl", &["stop", "-D", &p, "-m", "immediate"]);
    if let Some(pid) = receiver {
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    }
    let killed = Instant::now();
    on_primary.close().await;
    pg(&bin, "pg_ctl", &["promote", "-D", &s, "-w"]);
    let promoted = killed.elapsed();
    let on_standby = workdo::store::db::connect(&standby.url("workdo"), 2)
        .await
        .expect("the promoted standby");
    let at_promotion = completed(&on_standby).await.expect("count");
    let mut resumed = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let n = completed(&on_standby).await.unwrap_or(0);
        if resumed.is_none() && n > at_promotion {
            resumed = Some(killed.elapsed());
        }
        if n == STEPS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{n} of {STEPS} steps completed 180 s after the failover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let finished = killed.elapsed();
    let resumed = resumed.expect("resumed");

    let text = std::fs::read_to_string(&runs).expect("runs");
    let mut calls = std::collections::HashMap::<&str, usize>::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        *calls.entry(line).or_default() += 1;
    }
    let twice = calls.values().filter(|&&n| n > 1).count();
    let not_run = STEPS as usize - calls.len();
    eprintln!(
        "failover ({}): promoted {:.2}s after the kill; first completion on the new primary {:.2}s after the kill; all {STEPS} steps {:.2}s after; completed on the new primary at promotion {at_promotion} (acknowledged by the old one with the standby cut off: {acknowledged}, so at least {} acknowledged completions lost);  steps run twice {twice}; steps never run {not_run}",
        if asynchronous {
            "asynchronous"
        } else {
            "synchronous"
        },
        promoted.as_secs_f64(),
        resumed.as_secs_f64(),
        finished.as_secs_f64(),
        (acknowledged - at_promotion).max(0),
    );
    assert_eq!(not_run, 0, "every step ran");
    if !asynchronous {
        assert_eq!(twice, 0, "with synchronous replication no step runs twice");
        // Promotion itself takes about a second here; the runtime finds the new primary within
        // its one-second check and a few connection attempts.
        assert!(
            resumed < promoted + Duration::from_secs(15),
            "work resumed {:.1}s after the kill (promoted after {:.1}s)",
            resumed.as_secs_f64(),
            promoted.as_secs_f64()
        );
    }
    // Nothing is left leased or in doubt.
    let started: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where template = 'failWF' and status <> 'completed'",
    )
    .fetch_one(&on_standby)
    .await
    .expect("count");
    assert_eq!(started, 0);
    on_standby.close().await;
}
