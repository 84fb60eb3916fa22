//! What a new user hits in the first hour, through the `workdo` binary against a real Postgres
//! (a fresh database each): object versions, property values, refusals that name what is
//! missing, template reloads, and what `show` says.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const WORKDO: &str = env!("CARGO_BIN_EXE_workdo");
const DRUID: &str = "druid:bb123cd4567";

/// The CLI on a database of its own, with a folder for template files.
struct Cli {
    url: String,
    dir: tempfile::TempDir,
}

impl Cli {
    async fn new() -> Cli {
        Cli {
            url: support::empty_db().await,
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(WORKDO)
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env("RUST_LOG", "error")
            .current_dir(self.dir.path())
            .output()
            .expect("run workdo")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "workdo {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `args`, which must fail; its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "workdo {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).expect("JSON output")
    }

    /// Write `source` as `name` in the folder and load it; the command's output.
    fn load(&self, name: &str, source: &str) -> String {
        std::fs::write(self.dir.path().join(name), source).expect("write template");
        self.ok(&["templates", "load", name])
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

const T_WF: &str = "name: tWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n  - name: b\n    prereqs: [a]\n";

#[tokio::test]
async fn an_old_object_version_is_refused_and_only_the_current_one_queues() {
    let c = Cli::new().await;
    c.load("t.yaml", T_WF);
    c.ok(&["start", "tWF", DRUID]);
    c.ok(&["start", "tWF", DRUID, "--version", "2"]);
    let err = c.fails(&["start", "tWF", DRUID, "--version", "1"]);
    assert!(
        err.contains("is at version 2") && err.contains("superseded"),
        "{err}"
    );
    let queue = c.json(&["queue", "tWF:a"]);
    let versions: Vec<i64> = queue
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|e| e["version"].as_i64())
        .collect();
    assert_eq!(versions, vec![2], "{queue}");
    // `show` says the version-1 workflow was superseded, and which template version each runs.
    let shown = c.ok(&["show", DRUID]);
    assert!(
        shown.contains("tWF on object version 1 [superseded by a newer object version"),
        "{shown}"
    );
    let sha = workdo::model::template::sha256_hex(T_WF);
    assert!(
        shown.contains(&format!("template sha256 {}", &sha[..12])),
        "{shown}"
    );
    let view = c.json(&["show", DRUID]);
    assert_eq!(view["workflows"][0]["template_sha256"], sha.as_str());
}

#[tokio::test]
async fn property_values_are_strings_unless_given_as_json() {
    let c = Cli::new().await;
    c.ok(&[
        "objects",
        "add",
        DRUID,
        "--property",
        "barcode=36105010362304123456",
        "--property",
        "id=1e3",
        "--property",
        "rush=null",
        "--property-json",
        "year=1854",
        "--property-json",
        "tags=[\"a\"]",
    ]);
    let props = &c.json(&["show", DRUID])["properties"];
    assert_eq!(props["barcode"], "36105010362304123456");
    assert_eq!(props["id"], "1e3");
    assert_eq!(props["rush"], "null");
    assert_eq!(props["year"], 1854);
    assert_eq!(props["tags"], serde_json::json!(["a"]));
    // JSON null removes a key, as a function's result and the API's PATCH do.
    c.ok(&["objects", "add", DRUID, "--property-json", "year=null"]);
    let props = &c.json(&["show", DRUID])["properties"];
    assert!(props.get("year").is_none(), "{props}");
    let err = c.fails(&["objects", "add", DRUID, "--property-json", "year=18 54"]);
    assert!(err.contains("is not JSON"), "{err}");
}

#[tokio::test]
async fn prioritize_without_a_filter_needs_all() {
    let c = Cli::new().await;
    c.load("t.yaml", T_WF);
    c.ok(&["start", "tWF", DRUID, "druid:bc123df4567"]);
    let err = c.fails(&["prioritize", "5"]);
    assert!(err.contains("--all"), "{err}");
    let done = c.json(&["prioritize", "5", "--all"]);
    assert_eq!(done["steps"], 4);
    let done = c.json(&["prioritize", "7", "--object", DRUID]);
    assert_eq!(done["steps"], 2);
}

#[tokio::test]
async fn unknown_objects_templates_and_steps_are_errors_naming_which() {
    let c = Cli::new().await;
    c.load("t.yaml", T_WF);
    c.ok(&["start", "tWF", DRUID]);
    let err = c.fails(&["why", "druid:zz999zz9999", "tWF", "a"]);
    assert!(err.contains("no object \"druid:zz999zz9999\""), "{err}");
    let err = c.fails(&["why", DRUID, "nopeWF", "a"]);
    assert!(err.contains("unknown template \"nopeWF\""), "{err}");
    let err = c.fails(&["why", DRUID, "tWF", "nope"]);
    assert!(err.contains("tWF has no step \"nope\""), "{err}");
    let err = c.fails(&["queue", "tWF:nope"]);
    assert!(err.contains("tWF has no step \"nope\""), "{err}");
    let err = c.fails(&["queue", "nopeWF:a"]);
    assert!(err.contains("unknown template \"nopeWF\""), "{err}");
    let err = c.fails(&["queue", "tWF:a", "--completed", "tWF:nope"]);
    assert!(err.contains("tWF has no step \"nope\""), "{err}");
    let out = c.run(&["run", "tWF:a", "--object", "druid:zz999zz9999"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("druid:zz999zz9999 not run: no object"),
        "{said}"
    );
    // The step that exists still runs.
    let ran = c.ok(&["run", "tWF:a", "--object", DRUID]);
    assert!(ran.contains(&format!("{DRUID} completed")), "{ran}");
}

#[tokio::test]
async fn reloading_an_older_file_says_it_is_current_again() {
    let c = Cli::new().await;
    let v2 = format!("{T_WF}  - name: c\n    prereqs: [b]\n");
    assert!(c.load("t.yaml", T_WF).starts_with("loaded tWF"));
    assert!(c.load("t.yaml", &v2).starts_with("loaded tWF"));
    assert!(c.load("t.yaml", &v2).starts_with("unchanged tWF"));
    let again = c.load("t.yaml", T_WF);
    let sha = workdo::model::template::sha256_hex(T_WF);
    assert!(
        again.starts_with("made current again tWF")
            && again.contains("first loaded at")
            && again.contains(&sha[..12]),
        "{again}"
    );
    let listed = c.json(&["templates", "show", "tWF"]);
    assert_eq!(listed["sha256"], sha.as_str(), "{listed}");
    let _ = c.path();
}

#[tokio::test]
async fn object_ids_follow_one_rule_everywhere() {
    let c = Cli::new().await;
    // A bare druid is the druid: one object, whichever spelling is used.
    c.ok(&["objects", "add", "bc123df4567", "--property", "a=1"]);
    c.ok(&["objects", "add", "druid:bc123df4567", "--property", "b=2"]);
    let view = c.json(&["show", "bc123df4567"]);
    assert_eq!(view["id"], "druid:bc123df4567");
    assert_eq!(view["properties"], serde_json::json!({"a": "1", "b": "2"}));
    // Any letters in a druid (the workflow-service routes used to refuse druid:ap111ap1111).
    c.ok(&["objects", "add", "druid:ap111ap1111"]);
    for bad in ["druid:xyz", "druid:1234", "none", "obj:", "a b:c"] {
        let err = c.fails(&["objects", "add", bad]);
        assert!(err.contains("invalid"), "{bad}: {err}");
    }
    // SQL holds new rows to the same rule, and its twin agrees with the Rust one.
    let pool = sqlx::PgPool::connect(&c.url).await.expect("connect");
    let refused = sqlx::query("insert into workdo.objects (id) values ('druid:xyz')")
        .execute(&pool)
        .await
        .expect_err("refused");
    assert!(refused.to_string().contains("invalid druid"), "{refused}");
    let refused = sqlx::query("insert into workdo.objects (id) values ('bc123df4568')")
        .execute(&pool)
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("is spelled \"druid:bc123df4568\""),
        "{refused}"
    );
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let ids = proptest::prop_oneof![
        "[a-z]{2}[0-9]{3}[a-z]{2}[0-9]{4}",
        "druid:[a-z0-9]{0,12}",
        "[a-zA-Z0-9+.-]{0,6}:[ -~]{0,8}",
        "\\PC{0,10}",
        "[a-z]{1,3}:\\PC{1,6}",
    ];
    for _ in 0..400 {
        let id = ids.new_tree(&mut runner).expect("an id").current();
        if id.contains('\0') {
            continue; // Postgres text cannot hold it; both refuse it before SQL anyway
        }
        let rust = workdo::model::object_id::normalize(&id).ok();
        let sql: Option<String> = sqlx::query_scalar("select workdo.object_id($1)")
            .bind(&id)
            .fetch_one(&pool)
            .await
            .ok();
        assert_eq!(rust, sql, "{id:?}");
        // The trigger's shortcut (a WHEN clause lets ids already in their one spelling skip the
        // function) lets in exactly the ids the function keeps as they are.
        let mut tx = pool.begin().await.expect("begin");
        let inserted =
            sqlx::query("insert into workdo.objects (id) values ($1) on conflict do nothing")
                .bind(&id)
                .execute(&mut *tx)
                .await
                .is_ok();
        tx.rollback().await.expect("rollback");
        assert_eq!(inserted, sql.as_deref() == Some(id.as_str()), "{id:?}");
    }
}

#[tokio::test]
async fn operators_list_page_delete_and_archive() {
    let c = Cli::new().await;
    c.load("t.yaml", T_WF);
    for i in 0..5 {
        c.ok(&["start", "tWF", &format!("obj:item{i}")]);
    }
    // Objects a page at a time.
    let page = c.json(&["objects", "list", "--limit", "2"]);
    let ids: Vec<&str> = page
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|o| o["id"].as_str())
        .collect();
    assert_eq!(ids, vec!["obj:item0", "obj:item1"]);
    let next = c.json(&["objects", "list", "--limit", "2", "--after", "obj:item1"]);
    assert_eq!(next[0]["id"], "obj:item2");
    assert!(
        c.ok(&["objects", "list", "--limit", "2"])
            .contains("more: --after obj:item1")
    );
    // Workflows filtered; finish two, archive them, purge none left.
    let active = c.json(&["workflows", "list", "--status", "active"]);
    assert_eq!(active.as_array().map(Vec::len), Some(5));
    for o in ["obj:item0", "obj:item1"] {
        c.ok(&["run", "tWF:a", "--object", o]);
        c.ok(&["step", "set", o, "tWF", "b", "completed"]);
    }
    let done = c.json(&["workflows", "list", "--status", "completed"]);
    assert_eq!(done.as_array().map(Vec::len), Some(2));
    let archived = c.json(&["archive", "--finished-before", "0s", "--batch", "1"]);
    assert_eq!(archived["workflows"], 2);
    assert_eq!(archived["batches"], 2);
    assert_eq!(archived["steps"], 4);
    // The tables it deleted from are vacuumed after it (decision 0037).
    assert_eq!(
        archived["vacuumed"],
        serde_json::json!(["events", "steps", "workflows"]),
        "{archived}"
    );
    let pool = sqlx::PgPool::connect(&c.url).await.expect("connect");
    let vacuumed: i64 = sqlx::query_scalar(
        "select vacuum_count from pg_stat_user_tables where relid = 'workdo.steps'::regclass",
    )
    .fetch_one(&pool)
    .await
    .expect("vacuum count");
    assert!(
        vacuumed >= 1,
        "the step table was not vacuumed after the archive"
    );
    let kept: i64 = sqlx::query_scalar(
        "select count(*) from workdo.archive where jsonb_array_length(record -> 'steps') = 2
            and jsonb_array_length(record -> 'events') > 0",
    )
    .fetch_one(&pool)
    .await
    .expect("archive");
    assert_eq!(kept, 2);
    // The archive's retention: what was archived before the cut goes (issue 47 item 19).
    sqlx::query("update workdo.archive set archived_at = now() - interval '400 days' where object_id = 'obj:item0'")
        .execute(&pool)
        .await
        .expect("age one");
    let purged = c.json(&["archive", "--purge-archived-before", "365d"]);
    assert_eq!(purged["purged_from_archive"], 1, "{purged}");
    let left: i64 = sqlx::query_scalar("select count(*) from workdo.archive")
        .fetch_one(&pool)
        .await
        .expect("archive");
    assert_eq!(left, 1);
    assert_eq!(
        c.json(&["workflows", "list", "--status", "completed"])
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    // Delete a workflow by id, then an object.
    let id = c.json(&["workflows", "list", "--object", "obj:item2"])[0]["id"]
        .as_i64()
        .expect("id");
    c.ok(&["workflows", "delete", &id.to_string()]);
    assert!(
        c.fails(&["workflows", "delete", &id.to_string()])
            .contains("there is no workflow")
    );
    c.ok(&["objects", "delete", "obj:item3"]);
    assert!(
        c.fails(&["objects", "delete", "obj:item3"])
            .contains("no object \"obj:item3\"")
    );
    assert_eq!(
        c.json(&["workflows", "list"]).as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn schedules_switch_off_and_templates_go_back_a_version() {
    let c = Cli::new().await;
    c.load("t.yaml", T_WF);
    std::fs::write(
        c.path().join("s.yaml"),
        "schedules:\n  - name: nightly\n    cron: \"0 0 3 * * *\"\n    start: tWF\n    objects: { ids: [obj:s1] }\n",
    )
    .expect("write");
    c.ok(&["schedules", "load", "s.yaml"]);
    c.ok(&["schedules", "disable", "nightly"]);
    let listed = c.json(&["schedules", "list"]);
    assert_eq!(listed[0]["enabled"], false, "{listed}");
    c.ok(&["schedules", "enable", "nightly"]);
    assert_eq!(c.json(&["schedules", "list"])[0]["enabled"], true);
    c.ok(&["schedules", "delete", "nightly"]);
    assert_eq!(
        c.json(&["schedules", "list"]).as_array().map(Vec::len),
        Some(0)
    );
    assert!(
        c.fails(&["schedules", "delete", "nightly"])
            .contains("no schedule \"nightly\"")
    );
    // Versions, and making an older one current again.
    let v2 = format!("{T_WF}  - name: c\n    prereqs: [b]\n");
    c.load("t.yaml", &v2);
    let versions = c.json(&["templates", "versions", "tWF"]);
    assert_eq!(versions.as_array().map(Vec::len), Some(2));
    assert_eq!(versions[1]["is_current"], true);
    let sha1 = workdo::model::template::sha256_hex(T_WF);
    let used = c.ok(&["templates", "use", "tWF", &sha1[..10]]);
    assert!(used.contains("is the current version"), "{used}");
    assert_eq!(
        c.json(&["templates", "show", "tWF"])["sha256"],
        sha1.as_str()
    );
    assert!(
        c.fails(&["templates", "use", "tWF", "ffff"])
            .contains("no version")
    );
    // Completions need no database.
    let bash = std::process::Command::new(WORKDO)
        .args(["completions", "bash"])
        .env_remove("DATABASE_URL")
        .env("WORKDO_DATA_DIR", c.path().join("never-created"))
        .output()
        .expect("completions");
    assert!(bash.status.success());
    assert!(String::from_utf8_lossy(&bash.stdout).contains("_workdo"));
    assert!(!c.path().join("never-created").exists());
}

#[tokio::test]
async fn up_says_what_it_runs_on_start() {
    use std::io::BufRead;
    let c = Cli::new().await;
    c.load("t.yaml", T_WF);
    let mut up = Command::new(WORKDO)
        .args(["up", "--no-api"])
        .env("DATABASE_URL", &c.url)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("up");
    let mut line = String::new();
    std::io::BufReader::new(up.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("a line");
    up.kill().expect("stop");
    up.wait().expect("reaped");
    assert!(
        line.starts_with("workdo up: database postgres://"),
        "{line}"
    );
    assert!(line.contains("1 templates; 1 workers; API off"), "{line}");
}

#[tokio::test]
async fn errors_are_json_under_json() {
    let c = Cli::new().await;
    let out = c.run(&["--json", "why", "obj:none", "nopeWF", "a"]);
    assert!(!out.status.success());
    let err: Value = serde_json::from_slice(&out.stderr).expect("a JSON error");
    assert!(
        err["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no object \"obj:none\""),
        "{err}"
    );
}

/// Errors differing only by a number (a barcode, an id) are one group on the errors page: the
/// message's shape with its numbers masked, the latest as written, every step in it.
#[tokio::test]
async fn errors_differing_by_a_number_are_one_group() {
    let t = support::db().await;
    support::load(
        &t.store,
        "e.yaml",
        "name: errWF\nsteps:\n  - { name: scan }\n",
    )
    .await;
    t.store
        .workflow_start(&workdo::store::StartRequest::new(
            "errWF",
            &["obj:e1", "obj:e2", "obj:e3", "obj:e4"],
        ))
        .await
        .expect("start");
    for (o, msg) in [
        ("obj:e1", "barcode 36105010362304 not found"),
        ("obj:e2", "barcode 99999 not found"),
        ("obj:e3", "scanner offline"),
        // Digits inside a word or a path are part of it: only numbers that stand alone are
        // masked (issue 50: "walk#/xdg").
        ("obj:e4", "no space on /walk4/xdg2"),
    ] {
        let mut set = workdo::store::SetRequest::new(o, "errWF", "scan", "error");
        set.error_message = Some(msg.into());
        t.store.step_set(&set).await.expect("error");
    }
    let groups = t.store.errors_grouped().await.expect("groups");
    assert_eq!(groups.len(), 3, "{groups:?}");
    assert!(
        groups
            .iter()
            .any(|g| g.message == "no space on /walk4/xdg2"),
        "{groups:?}"
    );
    assert_eq!(
        (
            groups[0].message.as_str(),
            groups[0].count,
            groups[0].ids.len()
        ),
        ("barcode # not found", 2, 2)
    );
    assert_eq!(groups[0].example, "barcode 99999 not found");
    assert!(groups.iter().any(|g| g.message == "scanner offline"));
}
