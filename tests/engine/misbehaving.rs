//! Functions that misbehave in every way we know of, run by a real runtime against a real
//! Postgres: each call ends in a clear error (or completes, when the misbehaviour is harmless),
//! no process it started outlives it, and the runtime keeps working afterwards.

use crate::support;

use support::{config, db, function_script, load, start, wait_until};
use workdo::store::StartRequest;

/// The misbehaviours, as the object id's suffix each script switches on, and what the step's
/// error message must say, one of (empty: the step completes).
const CASES: &[(&str, &[&str])] = &[
    ("badjson", &["not a valid result"]),
    ("huge", &["over the limit", "over 1024 KiB"]),
    ("utf8", &["not UTF-8"]),
    ("nul", &["contains a NUL character"]),
    ("rawnul", &["not a valid result"]),
    ("silent", &["timed out"]),
    // exec: still running, so timed out; warm: its output ended.
    ("hangs", &["timed out", "closed its output"]),
    ("forks", &[]),
    ("stderr", &[]),
    ("ok", &[]),
];

/// An exec function: one process per call.
const EXEC: &str = r#"#!/bin/sh
event=$(cat)
case "$event" in
  *'"e:badjson"'*) echo 'not json {' ;;
  *'"e:huge"'*) head -c 2000000 /dev/zero | tr '\0' a ;;
  *'"e:utf8"'*) printf '{"status":"completed","note":"\377"}\n' ;;
  *'"e:nul"'*) echo '{"status":"completed","note":"a\u0000b"}' ;;
  *'"e:rawnul"'*) printf '{"status":"completed","note":"a\000b"}\n' ;;
  *'"e:silent"'*) sleep 30 ;;
  *'"e:hangs"'*) exec >&-; sleep 30 ;;
  *'"e:forks"'*) sleep 987.61 & echo '{"status":"completed"}' ;;
  *'"e:stderr"'*) head -c 50000000 /dev/zero | tr '\0' e >&2; echo ' the end' >&2; echo '{"status":"completed"}' ;;
  *) echo '{"status":"completed"}' ;;
esac
"#;

/// A warm function: one long-lived process answering a line per call.
const WARM: &str = r#"#!/usr/bin/env python3
import json, os, subprocess, sys, time
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    event = json.loads(line)
    mode = event["object"].split(":")[1]
    call = json.dumps(event["call"]).encode()
    if mode == "badjson":
        out.write(b"not json {\n")
    elif mode == "huge":
        out.write(b"a" * 2000000 + b"\n")
    elif mode == "utf8":
        out.write(b'{"call":' + call + b',"status":"completed","note":"\xff"}\n')
    elif mode == "nul":
        out.write(b'{"call":' + call + b',"status":"completed","note":"a\\u0000b"}\n')
    elif mode == "rawnul":
        out.write(b'{"call":' + call + b',"status":"completed","note":"a\x00b"}\n')
    elif mode == "silent":
        time.sleep(30)
    elif mode == "hangs":
        out.flush()
        os.close(1)
        time.sleep(30)
    elif mode == "forks":
        subprocess.Popen(["sleep", "987.62"])
        out.write(b'{"call":' + call + b',"status":"completed"}\n')
    elif mode == "stderr":
        sys.stderr.write("e" * 50000000 + " the end\n")
        sys.stderr.flush()
        out.write(b'{"call":' + call + b',"status":"completed"}\n')
    else:
        out.write(b'{"call":' + call + b',"status":"completed"}\n')
    out.flush()
"#;

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(cmd);
            }
        }
    }
    found
}

#[tokio::test]
async fn misbehaving_functions_end_in_clear_errors_and_the_runtime_keeps_working() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let exec = function_script(dir.path(), "exec.sh", EXEC);
    let warm = function_script(dir.path(), "warm.py", WARM);
    // Pipeline 1: a warm process killed for what one call did takes no other call with it.
    load(
        &t.store,
        "misbehaving.yaml",
        &format!(
            "name: execWF\nsteps:\n  - name: run\n    error-limit: 1\n    function: {{ exec: {exec}, timeout: 3s, concurrency: 10 }}\n"
        ),
    )
    .await;
    load(
        &t.store,
        "misbehaving-warm.yaml",
        &format!(
            "name: warmWF\nsteps:\n  - name: run\n    error-limit: 1\n    function: {{ warm: {warm}, timeout: 3s, pool: 4, pipeline: 1, concurrency: 10 }}\n"
        ),
    )
    .await;
    for (template, prefix) in [("execWF", "e"), ("warmWF", "w")] {
        let mut req = StartRequest::new(template, &[]);
        req.objects = CASES
            .iter()
            .map(|(mode, _)| format!("{prefix}:{mode}"))
            .collect();
        t.store.workflow_start(&req).await.expect("start");
    }
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select bool_and(status in ('completed', 'error')) from workdo.steps",
        120,
    )
    .await;

    for prefix in ["e", "w"] {
        for (mode, expected) in CASES {
            let object = format!("{prefix}:{mode}");
            let (status, message, text): (String, Option<String>, Option<String>) = sqlx::query_as(
                "select status, error_message, error_text from workdo.steps where object_id = $1",
            )
            .bind(&object)
            .fetch_one(t.pool())
            .await
            .expect("step");
            let message = message.unwrap_or_default();
            if expected.is_empty() {
                assert_eq!(status, "completed", "{object}: {message}");
            } else {
                assert_eq!(status, "error", "{object}");
                assert!(
                    expected.iter().any(|says| message.contains(says)),
                    "{object}: {message}"
                );
            }
            if *mode == "stderr" && prefix == "e" {
                // Completed: a result was read although 50 MB went to stderr first.
                assert!(text.is_none(), "{object}");
            }
        }
    }

    // The runtime still takes work, through both kinds of function.
    let mut req = StartRequest::new("execWF", &[]);
    req.objects = vec!["e:after".into()];
    t.store.workflow_start(&req).await.expect("start");
    let mut req = StartRequest::new("warmWF", &[]);
    req.objects = vec!["w:after".into()];
    t.store.workflow_start(&req).await.expect("start");
    wait_until(
        t.pool(),
        "select count(*) = 2 from workdo.steps where object_id in ('e:after', 'w:after') and status = 'completed'",
        30,
    )
    .await;
    rt.stop().await;

    // Nothing a function started outlives the runtime: the exec child is killed with its
    // call, the warm one with its process.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let scripts = dir.path().to_string_lossy().into_owned();
    loop {
        let mut left = processes_with("sleep 987.6");
        left.extend(processes_with(&scripts));
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {left:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A function that writes a great deal to stderr and fails is reported as failing at once, with
/// the head and tail of what it wrote, not as timed out.
#[tokio::test]
async fn huge_stderr_then_exit_is_an_exit_error_with_the_tail() {
    let t = db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let f = function_script(
        dir.path(),
        "loud.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'the start' >&2\nhead -c 50000000 /dev/zero | tr '\\0' e >&2\necho ' the end' >&2\nexit 1\n",
    );
    load(
        &t.store,
        "loud.yaml",
        &format!(
            "name: loudWF\nsteps:\n  - name: run\n    error-limit: 1\n    function: {{ exec: {f}, timeout: 60s }}\n"
        ),
    )
    .await;
    t.store
        .workflow_start(&StartRequest::new("loudWF", &["obj:loud"]))
        .await
        .expect("start");
    let rt = start(&t.store, config()).await;
    wait_until(
        t.pool(),
        "select status = 'error' from workdo.steps where object_id = 'obj:loud'",
        60,
    )
    .await;
    rt.stop().await;
    let (message, text): (String, String) = sqlx::query_as(
        "select error_message, error_text from workdo.steps where object_id = 'obj:loud'",
    )
    .fetch_one(t.pool())
    .await
    .expect("step");
    assert!(message.ends_with("exited with status 1"), "{message}");
    assert!(
        text.starts_with("the start"),
        "{}",
        &text[..80.min(text.len())]
    );
    assert!(
        text.trim_end().ends_with("the end"),
        "…{}",
        &text[text.len().saturating_sub(80)..]
    );
    assert!(text.len() < 64 * 1024, "{} bytes kept", text.len());
}
