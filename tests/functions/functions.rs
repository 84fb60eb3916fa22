//! Step functions and workers against a real Postgres and real processes.

use crate::support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::{config, db, event_kinds, load, start, step, wait_until};
use workdo::store::{StartRequest, StepFilter};

/// Write an executable script into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    support::function_script(dir, name, body)
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
    support::all_completed(t.pool(), 30).await;
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
    let f = support::completing_function(dir.path());
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
