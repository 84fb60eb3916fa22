//! Step functions and workers against a real Postgres and real processes.

mod support;

use sqlx::PgPool;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use support::{TestDb, config, db, event_kinds, load, start, wait_until};
use workdo::runtime;
use workdo::store::{StartRequest, StepFilter};

/// Write an executable script into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    support::function_script(dir, name, body)
}

/// An exec function that completes every step.
fn completes(dir: &Path) -> String {
    script(
        dir,
        "ok.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\"}'\n",
    )
}

async fn step(pool: &PgPool, object: &str, name: &str) -> workdo::store::StepRow {
    sqlx::query_as("select * from workdo.steps where object_id = $1 and name = $2 and active")
        .bind(object)
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("step row")
}

const HTTP_SERVER: &str = r#"
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"status": "completed", "note": "http saw " + event["object"] + " attempt " + str(event["attempt"])}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A Python HTTP function on a free loopback port; killed when dropped.
async fn http_function(dir: &Path) -> (tokio::process::Child, u16) {
    use tokio::io::AsyncBufReadExt;
    let path = dir.join("http_fn.py");
    std::fs::write(&path, HTTP_SERVER).expect("write server");
    let mut child = tokio::process::Command::new("python3")
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .expect("port line");
    (child, line.trim().parse().expect("port number"))
}

#[tokio::test]
async fn exec_warm_and_http_functions_run_a_workflow_end_to_end() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("event.json");
    let exec = script(
        dir.path(),
        "exec.sh",
        &format!(
            "#!/bin/sh\ncat > '{}'\necho '{{\"status\":\"completed\",\"note\":\"exec ran\",\"context\":{{\"exec\":true}}}}'\n",
            seen.display()
        ),
    );
    let warm = script(
        dir.path(),
        "warm.py",
        "#!/usr/bin/env python3\nimport json, os, sys\nassert os.environ['WORKDO_MODE'] == 'warm'\nfor line in sys.stdin:\n    e = json.loads(line)\n    print(json.dumps({'call': e['call'], 'status': 'completed', 'note': 'warm saw context ' + json.dumps(e['context'], sort_keys=True)}), flush=True)\n",
    );
    let (_server, port) = http_function(dir.path()).await;
    let yaml = format!(
        "name: kindsWF\nsteps:\n  - name: a\n    function: {{ exec: {exec}, timeout: 10s }}\n  - name: b\n    prereqs: [a]\n    function: {{ warm: {warm}, timeout: 10s }}\n  - name: c\n    prereqs: [b]\n    function: {{ http: 'http://127.0.0.1:{port}/fn', timeout: 10s }}\n"
    );
    load(&t.store, "kinds.yaml", &yaml).await;
    let mut props = std::collections::BTreeMap::new();
    props.insert("title".to_string(), Value::from("Walden"));
    t.store
        .object_put("druid:kk111mm2222", &props, &Default::default(), "test")
        .await
        .expect("object");
    let mut req = StartRequest::new("kindsWF", &["druid:kk111mm2222"]);
    req.context = serde_json::json!({"batch": 7});
    t.store.workflow_start(&req).await.expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.workflows",
        30,
    )
    .await;
    rt.stop().await;

    let event: Value = serde_json::from_str(&std::fs::read_to_string(&seen).expect("event file"))
        .expect("the exec function got JSON");
    assert_eq!(event["protocol"], "workdo/1");
    assert_eq!(event["object"], "druid:kk111mm2222");
    assert_eq!(
        (event["template"].as_str(), event["step"].as_str()),
        (Some("kindsWF"), Some("a"))
    );
    assert_eq!(event["attempt"], 1);
    assert_eq!(event["properties"]["title"], "Walden");
    assert_eq!(event["context"]["batch"], 7);
    assert!(event["deadline"].as_str().is_some_and(|d| d.len() >= 20));
    assert_eq!(
        step(t.pool(), "druid:kk111mm2222", "a")
            .await
            .note
            .as_deref(),
        Some("exec ran")
    );
    // The exec result's context update reached the warm function's event.
    assert_eq!(
        step(t.pool(), "druid:kk111mm2222", "b")
            .await
            .note
            .as_deref(),
        Some(r#"warm saw context {"batch": 7, "exec": true}"#)
    );
    assert_eq!(
        step(t.pool(), "druid:kk111mm2222", "c")
            .await
            .note
            .as_deref(),
        Some("http saw druid:kk111mm2222 attempt 1")
    );
}

#[tokio::test]
async fn failures_say_which_and_keep_stderr() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "bad.sh",
        "#!/bin/sh\nevent=$(cat)\ncase \"$event\" in\n  *'\"mode\":\"timeout\"'*) sleep 10 ;;\n  *'\"mode\":\"crash\"'*) kill -9 $$ ;;\n  *'\"mode\":\"garbage\"'*) echo 'hello, not JSON' ;;\n  *'\"mode\":\"exit\"'*) echo 'oops: disk full' >&2; exit 3 ;;\nesac\n",
    );
    load(
        &t.store,
        "bad.yaml",
        &format!("name: badWF\nsteps:\n  - name: run\n    error-limit: 1\n    function: {{ exec: {f}, timeout: 500ms, concurrency: 5 }}\n"),
    )
    .await;
    for mode in ["timeout", "crash", "garbage", "exit"] {
        let mut props = std::collections::BTreeMap::new();
        props.insert("mode".to_string(), Value::from(mode));
        let id = format!("obj:{mode}");
        t.store
            .object_put(&id, &props, &Default::default(), "test")
            .await
            .expect("object");
        t.store
            .workflow_start(&StartRequest::new("badWF", &[&id]))
            .await
            .expect("start");
    }
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) = 4 from workdo.steps where status = 'error'",
        30,
    )
    .await;
    rt.stop().await;
    let msg = |s: workdo::store::StepRow| {
        (
            s.error_message.unwrap_or_default(),
            s.error_text.unwrap_or_default(),
        )
    };
    let (m, _) = msg(step(t.pool(), "obj:timeout", "run").await);
    assert!(m.ends_with("timed out after 0.5s and was killed"), "{m}");
    let (m, _) = msg(step(t.pool(), "obj:crash", "run").await);
    assert!(m.ends_with("crashed (killed by signal 9)"), "{m}");
    let (m, _) = msg(step(t.pool(), "obj:garbage", "run").await);
    assert!(
        m.contains("printed output that is not a valid result"),
        "{m}"
    );
    assert!(m.contains("hello, not JSON"), "{m}");
    let (m, text) = msg(step(t.pool(), "obj:exit", "run").await);
    assert!(m.ends_with("exited with status 3"), "{m}");
    assert_eq!(text.trim(), "oops: disk full");
}

#[tokio::test]
async fn retries_back_off_up_to_the_attempt_limit_and_retry_puts_it_back() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "fail.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"error\",\"message\":\"catalogue down\",\"text\":\"trace\"}'\n",
    );
    load(
        &t.store,
        "r.yaml",
        &format!("name: retryWF\nsteps:\n  - name: run\n    error-limit: 3\n    function: {{ exec: {f} }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("retryWF", &["obj:r"]))
        .await
        .expect("start");
    let mut cfg = config();
    cfg.backoff.base = Duration::from_millis(200);
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'error') from workdo.steps",
        30,
    )
    .await;
    let s = step(t.pool(), "obj:r", "run").await;
    assert_eq!((s.attempts, s.max_attempts), (3, 3));
    assert_eq!(s.error_message.as_deref(), Some("catalogue down"));
    assert_eq!(
        event_kinds(t.pool(), "obj:r", "run").await,
        vec!["failed_retrying", "due", "failed_retrying", "due", "failed"]
    );
    // Each retry waited at least its back-off: 200 ms, then 400 ms (no jitter here). Event times
    // are their transactions' start times, so the check uses the due time each failure recorded
    // (`run_at`) and orderings that hold exactly: the first failure was decided after the
    // workflow started, the second after the first became due again.
    let retries: Vec<(f64, f64)> = sqlx::query_as(
        "select extract(epoch from (f.detail ->> 'run_at')::timestamptz)::float8,
                extract(epoch from d.at)::float8
           from workdo.events f
           join lateral (select at from workdo.events d where d.kind = 'due' and d.id > f.id order by d.id limit 1) d on true
          where f.kind = 'failed_retrying' order by f.id",
    )
    .fetch_all(t.pool())
    .await
    .expect("retries");
    let begun: f64 = sqlx::query_scalar(
        "select extract(epoch from min(at))::float8 from workdo.events where object_id = 'obj:r'",
    )
    .fetch_one(t.pool())
    .await
    .expect("start time");
    assert_eq!(retries.len(), 2);
    let [(due0, promoted0), (due1, promoted1)] = [retries[0], retries[1]];
    assert!(due0 - begun >= 0.2, "first back-off {} s", due0 - begun);
    assert!(
        due1 - promoted0 >= 0.4,
        "second back-off {} s",
        due1 - promoted0
    );
    assert!(
        promoted0 >= due0 && promoted1 >= due1,
        "promoted before due: {retries:?}"
    );
    // `workdo retry` puts it back with fresh attempts; it fails again, and stops again.
    let n = t
        .store
        .steps_retry(&StepFilter::default(), "test")
        .await
        .expect("retry");
    assert_eq!(n, 1);
    wait_until(
        t.pool(),
        "select count(*) = 2 from workdo.events where kind = 'failed'",
        30,
    )
    .await;
    rt.stop().await;
    assert_eq!(step(t.pool(), "obj:r", "run").await.attempts, 3);
}

#[tokio::test]
async fn defer_reschedules_without_using_an_attempt() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("asked");
    let f = script(
        dir.path(),
        "defer.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nif [ -e '{m}' ]; then echo '{{\"status\":\"completed\"}}'; else touch '{m}'; echo '{{\"status\":\"defer\",\"seconds\":0.3,\"note\":\"scan not ready yet\"}}'; fi\n",
            m = marker.display()
        ),
    );
    load(
        &t.store,
        "d.yaml",
        &format!("name: deferWF\nsteps:\n  - name: run\n    function: {{ exec: {f} }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("deferWF", &["obj:d"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        30,
    )
    .await;
    rt.stop().await;
    assert_eq!(
        event_kinds(t.pool(), "obj:d", "run").await,
        vec!["deferred", "due", "completed"]
    );
    assert_eq!(
        step(t.pool(), "obj:d", "run").await.attempts,
        1,
        "a defer gives its attempt back"
    );
    let waited: f64 = sqlx::query_scalar(
        "select extract(epoch from max(at) filter (where kind = 'due') - max(at) filter (where kind = 'deferred'))::float8 from workdo.events",
    )
    .fetch_one(t.pool())
    .await
    .expect("gap");
    assert!(waited >= 0.3, "claimed before the deferred time: {waited}");
}

#[tokio::test]
async fn a_result_updates_the_object_and_starts_another_workflow() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "chain.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\",\"lifecycle\":\"described\",\"object\":{\"properties\":{\"pages\":12,\"old\":null},\"documents\":{\"descMetadata\":\"<mods/>\"}},\"context\":{\"k\":\"v\"},\"start\":[{\"template\":\"nextWF\",\"context\":{\"from\":\"firstWF\"}}]}'\n",
    );
    load(
        &t.store,
        "first.yaml",
        &format!("name: firstWF\nsteps:\n  - name: go\n    function: {{ exec: {f} }}\n"),
    )
    .await;
    load(
        &t.store,
        "next.yaml",
        "name: nextWF\nsteps:\n  - name: human\n",
    )
    .await;
    let mut props = std::collections::BTreeMap::new();
    props.insert("old".to_string(), Value::from(1));
    t.store
        .object_put("obj:c", &props, &Default::default(), "test")
        .await
        .expect("object");
    t.store
        .workflow_start(&StartRequest::new("firstWF", &["obj:c"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) = 1 from workdo.workflows where template = 'nextWF'",
        30,
    )
    .await;
    rt.stop().await;
    let view = t.store.object_view("obj:c", 50).await.expect("view");
    assert_eq!(
        view.properties,
        serde_json::json!({"pages": 12}),
        "merged, null removed"
    );
    assert_eq!(view.documents, vec!["descMetadata"]);
    let next = view
        .workflows
        .iter()
        .find(|w| w.workflow.template == "nextWF")
        .expect("nextWF");
    assert_eq!(
        next.workflow.context,
        serde_json::json!({"from": "firstWF"})
    );
    assert_eq!(
        next.steps[0].status, "ready",
        "a human step waits in the queue"
    );
    let first = view
        .workflows
        .iter()
        .find(|w| w.workflow.template == "firstWF")
        .expect("firstWF");
    assert_eq!(first.workflow.context["k"], "v");
    assert!(view.milestones.iter().any(|m| m.name == "described"));
}

#[tokio::test]
async fn warm_pool_replaces_a_process_that_dies() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "warm.py",
        "#!/usr/bin/env python3\nimport json, os, sys\nfor line in sys.stdin:\n    e = json.loads(line)\n    if e['properties'].get('die'):\n        sys.stderr.write('dying on purpose\\n'); sys.stderr.flush(); os._exit(7)\n    print(json.dumps({'call': e['call'], 'status': 'completed', 'note': str(os.getpid())}), flush=True)\n",
    );
    load(
        &t.store,
        "w.yaml",
        &format!("name: warmWF\nsteps:\n  - name: run\n    error-limit: 1\n    function: {{ warm: {f}, pool: 1, concurrency: 1 }}\n"),
    )
    .await;
    for (id, die, priority) in [("obj:1", false, 3), ("obj:2", true, 2), ("obj:3", false, 1)] {
        let mut props = std::collections::BTreeMap::new();
        props.insert("die".to_string(), Value::from(die));
        t.store
            .object_put(id, &props, &Default::default(), "test")
            .await
            .expect("object");
        let mut req = StartRequest::new("warmWF", &[id]);
        req.priority = priority;
        t.store.workflow_start(&req).await.expect("start");
    }
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) filter (where status in ('completed', 'error')) = 3 from workdo.steps",
        30,
    )
    .await;
    rt.stop().await;
    let died = step(t.pool(), "obj:2", "run").await;
    assert_eq!(died.status, "error");
    assert!(
        died.error_message
            .unwrap_or_default()
            .ends_with("exited with status 7")
    );
    assert_eq!(
        died.error_text.unwrap_or_default().trim(),
        "dying on purpose"
    );
    let before = step(t.pool(), "obj:1", "run").await;
    let after = step(t.pool(), "obj:3", "run").await;
    assert_eq!(
        (before.status.as_str(), after.status.as_str()),
        ("completed", "completed")
    );
    assert_ne!(
        before.note, after.note,
        "a new process answered after the crash"
    );
}

#[tokio::test]
async fn human_steps_wait_for_a_person() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = completes(dir.path());
    load(
        &t.store,
        "h.yaml",
        &format!(
            "name: humanWF\nsteps:\n  - name: approve\n  - name: side\n    function: {{ exec: {f} }}\n  - name: after\n    prereqs: [approve, side]\n    function: {{ exec: {f} }}\n"
        ),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("humanWF", &["obj:h"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    // The workers have run (side is done), and nothing claimed the human step.
    wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where name = 'side'",
        30,
    )
    .await;
    let approve = step(t.pool(), "obj:h", "approve").await;
    assert_eq!((approve.status.as_str(), approve.attempts), ("ready", 0));
    assert_eq!(step(t.pool(), "obj:h", "after").await.status, "waiting");
    t.store
        .step_set(&workdo::store::SetRequest::new(
            "obj:h",
            "humanWF",
            "approve",
            "completed",
        ))
        .await
        .expect("a person approves");
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        30,
    )
    .await;
    rt.stop().await;
}

fn workdo_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_workdo"))
}

#[tokio::test]
async fn kill_9_mid_flight_then_restart_completes_every_step_exactly_once() {
    let t: TestDb = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let counter = dir.path().join("invocations");
    let f = script(
        dir.path(),
        "slow.sh",
        &format!(
            "#!/bin/sh\nevent=$(cat)\nid=$(echo \"$event\" | sed 's/.*\"step_id\":\\([0-9]*\\).*/\\1/')\necho \"$id\" >> '{}'\nsleep 0.2\necho '{{\"status\":\"completed\",\"object\":{{\"properties\":{{\"done\":true}}}}}}'\n",
            counter.display()
        ),
    );
    load(
        &t.store,
        "k.yaml",
        &format!("name: killWF\nsteps:\n  - name: work\n    function: {{ exec: {f}, timeout: 2s, concurrency: 4 }}\n"),
    )
    .await;
    let objects: Vec<String> = (0..40).map(|i| format!("obj:{i:02}")).collect();
    let refs: Vec<&str> = objects.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("killWF", &refs))
        .await
        .expect("start");
    let up = |url: &str| {
        std::process::Command::new(workdo_bin())
            .args([
                "up",
                "--lease-margin",
                "500ms",
                "--poll-interval",
                "100ms",
                "--grace",
                "10s",
            ])
            .env("DATABASE_URL", url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start workdo up")
    };
    let mut first = up(&t.url);
    // Kill it while calls are in flight: some steps done, some held under its leases.
    wait_until(
        t.pool(),
        "select count(*) filter (where status = 'completed') >= 8 and count(*) filter (where status = 'started') > 0 from workdo.steps",
        60,
    )
    .await;
    first.kill().expect("kill -9");
    first.wait().expect("reap");
    let held: i64 =
        sqlx::query_scalar("select count(*) from workdo.steps where status = 'started'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert!(held > 0, "the killed runtime held leases");
    let mut second = up(&t.url);
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        90,
    )
    .await;
    // SIGTERM: a graceful stop, exit status 0.
    let pid = second.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    let status = second.wait().expect("wait");
    assert!(status.success(), "graceful shutdown exits 0: {status}");

    // Exactly once: one completion event per step, 40 in all.
    let (events, distinct): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct step || object_id) from workdo.events where kind = 'completed'",
    )
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert_eq!((events, distinct), (40, 40));
    // Every step ran at least once; the ones cut off by the kill ran again.
    let calls = std::fs::read_to_string(&counter).expect("counter file");
    let ids: Vec<i64> = calls
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let distinct_ids: std::collections::HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct_ids.len(), 40);
    assert!(ids.len() >= 40);
    let expired: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'lease_expired'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(
        expired, held,
        "every step held by the dead process came back through its lease"
    );
}

#[tokio::test]
async fn notify_wakes_dependants_without_polling() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = completes(dir.path());
    load(
        &t.store,
        "n.yaml",
        &format!(
            "name: chainWF\nsteps:\n  - name: a\n    function: {{ exec: {f} }}\n  - name: b\n    prereqs: [a]\n    function: {{ exec: {f} }}\n  - name: c\n    prereqs: [b]\n    function: {{ exec: {f} }}\n"
        ),
    )
    .await;
    let mut cfg = config();
    // Polling effectively off: only NOTIFY can move the chain along within the deadline.
    cfg.poll_interval = Duration::from_secs(3600);
    t.store
        .workflow_start(&StartRequest::new("chainWF", &["obj:n"]))
        .await
        .expect("start");
    // b and c become ready while the workers wait; only a notification can wake them in time.
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        20,
    )
    .await;
    rt.stop().await;
}

#[tokio::test]
async fn shutdown_releases_calls_that_outlive_the_grace_period() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "slow.sh",
        "#!/bin/sh\ncat >/dev/null\nsleep 30\necho '{\"status\":\"completed\"}'\n",
    );
    load(
        &t.store,
        "s.yaml",
        &format!("name: slowWF\nsteps:\n  - name: run\n    function: {{ exec: {f}, timeout: 60s, concurrency: 3 }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("slowWF", &["obj:1", "obj:2", "obj:3"]))
        .await
        .expect("start");
    let mut cfg = config();
    cfg.grace = Duration::from_millis(300);
    let rt = start(&t.store, cfg).await;
    wait_until(
        t.pool(),
        "select count(*) = 3 from workdo.steps where status = 'started'",
        20,
    )
    .await;
    rt.stop().await;
    let rows: Vec<(String, i32)> =
        sqlx::query_as("select status, attempts from workdo.steps order by id")
            .fetch_all(t.pool())
            .await
            .expect("rows");
    assert_eq!(
        rows,
        vec![("ready".to_string(), 0); 3],
        "back in the queue, attempt given back"
    );
    let released: i64 =
        sqlx::query_scalar("select count(*) from workdo.events where kind = 'released'")
            .fetch_one(t.pool())
            .await
            .expect("count");
    assert_eq!(released, 3);
}

#[tokio::test]
async fn worker_bindings_name_what_is_wrong() {
    let t = db().await;
    load(
        &t.store,
        "b.yaml",
        "name: bindWF\nsteps:\n  - name: auto\n    function: { builtin: noop }\n  - name: human\n  - name: logged\n    skip-queue: true\n    function: { builtin: noop }\n",
    )
    .await;
    let all = runtime::bindings(&t.store, &[]).await.expect("bindings");
    let keys: Vec<String> = all.iter().map(|b| b.key()).collect();
    assert_eq!(
        keys,
        vec!["bindWF:auto"],
        "human and skip-queue steps get no worker"
    );
    let err = runtime::bindings(&t.store, &["bindWF:human".to_string()])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "bindWF:human has no function to run (a human or skip-queue step)"
    );
    let err = runtime::bindings(&t.store, &["bindWF:nope".to_string()])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("has no step \"nope\""), "{err}");
    let err = runtime::bindings(&t.store, &["noWF:x".to_string()])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("unknown template \"noWF\""),
        "{err}"
    );
}

/// A function is never called without the documents it asked for: while they cannot be read,
/// claimed steps go back to the queue with their attempt, and run once they can.
#[tokio::test]
async fn steps_whose_inputs_cannot_be_read_are_given_back_not_run() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "needs-mods.sh",
        "#!/bin/sh\ninput=$(cat)\ncase \"$input\" in\n  *'<mods/>'*) echo '{\"status\":\"completed\",\"note\":\"saw the MODS\"}' ;;\n  *) echo '{\"status\":\"error\",\"message\":\"called without the MODS\"}' ;;\nesac\n",
    );
    load(
        &t.store,
        "docs.yaml",
        &format!(
            "name: docsWF\nsteps:\n  - name: read\n    function: {{ exec: {f}, documents: [descMetadata] }}\n"
        ),
    )
    .await;
    let mut docs = std::collections::BTreeMap::new();
    docs.insert("descMetadata".to_string(), "<mods/>".to_string());
    t.store
        .object_put("obj:d", &Default::default(), &docs, "test")
        .await
        .expect("object");
    // Documents cannot be read while their table is away.
    sqlx::query("alter table workdo.documents rename to documents_away")
        .execute(t.pool())
        .await
        .expect("rename");
    t.store
        .workflow_start(&StartRequest::new("docsWF", &["obj:d"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select count(*) >= 2 from workdo.events where object_id = 'obj:d' and kind = 'released'
            and detail ->> 'reason' like 'reading inputs failed:%'",
        30,
    )
    .await;
    sqlx::query("alter table workdo.documents_away rename to documents")
        .execute(t.pool())
        .await
        .expect("rename back");
    wait_until(
        t.pool(),
        "select count(*) = 1 from workdo.steps where object_id = 'obj:d' and status = 'completed'",
        30,
    )
    .await;
    rt.stop().await;
    let s = step(t.pool(), "obj:d", "read").await;
    assert_eq!(s.note.as_deref(), Some("saw the MODS"));
    assert_eq!(s.attempts, 1, "every release gave its attempt back");
    let k = event_kinds(t.pool(), "obj:d", "read").await;
    assert!(
        !k.iter().any(|k| k.starts_with("failed")),
        "the function never ran without its input: {k:?}"
    );
    assert_eq!(k.last().map(String::as_str), Some("completed"), "{k:?}");
}

/// A result the database refuses fails its own step with the reason; the other results of its
/// batch commit, later work flows, and the runtime still stops when told to.
#[tokio::test]
async fn a_result_the_database_refuses_fails_only_its_own_step() {
    let t = db().await;
    // Stand-in for any value Postgres refuses (a NUL in text, a value over a limit): a check
    // this test adds.
    sqlx::query("alter table workdo.steps add constraint test_refuses_poison check (note is distinct from 'poison')")
        .execute(t.pool())
        .await
        .expect("add the check");
    let dir = tempfile::tempdir().expect("tempdir");
    let f = script(
        dir.path(),
        "poison.sh",
        "#!/bin/sh\nx=$(cat)\ncase \"$x\" in *obj:bad*) echo '{\"status\":\"completed\",\"note\":\"poison\"}';; *) echo '{\"status\":\"completed\",\"note\":\"fine\"}';; esac\n",
    );
    load(
        &t.store,
        "poison.yaml",
        &format!(
            "name: poisonWF\nsteps:\n  - name: run\n    function: {{ exec: [{f:?}], concurrency: 8 }}\n"
        ),
    )
    .await;
    let mut ids: Vec<String> = (0..15).map(|i| format!("obj:ok{i}")).collect();
    ids.push("obj:bad".into());
    let mut req = StartRequest::new("poisonWF", &[]);
    req.objects = ids;
    t.store.workflow_start(&req).await.expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select bool_and(status in ('completed', 'error')) from workdo.steps",
        30,
    )
    .await;
    // Work after the refusal still flows.
    t.store
        .workflow_start(&StartRequest::new("poisonWF", &["obj:later"]))
        .await
        .expect("start later");
    wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where object_id = 'obj:later'",
        30,
    )
    .await;
    rt.stop().await;
    let bad = step(t.pool(), "obj:bad", "run").await;
    assert_eq!(bad.status, "error");
    let message = bad.error_message.unwrap_or_default();
    assert!(
        message.contains("could not be stored") && message.contains("test_refuses_poison"),
        "{message}"
    );
    let fine: i64 = sqlx::query_scalar(
        "select count(*) from workdo.steps where status = 'completed' and note = 'fine'",
    )
    .fetch_one(t.pool())
    .await
    .expect("count");
    assert_eq!(fine, 16);
    // The alert for the step in error was written with it.
    let alerts: i64 = sqlx::query_scalar(
        "select count(*) from workdo.alert_outbox where payload ->> 'object' = 'obj:bad'",
    )
    .fetch_one(t.pool())
    .await
    .expect("alerts");
    assert_eq!(alerts, 1);
}

/// Exec and warm functions get a clean environment: the runtime's secrets (`DATABASE_URL`,
/// `PGPASSWORD`, `WORKDO_SMTP_URL`) never reach them; `PATH` and the other documented variables
/// do, as do `--env`, `--pass-env` and the step's own `env`.
#[tokio::test]
async fn functions_never_see_the_runtimes_secrets() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = |kind: &str| dir.path().join(format!("{kind}.env"));
    let exec = script(
        dir.path(),
        "exec.sh",
        &format!(
            "#!/bin/sh\ncat >/dev/null\nenv > '{}'\necho '{{\"status\":\"completed\"}}'\n",
            dump("exec").display()
        ),
    );
    let warm = script(
        dir.path(),
        "warm.py",
        &format!(
            "#!/usr/bin/env python3\nimport json, os, sys\nfor line in sys.stdin:\n    e = json.loads(line)\n    with open('{}', 'w') as f:\n        f.write(''.join(k + '=' + v + '\\n' for k, v in os.environ.items()))\n    print(json.dumps({{'call': e['call'], 'status': 'completed'}}), flush=True)\n",
            dump("warm").display()
        ),
    );
    let yaml = format!(
        "name: envWF\nsteps:\n  - name: a\n    function: {{ exec: {exec}, env: {{ STEP_SETTING: s1 }} }}\n  - name: b\n    prereqs: [a]\n    function: {{ warm: {warm}, env: {{ STEP_SETTING: s2 }} }}\n"
    );
    let file = dir.path().join("env.yaml");
    std::fs::write(&file, yaml).expect("template");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(["templates", "load"])
        .arg(&file)
        .env("DATABASE_URL", &t.url)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("load");
    assert!(status.success());
    t.store
        .workflow_start(&StartRequest::new("envWF", &["obj:env"]))
        .await
        .expect("start");
    let mut up = std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args([
            "up",
            "--no-api",
            "--env",
            "OPERATOR_SETTING=o1",
            "--pass-env",
            "PASSED_ON",
        ])
        .env("DATABASE_URL", &t.url)
        .env("PGPASSWORD", "pg-secret")
        .env("WORKDO_SMTP_URL", "smtp://mailer:smtp-secret@127.0.0.1:1")
        .env("WORKDO_ALERT_TO", "ops@library.example.org")
        .env("PASSED_ON", "p1")
        .env("NOT_PASSED", "n1")
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("workdo up");
    wait_until(
        t.pool(),
        "select count(*) = 2 from workdo.steps where status = 'completed'",
        60,
    )
    .await;
    let _ = up.kill();
    let _ = up.wait();
    for (kind, step_setting) in [("exec", "s1"), ("warm", "s2")] {
        let text = std::fs::read_to_string(dump(kind)).expect("the function wrote its env");
        let env: std::collections::BTreeMap<&str, &str> =
            text.lines().filter_map(|l| l.split_once('=')).collect();
        for secret in [
            "DATABASE_URL",
            "PGPASSWORD",
            "WORKDO_SMTP_URL",
            "NOT_PASSED",
        ] {
            assert!(!env.contains_key(secret), "{kind} saw {secret}: {text}");
        }
        assert!(!text.contains("secret"), "{kind}: {text}");
        assert!(env.get("PATH").is_some_and(|p| !p.is_empty()), "{kind}");
        assert_eq!(env.get("PASSED_ON"), Some(&"p1"), "{kind}");
        assert_eq!(env.get("OPERATOR_SETTING"), Some(&"o1"), "{kind}");
        assert_eq!(env.get("STEP_SETTING"), Some(&step_setting), "{kind}");
        assert_eq!(env.get("WORKDO_MODE"), Some(&kind), "{kind}");
    }
}

/// Twenty objects in flight through one warm function that prints every answer twice and
/// sometimes a stale answer of an earlier call: answers are matched by `call`, so no step ever
/// completes with another object's answer; the protocol errors replace the process and fail
/// only the calls in flight on it, which are retried until each completes with its own answer.
#[tokio::test]
async fn a_warm_function_printing_extra_and_late_lines_never_answers_the_wrong_object() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let warm = script(
        dir.path(),
        "chatty.py",
        "#!/usr/bin/env python3\nimport json, random, sys\nold = []\nfor line in sys.stdin:\n    e = json.loads(line)\n    a = {'call': e['call'], 'status': 'completed', 'note': e['object'], 'object': {'properties': {'answered_for': e['object']}}}\n    print(json.dumps(a), flush=True)\n    r = random.random()\n    if r < 0.3:\n        print(json.dumps(a), flush=True)\n    elif r < 0.5 and old:\n        print(json.dumps(random.choice(old)), flush=True)\n    old.append(a)\n",
    );
    for (pool, pipeline, concurrency) in [(2, 4, 8), (1, 1, 4), (3, 2, 6)] {
        let name = format!("chatty{pool}{pipeline}WF");
        load(
            &t.store,
            "chatty.yaml",
            &format!(
                "name: {name}\nsteps:\n  - name: run\n    error-limit: 50\n    function: {{ warm: {warm}, pool: {pool}, pipeline: {pipeline}, concurrency: {concurrency}, timeout: 10s }}\n"
            ),
        )
        .await;
        let ids: Vec<String> = (0..20).map(|i| format!("obj:{name}-{i}")).collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        for id in &refs {
            t.store
                .object_put(id, &Default::default(), &Default::default(), "test")
                .await
                .expect("object");
        }
        t.store
            .workflow_start(&StartRequest::new(&name, &refs))
            .await
            .expect("start");
    }
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select bool_and(status = 'completed') from workdo.steps",
        120,
    )
    .await;
    rt.stop().await;
    let rows: Vec<(String, Option<String>, Option<Value>)> = sqlx::query_as(
        "select s.object_id, s.note, o.properties->'answered_for' from workdo.steps s join workdo.objects o on o.id = s.object_id",
    )
    .fetch_all(t.pool())
    .await
    .expect("rows");
    assert_eq!(rows.len(), 60);
    for (object, note, answered_for) in &rows {
        assert_eq!(note.as_deref(), Some(object.as_str()), "another's note");
        assert_eq!(
            answered_for.as_ref().and_then(Value::as_str),
            Some(object.as_str()),
            "another's properties"
        );
    }
    // The protocol errors happened and were said: some attempts failed naming them.
    let said: i64 = sqlx::query_scalar(
        "select count(*) from workdo.events where kind like 'failed%' and (detail->>'message' like '%twice%' or detail->>'message' like '%was not sent%' or detail->>'message' like '%was killed%')",
    )
    .fetch_one(t.pool())
    .await
    .expect("events");
    assert!(said > 0, "no answer was ever extra or late");
}

/// A template loaded while the runtime runs gets its workers without a restart (the runtime
/// hears the template's NOTIFY), and a new version whose function changed is worked by the new
/// function.
#[tokio::test]
async fn templates_loaded_while_the_runtime_runs_are_worked() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = start(&t.store, config()).await;
    load(
        &t.store,
        "live.yaml",
        "name: liveWF\nsteps:\n  - name: a\n    function: { builtin: noop }\n",
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("liveWF", &["obj:live1"]))
        .await
        .expect("start");
    wait_until(
        t.pool(),
        "select status = 'completed' from workdo.steps where object_id = 'obj:live1'",
        30,
    )
    .await;
    let v2 = script(
        dir.path(),
        "v2.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\",\"note\":\"worked by v2\"}'\n",
    );
    load(
        &t.store,
        "live.yaml",
        &format!("name: liveWF\nsteps:\n  - name: a\n    function: {{ exec: {v2} }}\n"),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("liveWF", &["obj:live2"]))
        .await
        .expect("start");
    wait_until(
        t.pool(),
        "select status = 'completed' and note = 'worked by v2' from workdo.steps where object_id = 'obj:live2'",
        30,
    )
    .await;
    rt.stop().await;
}
