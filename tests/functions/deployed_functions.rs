//! Deployed functions (`workdo functions deploy`): stored in Postgres, pinned per workflow when it
//! starts, fetched by any worker into its cache, rolled back, and retried onto a fix; and the
//! version lock for every kind of function: a workflow runs its own template version's
//! definitions to the end.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use support::{config, db, function_script, load, start, wait_until};
use workdo::store::StartRequest;
use workdo::store::functions::NewArtifact;

const WORKDO: &str = env!("CARGO_BIN_EXE_workdo");

/// `workdo ARGS` against `url`, from `cwd`, with nothing of this process's environment but
/// PATH: what a worker on another host has.
fn workdo_in(url: &str, cwd: &Path, args: &[&str]) -> Output {
    Command::new(WORKDO)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .current_dir(cwd)
        .output()
        .expect("run workdo")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A function script answering `note` (and recording its version in a property).
fn stamp_script(dir: &Path, name: &str, note: &str) -> String {
    function_script(
        dir,
        name,
        &format!(
            "#!/bin/sh\ncat >/dev/null\necho '{{\"status\":\"completed\",\"note\":\"{note}\",\"object\":{{\"properties\":{{\"ran\":\"{note}\"}}}}}}'\n"
        ),
    )
}

async fn deploy(t: &support::TestDb, name: &str, path: &str) -> i32 {
    let bytes = std::fs::read(path).expect("read function");
    t.store
        .function_deploy(
            name,
            &NewArtifact {
                bytes: &bytes,
                archive: false,
                entry: None,
                note: None,
                max: workdo::artifact::DEFAULT_MAX_BYTES,
            },
            "test",
        )
        .await
        .expect("deploy")
        .version
}

async fn objects(t: &support::TestDb, prefix: &str, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("obj:{prefix}-{i}")).collect();
    for id in &ids {
        t.store
            .object_put(id, &Default::default(), &Default::default(), "test")
            .await
            .expect("object");
    }
    ids
}

async fn start_on(t: &support::TestDb, template: &str, ids: &[String]) {
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new(template, &refs))
        .await
        .expect("start");
}

/// The notes of `step` by object.
async fn notes(
    t: &support::TestDb,
    step: &str,
) -> std::collections::BTreeMap<String, Option<String>> {
    sqlx::query_as::<_, (String, Option<String>)>(
        "select object_id, note from workdo.steps where name = $1",
    )
    .bind(step)
    .fetch_all(t.pool())
    .await
    .expect("notes")
    .into_iter()
    .collect()
}

const HELD: &str = "name: heldWF\nsteps:\n  - name: hold\n  - name: work\n    prereqs: [hold]\n    function: { deployed: stamp }\n";

/// Twenty workflows start on v1 and wait at a human step; v2 is deployed; twenty more start.
/// Released, the first twenty run v1 and the second twenty v2 — each read from what the
/// function itself answered, and from the version its completed event records. Then a
/// rollback makes v1 what new workflows run.
#[tokio::test]
async fn workflows_run_the_version_they_started_with_and_rollback_moves_new_ones() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = stamp_script(dir.path(), "v1.sh", "v1");
    let v2 = stamp_script(dir.path(), "v2.sh", "v2");
    assert_eq!(deploy(&t, "stamp", &v1).await, 1);
    load(&t.store, "held.yaml", HELD).await;
    let first = objects(&t, "first", 20).await;
    start_on(&t, "heldWF", &first).await;
    assert_eq!(deploy(&t, "stamp", &v2).await, 2);
    // The same bytes again make no new version.
    assert_eq!(deploy(&t, "stamp", &v2).await, 2);
    let second = objects(&t, "second", 20).await;
    start_on(&t, "heldWF", &second).await;
    let mut cfg = config();
    cfg.function_cache = Some(dir.path().join("cache"));
    let rt = start(&t.store, cfg).await;
    let skip = workdo::store::StepFilter {
        template: Some("heldWF".into()),
        step: Some("hold".into()),
        ..Default::default()
    };
    assert_eq!(
        t.store.steps_skip(&skip, "test").await.expect("release"),
        40
    );
    wait_until(
        t.pool(),
        "select count(*) = 40 from workdo.steps where name = 'work' and status = 'completed'",
        60,
    )
    .await;
    let ran = notes(&t, "work").await;
    for id in &first {
        assert_eq!(ran[id].as_deref(), Some("v1"), "{id}");
    }
    for id in &second {
        assert_eq!(ran[id].as_deref(), Some("v2"), "{id}");
    }
    let recorded: Vec<(String, i64)> = sqlx::query_as(
        "select detail->'function'->>'version', count(*) from workdo.events
          where kind = 'completed' and step = 'work' group by 1 order by 1",
    )
    .fetch_all(t.pool())
    .await
    .expect("events");
    assert_eq!(recorded, vec![("1".to_string(), 20), ("2".to_string(), 20)]);
    // `show` names each step's function, version and hash.
    let view = t.store.object_view(&first[0], 5).await.expect("view");
    let f = &view.workflows[0].functions;
    assert_eq!(
        (f[0].step.as_str(), f[0].version),
        ("work", Some(1)),
        "{f:?}"
    );
    // Rolled back: the next workflows run v1 again.
    assert_eq!(
        t.store
            .function_rollback("stamp", 1, "test")
            .await
            .expect("rollback"),
        2
    );
    let third = objects(&t, "third", 5).await;
    start_on(&t, "heldWF", &third).await;
    t.store.steps_skip(&skip, "test").await.expect("release");
    wait_until(
        t.pool(),
        "select count(*) = 45 from workdo.steps where name = 'work' and status = 'completed'",
        60,
    )
    .await;
    rt.stop().await;
    let ran = notes(&t, "work").await;
    for id in &third {
        assert_eq!(ran[id].as_deref(), Some("v1"), "{id}");
    }
    // Deleting is refused while a current template names it.
    let err = t
        .store
        .function_delete("stamp", "test")
        .await
        .expect_err("named");
    assert!(err.to_string().contains("heldWF"), "{err}");
}

/// A failing v1 ends in error; v2 fixes it. A plain retry runs v1 again (the pin holds);
/// `retry --current-functions` moves the workflow to v2 and records the move.
#[tokio::test]
async fn retry_with_current_functions_runs_the_fix() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = function_script(
        dir.path(),
        "broken.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"error\",\"message\":\"v1 is broken\",\"retryable\":false}'\n",
    );
    let fixed = stamp_script(dir.path(), "fixed.sh", "fixed");
    deploy(&t, "fixme", &broken).await;
    load(
        &t.store,
        "fix.yaml",
        "name: fixWF\nsteps:\n  - name: run\n    error-limit: 1\n    function: { deployed: fixme }\n",
    )
    .await;
    let ids = objects(&t, "fix", 3).await;
    start_on(&t, "fixWF", &ids).await;
    let mut cfg = config();
    cfg.function_cache = Some(dir.path().join("cache"));
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select count(*) = 3 from workdo.steps where status = 'error'",
        60,
    )
    .await;
    deploy(&t, "fixme", &fixed).await;
    let filter = workdo::store::StepFilter {
        template: Some("fixWF".into()),
        ..Default::default()
    };
    assert_eq!(
        t.store.steps_retry(&filter, "test").await.expect("retry"),
        3
    );
    wait_until(
        t.pool(),
        "select count(*) = 3 from workdo.steps where status = 'error' and attempts = 1",
        60,
    )
    .await;
    let (n, moved) = t
        .store
        .steps_retry_current(&filter, false, "test")
        .await
        .expect("retry onto the fix");
    assert_eq!((n, moved), (3, 3));
    wait_until(
        t.pool(),
        "select count(*) = 3 from workdo.steps where status = 'completed'",
        60,
    )
    .await;
    rt.stop().await;
    assert!(
        notes(&t, "run")
            .await
            .values()
            .all(|n| n.as_deref() == Some("fixed"))
    );
    let moves: Vec<Value> = sqlx::query_scalar(
        "select detail from workdo.events where kind = 'function_repinned' order by id",
    )
    .fetch_all(t.pool())
    .await
    .expect("events");
    assert_eq!(moves.len(), 3);
    assert_eq!(moves[0]["from"], 1);
    assert_eq!(moves[0]["to"], 2);
}

/// A worker started in an empty folder with nothing but DATABASE_URL fetches and runs the
/// deployed functions, a folder function importing a module beside its entry included. A
/// cached file tampered with is refused, said in the log, and fetched again.
#[tokio::test]
async fn a_worker_with_only_a_database_url_fetches_and_checks_what_it_runs() {
    let t = db().await;
    let src = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(src.path().join("lib")).expect("mkdir");
    std::fs::write(src.path().join("lib/__init__.py"), "").expect("init");
    std::fs::write(src.path().join("lib/words.py"), "WORD = 'from-a-module'\n").expect("module");
    std::fs::write(
        src.path().join("main.py"),
        "#!/usr/bin/env python3\nimport json, sys\nfrom lib.words import WORD\njson.load(sys.stdin)\nprint(json.dumps({'status': 'completed', 'note': WORD}))\n",
    )
    .expect("main");
    // Deployed through the CLI, as a user does.
    let here = tempfile::tempdir().expect("tempdir");
    let said = ok(&workdo_in(
        &t.url,
        here.path(),
        &[
            "functions",
            "deploy",
            "pyfolder",
            &src.path().display().to_string(),
            "--entry",
            "main.py",
            "--note",
            "first",
        ],
    ));
    assert!(
        said.starts_with("deployed pyfolder version 1 (sha256 "),
        "{said}"
    );
    load(
        &t.store,
        "py.yaml",
        "name: pyWF\nsteps:\n  - name: run\n    function: { deployed: pyfolder }\n",
    )
    .await;
    let ids = objects(&t, "py", 4).await;
    start_on(&t, "pyWF", &ids[..2]).await;
    // Another host: an empty folder, an empty cache, only DATABASE_URL.
    let host = tempfile::tempdir().expect("tempdir");
    let cache = host.path().join("cache");
    let mut worker = Command::new(WORKDO)
        .args([
            "worker",
            "pyWF:run",
            "--poll-interval",
            "200ms",
            "--function-cache",
        ])
        .arg(&cache)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "warn")
        .current_dir(host.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("worker");
    wait_until(
        t.pool(),
        "select count(*) = 2 from workdo.steps where status = 'completed'",
        60,
    )
    .await;
    assert!(
        notes(&t, "run")
            .await
            .values()
            .flatten()
            .all(|n| n == "from-a-module")
    );
    // Tamper with the cached module: the next call refuses the copy and fetches it again.
    let entry = std::fs::read_dir(&cache)
        .expect("cache")
        .flatten()
        .find(|e| e.file_name().len() == 64)
        .expect("a cached hash")
        .path();
    let module = entry.join("root/lib/words.py");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        entry.join("root/lib"),
        std::fs::Permissions::from_mode(0o700),
    )
    .expect("chmod");
    std::fs::set_permissions(&module, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(&module, "WORD = 'tampered'\n").expect("tamper");
    let _ = worker.kill();
    let out = worker.wait_with_output().expect("worker output");
    let mut again = Command::new(WORKDO)
        .args([
            "worker",
            "pyWF:run",
            "--poll-interval",
            "200ms",
            "--function-cache",
        ])
        .arg(&cache)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DATABASE_URL", &t.url)
        .env("RUST_LOG", "warn")
        .current_dir(host.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("worker");
    start_on(&t, "pyWF", &ids[2..]).await;
    wait_until(
        t.pool(),
        "select count(*) = 4 from workdo.steps where status = 'completed'",
        60,
    )
    .await;
    let _ = again.kill();
    let log = again.wait_with_output().expect("worker output");
    let log = String::from_utf8_lossy(&log.stderr);
    assert!(
        log.contains("no longer matches"),
        "the worker said nothing: {log}"
    );
    assert!(
        notes(&t, "run")
            .await
            .values()
            .flatten()
            .all(|n| n == "from-a-module"),
        "a tampered copy ran"
    );
    assert_eq!(
        std::fs::read_to_string(&module).expect("refetched"),
        "WORD = 'from-a-module'\n"
    );
    drop(out);
}

/// Loading a template that names a function nobody deployed is refused with its line.
#[tokio::test]
async fn a_template_naming_an_undeployed_function_is_refused_with_its_line() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ghost.yaml");
    std::fs::write(
        &file,
        "name: ghostWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n  - name: b\n    function: { deployed: ghost@2 }\n",
    )
    .expect("template");
    let out = workdo_in(
        &t.url,
        dir.path(),
        &["templates", "load", &file.display().to_string()],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ghost.yaml") && err.contains("line 6") && err.contains("\"ghost@2\""),
        "{err}"
    );
}

/// The version lock for plain functions: v1 workflows keep v1's `exec` for a step v2 changed,
/// and still run a step v2 removed; v2 workflows run v2's.
#[tokio::test]
async fn older_workflows_run_their_own_versions_commands() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let a1 = stamp_script(dir.path(), "a1.sh", "a1");
    let a2 = stamp_script(dir.path(), "a2.sh", "a2");
    let b1 = stamp_script(dir.path(), "b1.sh", "b1");
    load(
        &t.store,
        "lock.yaml",
        &format!("name: lockWF\nsteps:\n  - name: hold\n  - name: a\n    prereqs: [hold]\n    function: {{ exec: {a1} }}\n  - name: b\n    prereqs: [a]\n    function: {{ exec: {b1} }}\n"),
    )
    .await;
    let old = objects(&t, "old", 5).await;
    start_on(&t, "lockWF", &old).await;
    load(
        &t.store,
        "lock.yaml",
        &format!("name: lockWF\nsteps:\n  - name: hold\n  - name: a\n    prereqs: [hold]\n    function: {{ exec: {a2} }}\n"),
    )
    .await;
    let new = objects(&t, "new", 5).await;
    start_on(&t, "lockWF", &new).await;
    let rt = start(&t.store, config()).await;
    let skip = workdo::store::StepFilter {
        template: Some("lockWF".into()),
        step: Some("hold".into()),
        ..Default::default()
    };
    t.store.steps_skip(&skip, "test").await.expect("release");
    wait_until(
        t.pool(),
        "select count(*) = 0 from workdo.workflows where status = 'active'",
        60,
    )
    .await;
    rt.stop().await;
    let a = notes(&t, "a").await;
    let b = notes(&t, "b").await;
    for id in &old {
        assert_eq!(a[id].as_deref(), Some("a1"), "{id}");
        assert_eq!(
            b[id].as_deref(),
            Some("b1"),
            "{id}: the step v2 removed ran"
        );
    }
    for id in &new {
        assert_eq!(a[id].as_deref(), Some("a2"), "{id}");
        assert!(!b.contains_key(id));
    }
}

// The API and the Functions page, in a file of their own.
mod api;
