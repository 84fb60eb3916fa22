//! The warm pool against real processes.

use super::*;
use crate::invoke::probe_event;

/// A call of `pool` for `object`, running on its own.
fn call(
    pool: &Arc<WarmPool>,
    object: &str,
    timeout: Duration,
) -> tokio::task::JoinHandle<Result<Outcome, InvokeError>> {
    let (pool, event) = (Arc::clone(pool), probe_event(object));
    tokio::spawn(async move { pool.invoke(&event, timeout).await })
}

/// A pool of one process running `source` (a whole script, `#!` line included) with up to
/// `pipeline` calls in flight; the script is written into `dir`.
fn pool_running(dir: &std::path::Path, source: &str, pipeline: usize) -> Arc<WarmPool> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("f");
    std::fs::write(&path, source).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    Arc::new(WarmPool::new(
        vec![path.display().to_string()],
        BTreeMap::new(),
        1,
        pipeline,
    ))
}

/// The first lines of the Python test functions below.
const PY: &str = "#!/usr/bin/env python3\nimport json, sys, time\n";

/// A call queued behind a busy warm process gives up when its timeout passes, saying why,
/// rather than running after its lease has expired; the busy call is not disturbed.
#[tokio::test]
async fn waiting_for_a_warm_process_counts_against_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Answers each line after the sibling file `go` appears: the test decides when.
    let go = dir.path().join("go");
    let pool = pool_running(
        dir.path(),
        &format!(
            "#!/bin/sh\nwhile read line; do\n  while [ ! -e '{}' ]; do sleep 0.01; done\n  call=$(printf '%s' \"$line\" | sed 's/.*\"call\":\"\\([^\"]*\\)\".*/\\1/')\n  echo \"{{\\\"call\\\":\\\"$call\\\",\\\"status\\\":\\\"completed\\\"}}\"\ndone\n",
            go.display()
        ),
        1,
    );
    let busy = call(&pool, "a", Duration::from_secs(30));
    // The first call holds the only process before the second one asks.
    while pool.slots.available_permits() > 0 {
        tokio::task::yield_now().await;
    }
    let queued = pool
        .invoke(&probe_event("b"), Duration::from_millis(200))
        .await
        .expect_err("no process came free");
    assert!(
        queued.message.contains("waiting for a free process"),
        "{}",
        queued.message
    );
    std::fs::write(&go, "").expect("go");
    let answered = busy.await.expect("join").expect("the busy call completes");
    assert_eq!(answered.status, "completed");
    pool.shutdown().await;
}

/// Calls in flight on one process, answered in reverse order: each answer reaches its own
/// call, by its `call` id. The function answers only after it has read four lines, so this
/// completes only when four lines are written before the first answer comes back.
#[tokio::test]
async fn a_warm_process_takes_pipelined_calls_and_answers_each_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = [
        PY,
        "seen = []\nfor line in sys.stdin:\n    seen.append(json.loads(line))\n    if len(seen) == 4:\n        for e in reversed(seen):\n            print(json.dumps({'call': e['call'], 'status': 'completed', 'note': e['object']}), flush=True)\n        seen = []\n",
    ]
    .concat();
    let pool = pool_running(dir.path(), &source, 4);
    let calls: Vec<_> = ["a", "b", "c", "d"]
        .map(|o| (o, call(&pool, o, Duration::from_secs(30))))
        .into();
    for (o, call) in calls {
        let outcome = call
            .await
            .expect("join")
            .unwrap_or_else(|e| panic!("{o}: {e}"));
        assert_eq!(outcome.note.as_deref(), Some(o));
    }
    assert_eq!(pool.spawned(), 1, "one process took all four calls");
    pool.shutdown().await;
}

/// A call that runs past its timeout kills its process; the call written behind it on the
/// same process fails saying why, and the next call gets a new process.
#[tokio::test]
async fn a_timed_out_call_kills_its_process_and_fails_the_calls_behind_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = [
        PY,
        "for line in sys.stdin:\n    e = json.loads(line)\n    if e['object'] == 'hang':\n        time.sleep(3600)\n    print(json.dumps({'call': e['call'], 'status': 'completed'}), flush=True)\n",
    ]
    .concat();
    let pool = pool_running(dir.path(), &source, 2);
    let hang = call(&pool, "hang", Duration::from_secs(2));
    let behind = call(&pool, "b", Duration::from_secs(60));
    let hung = hang.await.expect("join").expect_err("it hangs");
    assert!(
        hung.message
            .ends_with("timed out after 2.0s and was killed"),
        "{}",
        hung.message
    );
    let behind = behind
        .await
        .expect("join")
        .expect_err("its process was killed");
    assert!(
        behind
            .message
            .ends_with("was killed: a call before this one timed out after 2.0s"),
        "{}",
        behind.message
    );
    let next = pool
        .invoke(&probe_event("c"), Duration::from_secs(30))
        .await
        .expect("a new process");
    assert_eq!(next.status, "completed");
    assert_eq!(pool.spawned(), 2);
    pool.shutdown().await;
}

/// A process that dies with calls in flight fails every one of them with its exit status.
#[tokio::test]
async fn a_crash_fails_every_call_in_flight_on_the_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = [
        PY,
        "n = 0\nfor line in sys.stdin:\n    n += 1\n    if n == 3:\n        sys.stderr.write('three is too many\\n'); sys.stderr.flush(); sys.exit(7)\n",
    ]
    .concat();
    let pool = pool_running(dir.path(), &source, 3);
    let calls = ["a", "b", "c"].map(|o| call(&pool, o, Duration::from_secs(30)));
    for call in calls {
        let e = call.await.expect("join").expect_err("the process died");
        assert!(e.message.ends_with("exited with status 7"), "{}", e.message);
        assert_eq!(e.text.as_deref().map(str::trim), Some("three is too many"));
    }
    pool.shutdown().await;
}

/// A function that answers one call twice, answers a call it was never sent, or answers
/// without a `call`: its process is replaced, the calls in flight on it fail saying why, and
/// no answer ever reaches another call.
#[tokio::test]
async fn an_answer_naming_no_call_an_unknown_call_or_one_answered_twice_replaces_the_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = [
        PY,
        "for line in sys.stdin:\n    e = json.loads(line)\n    o = e['object']\n    a = {'call': e['call'], 'status': 'completed', 'note': o}\n    if o == 'twice':\n        print(json.dumps(a), flush=True)\n    elif o == 'stranger':\n        a['call'] = 'not-a-call'\n    elif o == 'nameless':\n        del a['call']\n    print(json.dumps(a), flush=True)\n",
    ]
    .concat();
    for (object, says) in [
        ("twice", "answered call"),
        (
            "stranger",
            "answered call \"not-a-call\", which it was not sent",
        ),
        ("nameless", "answered without a \"call\" field"),
    ] {
        let pool = pool_running(dir.path(), &source, 2);
        // `twice` is answered, then its second answer kills the process: the next call
        // fails instead of taking it.
        let first = call(&pool, object, Duration::from_secs(30));
        let behind = call(&pool, "next", Duration::from_secs(30));
        let first = first.await.expect("join");
        let behind = behind.await.expect("join");
        match (object, first) {
            ("twice", Ok(o)) => assert_eq!(o.note.as_deref(), Some("twice")),
            (_, Err(e)) => assert!(e.message.contains(says), "{object}: {}", e.message),
            (_, Ok(o)) => panic!("{object}: answered {o:?}"),
        }
        if let Ok(o) = &behind {
            assert_eq!(
                o.note.as_deref(),
                Some("next"),
                "{object}: another's answer"
            );
        }
        let again = pool
            .invoke(&probe_event("again"), Duration::from_secs(30))
            .await
            .expect("a new process answers");
        assert_eq!(again.note.as_deref(), Some("again"));
        pool.shutdown().await;
    }
}

/// A garbled answer that still names its call fails that call with what is wrong with it.
#[tokio::test]
async fn a_bad_answer_naming_its_call_fails_that_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = [
        PY,
        "for line in sys.stdin:\n    e = json.loads(line)\n    print(json.dumps({'call': e['call'], 'status': 42}), flush=True)\n",
    ]
    .concat();
    let pool = pool_running(dir.path(), &source, 1);
    let e = pool
        .invoke(&probe_event("x"), Duration::from_secs(30))
        .await
        .expect_err("status 42 is not a result");
    assert!(e.message.contains("not a valid result"), "{}", e.message);
    pool.shutdown().await;
}

#[test]
fn the_call_id_goes_into_the_event_line() {
    let line = event_line(&probe_event("druid:bb123cd4567"), "c-1");
    let v: serde_json::Value = serde_json::from_slice(&line).expect("JSON");
    assert_eq!(v["call"], "c-1");
    assert_eq!(v["object"], "druid:bb123cd4567");
    assert_eq!(line.last(), Some(&b'\n'));
    assert_eq!(call_of(br#"{"call":"x","status":1}"#).as_deref(), Some("x"));
    assert_eq!(call_of(b"not json"), None);
}
