//! The `workdo` binary as a user runs it: with no DATABASE_URL it starts its own cluster.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const WORKDO: &str = env!("CARGO_BIN_EXE_workdo");

/// A data directory whose private cluster is stopped when the test ends, pass or fail.
struct DataDir {
    dir: tempfile::TempDir,
}

impl DataDir {
    fn new() -> Self {
        DataDir {
            dir: tempfile::Builder::new()
                .prefix("workdo-cli-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(WORKDO)
            .args(args)
            .arg("--data-dir")
            .arg(self.path())
            .env_remove("DATABASE_URL")
            .current_dir(repo_root())
            .output()
            .expect("run workdo")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "workdo {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = self.run(&["db", "stop"]);
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn embedded_cluster_runs_the_readme_walkthrough_and_is_reused() {
    let d = DataDir::new();
    let loaded = d.ok(&["templates", "load", "workflows/"]);
    assert!(
        loaded.contains("loaded googleScannedBookWF (9 steps"),
        "{loaded}"
    );
    assert!(loaded.contains("loaded accessionWF"), "{loaded}");
    let started = d.ok(&["start", "googleScannedBookWF", "druid:bb123cd4567"]);
    assert!(started.contains("ready: descriptive-metadata"), "{started}");
    let url_before = d.ok(&["db", "url"]);

    let status = d.ok(&["status", "--json"]);
    let facets: serde_json::Value = serde_json::from_str(&status).expect("status --json is JSON");
    let ready = facets
        .as_array()
        .expect("array")
        .iter()
        .find(|f| f["step"] == "descriptive-metadata")
        .expect("descriptive-metadata facet");
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["count"], 1);

    // The same cluster answers the next call.
    assert_eq!(d.ok(&["db", "url"]), url_before);
    let set = d.ok(&[
        "step",
        "set",
        "druid:bb123cd4567",
        "googleScannedBookWF",
        "descriptive-metadata",
        "completed",
        "--current-status",
        "waiting",
    ]);
    assert!(
        set.contains("now ready: google-convert, google-download"),
        "{set}"
    );
    let why = d.ok(&[
        "why",
        "druid:bb123cd4567",
        "googleScannedBookWF",
        "process-content",
    ]);
    assert!(
        why.contains("waiting for prerequisite google-convert (ready)"),
        "{why}"
    );
    let show = d.ok(&["show", "druid:bb123cd4567"]);
    assert!(show.contains("inprocess"), "{show}");

    // The server settings the private cluster is started with (pg.rs).
    let url = url_before.trim().to_string();
    let settings: (String, String) = tokio::runtime::Runtime::new()
        .expect("tokio runtime")
        .block_on(async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
            sqlx::query_as("select current_setting('jit'), current_setting('wal_buffers')")
                .fetch_one(&mut conn)
                .await
                .expect("settings")
        });
    assert_eq!(settings, ("off".to_string(), "64MB".to_string()));
}

#[test]
fn bad_input_is_a_clear_error_and_loads_nothing() {
    let d = DataDir::new();
    let bad = d.path().join("bad.xml");
    std::fs::write(&bad, "<workflow-def id=\"x\">\n  <process name=\"a\"><prereq>b</prereq></process>\n</workflow-def>\n")
        .expect("write");
    let out = d.run(&[
        "templates",
        "load",
        "workflows/",
        bad.to_str().expect("utf-8 path"),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.xml:2: prereq: unknown prerequisite \"b\""),
        "{err}"
    );
    let list = d.ok(&["templates", "list", "--json"]);
    assert_eq!(list.trim(), "[]", "one bad file loads nothing");

    let out = d.run(&["queue", "no-colon"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected TEMPLATE:STEP"));
    let out = d.run(&[
        "start",
        "googleScannedBookWF",
        "druid:bb123cd4567",
        "--context",
        "{oops",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--context is not valid JSON"));
    // An object id that is not one is refused by the CLI as by every interface.
    let out = d.run(&["start", "googleScannedBookWF", "druid:x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid druid \"druid:x\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn missing_server_binaries_get_an_install_hint() {
    let d = DataDir::new();
    let out = Command::new(WORKDO)
        .args(["status", "--data-dir"])
        .arg(d.path())
        .env_remove("DATABASE_URL")
        .env("WORKDO_PG_BIN", d.path().join("nowhere"))
        .output()
        .expect("run workdo");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no PostgreSQL server binaries"), "{err}");
    assert!(err.contains("apt-get install postgresql"), "{err}");
}

/// Runtime tuning flags out of range are refused before anything starts, naming the flag.
#[test]
fn runtime_tuning_out_of_range_is_refused() {
    let d = DataDir::new();
    for (flag, value) in [("--completers", "0"), ("--commit-batch", "0")] {
        let out = d.run(&["worker", flag, value]);
        assert!(!out.status.success(), "{flag} {value} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains(value), "{err}");
    }
    assert!(
        !d.path().join("pgdata").exists(),
        "no cluster was started for a command refused at parsing"
    );
}

#[test]
fn a_workflow_service_folder_loads_whole() {
    // A folder like the workflow service's configuration: several workflow-defs have no
    // process at all ("for indexing"); one refused file used to make the folder load nothing.
    let d = DataDir::new();
    let out = d.ok(&["templates", "load", "tests/fixtures/workflow-service"]);
    assert_eq!(out.lines().count(), 11, "{out}");
    let list: serde_json::Value =
        serde_json::from_str(&d.ok(&["templates", "list", "--json"])).expect("JSON");
    let names: Vec<&str> = list
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    for name in [
        "swIndexWF",
        "sdrRecoveryWF",
        "versioningWF",
        "googleScannedBookWF",
    ] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
    let started = d.ok(&["start", "swIndexWF", "druid:bb123cd4567", "--json"]);
    assert!(started.contains("swIndexWF"), "{started}");
    let shown: serde_json::Value =
        serde_json::from_str(&d.ok(&["show", "druid:bb123cd4567", "--json"])).expect("JSON");
    assert_eq!(shown["workflows"][0]["status"], "completed", "{shown}");
}

#[test]
fn commands_starting_together_on_a_new_data_dir_all_succeed() {
    // Two `workdo up` on a new machine is normal: both create the database and migrate.
    let d = DataDir::new();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(WORKDO)
                .args(["status", "--data-dir"])
                .arg(d.path())
                .env_remove("DATABASE_URL")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn workdo")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn db_stop_takes_a_relative_data_dir() {
    let d = DataDir::new();
    let parent = d.path().parent().expect("parent");
    let name = d.path().file_name().expect("name");
    let run = |args: &[&str]| {
        Command::new(WORKDO)
            .args(args)
            .arg("--data-dir")
            .arg(name)
            .env_remove("DATABASE_URL")
            .current_dir(parent)
            .output()
            .expect("run workdo")
    };
    assert!(run(&["db", "url"]).status.success());
    let out = run(&["db", "stop"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !d.path().join("pgdata/postmaster.pid").exists(),
        "the cluster still runs"
    );
}

/// Help a person can use: every command and subcommand ends with an example, and every option
/// and argument says what it is for.
#[test]
fn every_command_has_an_example_and_every_option_a_description() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for sub in cmd.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            let example = sub
                .get_after_help()
                .is_some_and(|h| h.to_string().contains("Example"));
            if !example {
                missing.push(format!("{path}: no example"));
            }
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path}: {id} has no description"));
                }
            }
            walk(sub, &path, missing);
        }
    }
    let cmd = workdo::cli::Cli::command();
    let mut missing = Vec::new();
    walk(&cmd, "workdo", &mut missing);
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    // And the example is printed where a person looks for it.
    let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["start", "--help"])
        .output()
        .expect("workdo start --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("workdo start accessionWF druid:bb123cd4567"),
        "{help}"
    );
    // The global options are shown once, in `workdo --help`; a subcommand points there.
    assert!(
        !help.contains("--database-url <") && help.contains("see workdo --help"),
        "{help}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .arg("--help")
        .output()
        .expect("workdo --help");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--database-url <"));
}

/// `--log-level` and `--log-format` refuse what they cannot use, naming it.
#[test]
fn log_options_refuse_what_they_cannot_use() {
    let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["--log-level", "workdo=loud", "db", "url"])
        .env("DATABASE_URL", "postgres://127.0.0.1:1/none")
        .output()
        .expect("workdo");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-level \"workdo=loud\""), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["--log-format", "xml", "db", "url"])
        .output()
        .expect("workdo");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("xml") && err.contains("text") && err.contains("json"),
        "{err}"
    );
}

/// `db stop` says what it did: nothing to stop where there is no private cluster.
#[test]
fn db_stop_without_a_cluster_says_there_is_nothing_to_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["db", "stop", "--data-dir"])
        .arg(dir.path())
        .env_remove("DATABASE_URL")
        .output()
        .expect("workdo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("nothing to stop"), "{stdout}");
}

/// The private cluster asks every connection for its password, so a step function, which runs
/// on the same host without the runtime's secrets, cannot log in over TCP or over the socket
/// (issue 45). The test reads the password itself to show the same probe succeeds with it.
#[test]
fn a_function_cannot_log_in_to_the_embedded_cluster() {
    let d = DataDir::new();
    let shared = d.ok(&["db", "url", "--redact"]);
    let password = std::fs::read_to_string(d.path().join("password")).expect("password file");
    let password = password.trim();
    assert_eq!(password.len(), 64, "256 random bits in hex");
    assert!(!shared.contains(password), "db url --redact: {shared}");
    assert!(shared.contains("postgres:***@127.0.0.1:"), "{shared}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.path().join("password"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o077,
        0,
        "the password file is the owner's alone: {mode:o}"
    );
    let full = d.ok(&["db", "url"]);
    assert!(full.contains(password), "db url gives psql what it needs");
    let port: String = shared
        .split("127.0.0.1:")
        .nth(1)
        .expect("port")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let psql = workdo::pg::find_bin_dir()
        .map(|b| b.join("psql"))
        .filter(|p| p.is_file())
        .map_or_else(|| "psql".to_string(), |p| p.display().to_string());
    let socket = d.path().join("pgdata");
    let out = tempfile::tempdir().expect("tempdir");
    let probe = |host: &str, name: &str| {
        format!(
            "'{psql}' -w -X -h '{host}' -p {port} -U postgres -d workdo -c 'select count(*) from workdo.tokens' >'{o}/{name}.out' 2>&1; echo $? >'{o}/{name}.rc'\n",
            o = out.path().display()
        )
    };
    let script = support::function_script(
        out.path(),
        "intruder.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\n{}{}echo '{{\"status\":\"completed\"}}'\n",
            probe("127.0.0.1", "tcp"),
            probe(&socket.display().to_string(), "socket")
        ),
    );
    let template = out.path().join("intruder.yaml");
    std::fs::write(
        &template,
        format!("name: intruderWF\nsteps:\n  - name: probe\n    function: {{ exec: {script} }}\n"),
    )
    .expect("template");
    d.ok(&["templates", "load", &template.display().to_string()]);
    d.ok(&["start", "intruderWF", "obj:intruder"]);
    let mut up = Command::new(WORKDO)
        .args(["up", "--no-api", "--data-dir"])
        .arg(d.path())
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("workdo up");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !out.path().join("socket.rc").exists()
        || !d.ok(&["show", "obj:intruder"]).contains("completed")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the function never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = up.kill();
    let _ = up.wait();
    for name in ["tcp", "socket"] {
        let rc = std::fs::read_to_string(out.path().join(format!("{name}.rc"))).expect("rc");
        let said = std::fs::read_to_string(out.path().join(format!("{name}.out"))).expect("out");
        assert_ne!(rc.trim(), "0", "the function logged in over {name}: {said}");
        assert!(said.contains("password"), "{name}: {said}");
    }
    // The same probe with the password gets in: what kept the function out was the password.
    for host in ["127.0.0.1".to_string(), socket.display().to_string()] {
        let with = Command::new(&psql)
            .args([
                "-w", "-X", "-h", &host, "-p", &port, "-U", "postgres", "-d", "workdo",
            ])
            .args(["-c", "select 1"])
            .env("PGPASSWORD", password)
            .output()
            .expect("psql");
        assert!(
            with.status.success(),
            "{host}: {}",
            String::from_utf8_lossy(&with.stderr)
        );
    }
}

/// A cluster made by an older workdo trusted every loopback connection: the next command moves
/// it to a generated password, and nothing gets in without it.
#[test]
fn a_cluster_that_trusted_loopback_is_moved_to_a_password() {
    let d = DataDir::new();
    d.ok(&["db", "url"]);
    d.ok(&["db", "stop"]);
    let hba = d.path().join("pgdata/pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\nhost all all 127.0.0.1/32 trust\n",
    )
    .expect("hba");
    std::fs::remove_file(d.path().join("password")).expect("rm password");
    std::fs::remove_file(d.path().join("password.applied")).expect("rm mark");
    let url = d.ok(&["db", "url"]);
    let password = std::fs::read_to_string(d.path().join("password")).expect("new password");
    assert!(url.contains(password.trim()), "{url}");
    let now = std::fs::read_to_string(&hba).expect("hba");
    let trusting = now
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .any(|l| l.split_whitespace().any(|w| w == "trust"));
    assert!(!trusting, "{now}");
    d.ok(&["status"]);
    let psql = workdo::pg::find_bin_dir()
        .map(|b| b.join("psql"))
        .filter(|p| p.is_file())
        .map_or_else(|| "psql".to_string(), |p| p.display().to_string());
    let bare = url.trim().replace(&format!(":{}@", password.trim()), "@");
    let without = Command::new(&psql)
        .args(["-w", "-X", &bare, "-c", "select 1"])
        .output()
        .expect("psql");
    assert!(!without.status.success(), "logged in without the password");
}

/// A password is masked in every error, whichever form of connection string carries it.
#[test]
fn a_password_never_appears_in_an_error_or_log() {
    for url in [
        "postgres://someone:s3cretpw@127.0.0.1:1/db",
        "postgres://someone@127.0.0.1:1/db?password=s3cretpw",
        "postgres://someone@127.0.0.1:1/db?sslmode=disable&sslpassword=s3cretpw",
        "host=127.0.0.1 port=1 user=someone password=s3cretpw dbname=db",
        "host=127.0.0.1 password='s3cretpw x' dbname=db",
    ] {
        let out = Command::new(WORKDO)
            .args(["status"])
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "trace")
            .output()
            .expect("run workdo");
        assert!(!out.status.success(), "{url}");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!said.contains("s3cretpw"), "{url}: {said}");
        assert!(
            said.contains("***"),
            "{url}: the message names what was masked: {said}"
        );
    }
}

/// A cluster that asks for a password whose file is gone is said so, not given a new password
/// that would lock it for good.
#[test]
fn a_cluster_whose_password_file_is_gone_says_so() {
    let d = DataDir::new();
    d.ok(&["db", "url"]);
    let kept = std::fs::read_to_string(d.path().join("password")).expect("password");
    std::fs::remove_file(d.path().join("password")).expect("rm password");
    let out = d.run(&["status"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is gone") && err.contains("password"), "{err}");
    assert!(
        !d.path().join("password").exists(),
        "no new password was made"
    );
    // Restored, it works again (and the cluster is stopped by DataDir's drop).
    std::fs::write(d.path().join("password"), kept).expect("restore");
    d.ok(&["status"]);
}
