//! The Python and Ruby SDKs (`functions/python`, `functions/ruby`) under the runtime: `functions/python/examples/sdk_kinds.py` and
//! `functions/ruby/examples/sdk_kinds.rb` (one function that answers what its object's `want`
//! property asks for) run as `exec:` and as `warm:` (pool 2, pipeline 4) functions, on objects
//! wanting each kind of result, and each step ends with the status, note, message and
//! properties the SDK was asked to answer. In warm mode the pipelined calls (some sleeping
//! longer than those written after them, so answered out of order) are matched by `call`, and
//! nothing the functions print or raise costs a process.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use support::{config, db, load, start, step, wait_until};
use workdo::store::StartRequest;

/// The repository's root (the tests run in runtime/).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

#[derive(Clone, Copy, Debug)]
enum Lang {
    Python,
    Ruby,
}

impl Lang {
    fn tag(self) -> &'static str {
        match self {
            Lang::Python => "py",
            Lang::Ruby => "rb",
        }
    }

    /// The example's argv.
    fn argv(self) -> Vec<String> {
        let root = repo();
        match self {
            Lang::Python => vec![
                "python3".into(),
                root.join("functions/python/examples/sdk_kinds.py")
                    .display()
                    .to_string(),
            ],
            Lang::Ruby => vec![
                "ruby".into(),
                "-I".into(),
                root.join("functions/ruby/lib").display().to_string(),
                root.join("functions/ruby/examples/sdk_kinds.rb")
                    .display()
                    .to_string(),
            ],
        }
    }

    /// The exception class the example raises for `want: raise`.
    fn raised(self) -> &'static str {
        match self {
            Lang::Python => "ValueError",
            Lang::Ruby => "ArgumentError",
        }
    }
}

/// What each object asks the function for; `pipe-N` objects complete after sleeping, the
/// earlier ones longer, so a warm process answers them out of order.
const WANTS: [&str; 7] = [
    "completed",
    "failed",
    "failed_final",
    "defer",
    "skipped",
    "raise",
    "print",
];
const PIPED: [u64; 4] = [800, 600, 400, 200];

fn object_id(lang: Lang, mode: &str, what: &str) -> String {
    format!("obj:sdk-{}-{mode}-{what}", lang.tag())
}

/// Load `sdk{lang}{mode}WF` (one step `run`, two attempts) and start it on an object per kind
/// of result and on the pipelined ones.
async fn start_all(t: &support::TestDb, lang: Lang, mode: &str) -> String {
    let name = format!("sdk{}{mode}WF", lang.tag());
    let argv = serde_json::to_string(&lang.argv()).expect("argv as a YAML flow list");
    let function = match mode {
        "exec" => format!("{{ exec: {argv}, timeout: 30s, concurrency: 4 }}"),
        _ => format!("{{ warm: {argv}, pool: 2, pipeline: 4, concurrency: 8, timeout: 30s }}"),
    };
    load(
        &t.store,
        "sdk.yaml",
        &format!(
            "name: {name}\nsteps:\n  - name: run\n    error-limit: 2\n    function: {function}\n"
        ),
    )
    .await;
    let mut ids = Vec::new();
    for want in WANTS {
        let id = object_id(lang, mode, want);
        let props: BTreeMap<String, Value> = [("want".to_string(), json!(want))].into();
        t.store
            .object_put(&id, &props, &BTreeMap::new(), "test")
            .await
            .expect("object");
        ids.push(id);
    }
    for (i, ms) in PIPED.iter().enumerate() {
        let id = object_id(lang, mode, &format!("pipe-{i}"));
        let props: BTreeMap<String, Value> = [
            ("want".to_string(), json!("completed")),
            ("sleep_ms".to_string(), json!(ms)),
        ]
        .into();
        t.store
            .object_put(&id, &props, &BTreeMap::new(), "test")
            .await
            .expect("object");
        ids.push(id);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new(&name, &refs))
        .await
        .expect("start");
    name
}

async fn answered_for(t: &support::TestDb, object: &str) -> (Option<Value>, Option<Value>) {
    let props: Value = sqlx::query_scalar("select properties from workdo.objects where id = $1")
        .bind(object)
        .fetch_one(t.pool())
        .await
        .expect("object properties");
    (
        props.get("answered_for").cloned(),
        props.get("attempt").cloned(),
    )
}

/// Every step of `lang`'s example, exec and warm, ends as its object asked.
async fn every_kind_of_result(lang: Lang) {
    let t = db().await;
    for mode in ["exec", "warm"] {
        start_all(&t, lang, mode).await;
    }
    let rt = start(&t.store, config()).await;
    // Finished, failed for good, or deferred an hour: nothing left to run.
    wait_until(
        t.pool(),
        "select bool_and(status in ('completed', 'skipped', 'error', 'scheduled')) from workdo.steps",
        120,
    )
    .await;
    rt.stop().await;

    for mode in ["exec", "warm"] {
        let id = |what: &str| object_id(lang, mode, what);
        let ctx = format!("{lang:?} {mode}");

        let s = step(t.pool(), &id("completed"), "run").await;
        assert_eq!(s.status, "completed", "{ctx}");
        assert_eq!(
            s.note.as_deref(),
            Some(format!("answered completed for {}", id("completed")).as_str()),
            "{ctx}"
        );
        assert_eq!(
            answered_for(&t, &id("completed")).await,
            (Some(json!(id("completed"))), Some(json!(1))),
            "{ctx}: the result's properties were merged into the object"
        );

        // Retryable: tried twice (error-limit 2), the message of the last attempt kept.
        let s = step(t.pool(), &id("failed"), "run").await;
        assert_eq!((s.status.as_str(), s.attempts), ("error", 2), "{ctx}");
        assert_eq!(
            s.error_message.as_deref(),
            Some("failed as asked on attempt 2"),
            "{ctx}"
        );

        // retry=False: straight to error after one attempt.
        let s = step(t.pool(), &id("failed_final"), "run").await;
        assert_eq!((s.status.as_str(), s.attempts), ("error", 1), "{ctx}");
        assert_eq!(
            s.error_message.as_deref(),
            Some("failed for good as asked"),
            "{ctx}"
        );

        // Deferred an hour, its attempt given back.
        let s = step(t.pool(), &id("defer"), "run").await;
        assert_eq!(s.status, "scheduled", "{ctx}");
        assert_eq!(s.note.as_deref(), Some("not ready, as asked"), "{ctx}");
        assert_eq!(s.attempts, 0, "{ctx}: a defer gives its attempt back");
        let ahead = (s.run_at - chrono::Utc::now()).num_seconds();
        assert!((3000..=3600).contains(&ahead), "{ctx}: deferred {ahead} s");

        let s = step(t.pool(), &id("skipped"), "run").await;
        assert_eq!(s.status, "skipped", "{ctx}");
        assert_eq!(s.note.as_deref(), Some("skipped as asked"), "{ctx}");

        // An exception: an error with the exception's type, message and traceback; retried.
        let s = step(t.pool(), &id("raise"), "run").await;
        assert_eq!((s.status.as_str(), s.attempts), ("error", 2), "{ctx}");
        let m = s.error_message.clone().unwrap_or_default();
        assert!(
            m.starts_with(&format!(
                "{}: asked to raise for {}",
                lang.raised(),
                id("raise")
            )),
            "{ctx}: {m}"
        );
        assert!(
            m.contains("boom"),
            "{ctx}: the traceback names the function: {m}"
        );
        assert!(
            s.error_text.as_deref().is_some_and(|t| t.contains("boom")),
            "{ctx}: {:?}",
            s.error_text
        );

        // What the function printed went to stderr, not into the protocol.
        let s = step(t.pool(), &id("print"), "run").await;
        assert_eq!(s.status, "completed", "{ctx}: {:?}", s.error_message);
        assert_eq!(
            answered_for(&t, &id("print")).await.0,
            Some(json!(id("print"))),
            "{ctx}"
        );

        // The pipelined ones each completed with their own answer.
        for i in 0..PIPED.len() {
            let pid = id(&format!("pipe-{i}"));
            let s = step(t.pool(), &pid, "run").await;
            assert_eq!(s.status, "completed", "{ctx} {pid}: {:?}", s.error_message);
            assert_eq!(s.attempts, 1, "{ctx} {pid}: completed at the first attempt");
            assert_eq!(
                s.note.as_deref(),
                Some(format!("answered completed for {pid}").as_str()),
                "{ctx}"
            );
            assert_eq!(answered_for(&t, &pid).await.0, Some(json!(pid)), "{ctx}");
        }
    }

    // No call failed for the protocol's sake: no process was killed, crashed or answered
    // garbage (every failure is one the objects asked for).
    let broken: Vec<(String, Option<String>)> = sqlx::query_as(
        "select object_id, detail->>'message' from workdo.events
          where kind like 'failed%'
            and (detail->>'message' like '%was killed%' or detail->>'message' like '%exited with status%'
                 or detail->>'message' like '%not a valid result%' or detail->>'message' like '%crashed%'
                 or detail->>'message' like '%printed%')",
    )
    .fetch_all(t.pool())
    .await
    .expect("events");
    assert!(broken.is_empty(), "protocol failures: {broken:?}");
}

#[tokio::test]
async fn the_python_sdk_answers_every_kind_of_result_exec_and_warm() {
    every_kind_of_result(Lang::Python).await;
}

#[tokio::test]
async fn the_ruby_sdk_answers_every_kind_of_result_exec_and_warm() {
    every_kind_of_result(Lang::Ruby).await;
}

/// A deferred step is claimed again when its time comes, and its next answer counts: a step
/// deferring half a second while its object is not ready completes, once it is, on the same
/// attempt (each defer gives its attempt back).
#[tokio::test]
async fn a_deferred_sdk_step_runs_again_when_due() {
    let t = db().await;
    let lang = Lang::Python;
    let argv = serde_json::to_string(&lang.argv()).expect("argv");
    load(
        &t.store,
        "d.yaml",
        &format!("name: sdkDeferWF\nsteps:\n  - name: run\n    function: {{ warm: {argv}, pool: 1, pipeline: 4 }}\n"),
    )
    .await;
    let id = "obj:sdk-defer-again";
    let props: BTreeMap<String, Value> = [
        ("want".into(), json!("defer")),
        ("defer_seconds".into(), json!(0.5)),
    ]
    .into();
    t.store
        .object_put(id, &props, &BTreeMap::new(), "test")
        .await
        .expect("object");
    t.store
        .workflow_start(&StartRequest::new("sdkDeferWF", &[id]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'scheduled') from workdo.steps",
        30,
    )
    .await;
    let props: BTreeMap<String, Value> = [("want".into(), json!("completed"))].into();
    t.store
        .object_put(id, &props, &BTreeMap::new(), "test")
        .await
        .expect("object");
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        30,
    )
    .await;
    rt.stop().await;
    let s = step(t.pool(), id, "run").await;
    assert_eq!(s.attempts, 1, "the defer gave its attempt back");
    assert_eq!(
        answered_for(&t, id).await,
        (Some(json!(id)), Some(json!(1)))
    );
}

/// The SDKs' own suites, through cargo: the Python package's tests (real exec and warm
/// processes, and an offline install into a fresh venv), the Ruby gem's minitest suite, and
/// `gem build`. Nothing is fetched: both are standard library only.
#[test]
fn the_sdks_own_tests_pass_and_the_gem_builds() {
    let root = repo();
    let run = |what: &str, cmd: &mut std::process::Command| {
        let out = cmd.output().unwrap_or_else(|e| {
            panic!("{what}: cannot run ({e}); .ci/run installs python3 and ruby")
        });
        assert!(
            out.status.success(),
            "{what} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let py = run(
        "the Python SDK's tests",
        std::process::Command::new("python3")
            .args(["-m", "unittest", "discover", "-s", "functions/python/tests"])
            .current_dir(&root),
    );
    assert!(py.contains("OK"), "{py}");
    run(
        "the Ruby SDK's tests",
        std::process::Command::new("ruby")
            .args([
                "-I",
                "functions/ruby/lib",
                "functions/ruby/test/test_function.rb",
            ])
            .current_dir(&root),
    );
    let out = tempfile::tempdir().expect("tempdir");
    let gemspec = root.join("functions/ruby/workdo-function.gemspec");
    run(
        "gem build",
        std::process::Command::new("gem")
            .arg("build")
            .arg(&gemspec)
            .arg("--output")
            .arg(out.path().join("workdo-function.gem"))
            .current_dir(root.join("functions/ruby")),
    );
    assert!(out.path().join("workdo-function.gem").is_file());
}
