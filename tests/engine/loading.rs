//! Inputs refused when they are loaded instead of breaking something later: an unknown
//! builtin, a `<workflow>` root, a schedule for an unknown template, a bad alert address, an
//! endless token expiry; a BOM accepted; a stored template this binary cannot run.

use crate::support;

use support::{db, load};
use workdo::api::Access;
use workdo::store::StartRequest;

async fn serve(store: workdo::store::Store, access: Access) -> String {
    support::serve_api(&store, access).await
}

/// `workdo ARGS` against `t`'s database: whether it succeeded, and what it said on stderr.
fn workdo<A: AsRef<std::ffi::OsStr>>(
    t: &support::TestDb,
    args: impl IntoIterator<Item = A>,
) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(args)
        .env("DATABASE_URL", &t.url)
        .output()
        .expect("workdo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `workdo templates load` of a new folder holding `files` (name, text).
fn load_folder(t: &support::TestDb, files: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("dir");
    for (file, text) in files {
        std::fs::write(dir.path().join(file), text).expect("file");
    }
    let folder = dir.path().as_os_str();
    workdo(
        t,
        [std::ffi::OsStr::new("templates"), "load".as_ref(), folder],
    )
}

/// Inputs that once loaded and broke something later are refused when loaded, naming what is
/// wrong: an unknown builtin (it stopped every runtime), a `<workflow>` root; a BOM is accepted.
#[test]
fn templates_are_refused_or_accepted_as_they_should_be() {
    use workdo::model::template::{Format, parse};
    let e = parse(
        "rm.yaml",
        Format::Yaml,
        "name: rmWF\nsteps:\n  - name: a\n    function: { builtin: rm-rf }\n",
    )
    .expect_err("an unknown builtin");
    let said = e.to_string();
    assert!(
        said.contains("rm.yaml:3: builtin: no builtin function \"rm-rf\""),
        "{said}"
    );
    let e = parse(
        "rm.xml",
        Format::Xml,
        r#"<workflow-def id="rmWF"><process name="a"><function builtin="rm-rf"/></process></workflow-def>"#,
    )
    .expect_err("an unknown builtin in XML");
    assert!(e.to_string().contains("no builtin function"), "{e}");
    let e = parse(
        "w.xml",
        Format::Xml,
        r#"<workflow id="accessionWF" objectId="druid:bb123cd4567"><process name="a"/></workflow>"#,
    )
    .expect_err("a <workflow> document is not a template");
    assert!(e.to_string().contains("expected <workflow-def>"), "{e}");
    let bom = parse(
        "bom.yaml",
        Format::Yaml,
        "\u{feff}name: bomWF\nsteps:\n  - name: a\n",
    )
    .expect("a BOM is not part of the text");
    assert_eq!(bom.template.name, "bomWF");
    let e = parse(
        "mail.yaml",
        Format::Yaml,
        "name: mailWF\nalerts: { to: [not an address] }\nsteps:\n  - name: a\n",
    )
    .expect_err("a bad alert address");
    assert!(e.to_string().contains("not a mail address"), "{e}");
}

/// A stored template this binary cannot run (a builtin it lacks, as a newer binary might have
/// stored) does not stop the runtime: its step waits, every other step runs.
#[tokio::test]
async fn a_template_this_binary_cannot_run_does_not_stop_the_others() {
    let t = db().await;
    load(
        &t.store,
        "ok.yaml",
        "name: okWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    load(
        &t.store,
        "later.yaml",
        "name: laterWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    // As a newer binary would have stored it.
    sqlx::query(
        "update workdo.templates set spec = jsonb_set(spec, '{steps,0,function,runner,name}', '\"from-the-future\"') where name = 'laterWF'",
    )
    .execute(t.pool())
    .await
    .expect("a builtin this binary lacks");
    t.store
        .workflow_start(&StartRequest::new("okWF", &["obj:ok"]))
        .await
        .expect("start");
    t.store
        .workflow_start(&StartRequest::new("laterWF", &["obj:later"]))
        .await
        .expect("start");
    let mut up = support::spawn_up(&t.url, &[]);
    support::wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where object_id = 'obj:ok'",
        60,
    )
    .await;
    assert!(up.try_wait().expect("wait").is_none(), "workdo up exited");
    let later: String =
        sqlx::query_scalar("select status from workdo.steps where object_id = 'obj:later'")
            .fetch_one(t.pool())
            .await
            .expect("status");
    assert_eq!(later, "ready");
    let _ = up.kill();
    let _ = up.wait();
    // The page says which step this binary cannot run, and why.
    let base = serve(t.store.clone(), Access::Open).await;
    let page = reqwest::get(format!("{base}/ui/templates"))
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(
        page.contains("cannot run step a: no builtin function &quot;from-the-future&quot;"),
        "{page}"
    );
}

/// A schedule naming a template that is not loaded is refused, and nothing of its file saved.
#[tokio::test]
async fn a_schedule_for_an_unknown_template_is_refused() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.yaml");
    std::fs::write(
        &file,
        "schedules:\n  - name: nightly\n    cron: '0 0 3 * * *'\n    start: nopeWF\n    objects: { ids: [druid:bb123cd4567] }\n",
    )
    .expect("file");
    let (ok, said) = workdo(
        &t,
        ["schedules".as_ref(), "load".as_ref(), file.as_os_str()],
    );
    assert!(!ok);
    assert!(
        said.contains("nopeWF") && said.contains("not a loaded template"),
        "{said}"
    );
    let n: i64 = sqlx::query_scalar("select count(*) from workdo.schedules")
        .fetch_one(t.pool())
        .await
        .expect("count");
    assert_eq!(n, 0);
}

/// `tokens create --expires 99999999d` is an error, not a panic.
#[tokio::test]
async fn an_endless_token_expiry_is_an_error() {
    let t = db().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args([
            "tokens",
            "create",
            "--role",
            "viewer",
            "--expires",
            "99999999d",
        ])
        .env("DATABASE_URL", &t.url)
        .output()
        .expect("workdo");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("at most 36500d") && !said.contains("panicked"),
        "{said}"
    );
}

/// Tokens no one could use are refused with the reason, and none is made: one already expired
/// (`--expires 0s`), a scoped one that may send nothing, a scoped one also given a role.
#[tokio::test]
async fn tokens_no_one_could_use_are_refused() {
    let t = db().await;
    let cases: [(&[&str], &str); 3] = [
        (&["--role", "admin", "--expires", "0s"], "already expired"),
        (&["--workflow", "1", "--signals", ""], "names no signal"),
        (
            &["--role", "admin", "--workflow", "1", "--signals", "open"],
            "--role and --workflow",
        ),
    ];
    for (args, says) in cases {
        let (ok, said) = workdo(&t, ["tokens", "create"].iter().chain(args));
        assert!(!ok && said.contains(says), "{args:?}: {said}");
    }
    assert_eq!(
        support::count(t.pool(), "select count(*) from workdo.tokens").await,
        0
    );
}

/// Files that never end or never open are not read for ever: a FIFO among the templates of a
/// folder is refused by name (the load waited for ever), and `/dev/zero` as a document is read
/// no further than the 64 MiB a file may hold (the process grew until the kernel killed it).
#[tokio::test]
async fn special_files_are_refused_not_read() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("a.yaml"),
        "name: aWF\nsteps:\n  - name: x\n",
    )
    .expect("a");
    let fifo = dir.path().join("b.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let run = |args: Vec<String>| {
        let url = t.url.clone();
        async move {
            let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
                .args(&args)
                .env("DATABASE_URL", &url)
                .kill_on_drop(true)
                .output();
            tokio::time::timeout(std::time::Duration::from_secs(60), child)
                .await
                .unwrap_or_else(|_| panic!("{args:?} did not end"))
                .expect("workdo")
        }
    };
    let folder = dir.path().display().to_string();
    let out = run(vec!["templates".into(), "load".into(), folder]).await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("b.yaml") && said.contains("not a regular file"),
        "{said}"
    );
    let loaded: i64 =
        sqlx::query_scalar("select count(*) from workdo.templates where name = 'aWF'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(loaded, 0, "a load with any problem loads nothing");
    let out = run(vec![
        "objects".into(),
        "add".into(),
        "obj:zero".into(),
        "--document".into(),
        "d=/dev/zero".into(),
    ])
    .await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("64 MiB"), "{said}");
}

/// A folder where one file's name is a machine's already loads nothing (the files before it
/// were saved), and the error names that file and says what the name is.
#[tokio::test]
async fn a_load_the_database_refuses_loads_nothing() {
    let t = db().await;
    load(
        &t.store,
        "m.yaml",
        "name: takenWF\nkind: machine\ninitial: A\nstates:\n  A: { final: true }\n",
    )
    .await;
    let (ok, said) = load_folder(
        &t,
        &[
            ("a.yaml", "name: aaPartWF\nsteps:\n  - name: x\n"),
            ("b.yaml", "name: takenWF\nsteps:\n  - name: x\n"),
            ("c.yaml", "name: ccPartWF\nsteps:\n  - name: x\n"),
        ],
    );
    assert!(
        !ok && said.contains("b.yaml") && said.contains("is a state machine already"),
        "{said}"
    );
    let n = support::count(
        t.pool(),
        "select count(*) from workdo.templates where name in ('aaPartWF', 'ccPartWF')",
    )
    .await;
    assert_eq!(n, 0);
}

/// A file's inline schedules are saved in the load's transaction: one that starts a template
/// no file loads fails the whole load (the templates were committed before, the schedules
/// after, and the load said "nothing loaded"); one that starts a template a later file loads
/// is saved with it.
#[tokio::test]
async fn inline_schedules_load_with_their_templates_or_nothing_does() {
    let t = db().await;
    let schedule = |name: &str, starts: &str| {
        format!(
            "name: {name}\nsteps:\n  - name: x\nschedules:\n  - name: {name}-nightly\n    cron: \"0 0 3 * * *\"\n    start: {starts}\n    objects: {{ ids: [druid:bb123cd4567] }}\n"
        )
    };
    let (ok, said) = load_folder(
        &t,
        &[
            ("a.yaml", "name: aaSchedWF\nsteps:\n  - name: x\n"),
            ("b.yaml", &schedule("bbSchedWF", "nopeWF")),
        ],
    );
    assert!(
        !ok && said.contains("b.yaml") && said.contains("nopeWF"),
        "{said}"
    );
    let saved = support::count(
        t.pool(),
        "select (select count(*) from workdo.templates) + (select count(*) from workdo.schedules)",
    )
    .await;
    assert_eq!(saved, 0, "nothing loaded");
    let (ok, said) = load_folder(
        &t,
        &[
            ("a.yaml", &schedule("aaSchedWF", "zzSchedWF")),
            ("z.yaml", "name: zzSchedWF\nsteps:\n  - name: x\n"),
        ],
    );
    assert!(ok, "{said}");
    let template: String = sqlx::query_scalar(
        "select template from workdo.schedules where name = 'aaSchedWF-nightly'",
    )
    .fetch_one(t.pool())
    .await
    .expect("the schedule");
    assert_eq!(template, "zzSchedWF");
}
