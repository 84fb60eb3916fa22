//! `exec`: a process per call, the event on stdin, the result on stdout.
//!
//! Each call runs in a process group of its own. The result is read when the function exits:
//! a background child that still holds stdout open does not make the call wait (it gets a
//! short grace to let the pipes drain). Stdout is kept up to [`MAX_RESULT_BYTES`] and drained
//! past it; stderr is drained whole, its head and tail kept for the error text. When the call
//! ends — answered, failed or timed out — whatever is left of its process group is killed, so
//! no grandchild outlives it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{
    Event, Group, InvokeError, MAX_RESULT_BYTES, Outcome, STDERR_KEEP, describe_exit, parse_result,
};

/// How long the pipes may stay open after the function exited (a background child holding
/// them) before its process group is killed.
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// Read `r` to its end, keeping at most `keep` bytes; returns them and how many there were.
async fn read_capped(mut r: impl AsyncRead + Unpin, keep: usize) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut total = 0;
    let mut chunk = vec![0u8; 64 * 1024];
    while let Ok(n) = r.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        total += n;
        let room = keep.saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..n.min(room)]);
    }
    (kept, total)
}

/// Read `r` to its end, keeping its first and last `keep` bytes, with a marker of what was cut.
async fn read_head_tail(mut r: impl AsyncRead + Unpin, keep: usize) -> String {
    let mut head = Vec::new();
    let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
    let mut total = 0usize;
    let mut chunk = vec![0u8; 64 * 1024];
    while let Ok(n) = r.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        total += n;
        let mut rest = &chunk[..n];
        if head.len() < keep {
            let take = rest.len().min(keep - head.len());
            head.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        tail.extend(rest);
        let excess = tail.len().saturating_sub(keep);
        tail.drain(..excess);
    }
    let cut = total - head.len() - tail.len();
    let mut text = String::from_utf8_lossy(&head).into_owned();
    if cut > 0 {
        text.push_str(&format!("\n[… {cut} bytes of stderr cut …]\n"));
    }
    text.push_str(&String::from_utf8_lossy(
        &tail.into_iter().collect::<Vec<u8>>(),
    ));
    text
}

/// `bytes` in a file of their own, already unlinked (nothing is left behind, whatever happens
/// next), open for reading from its start.
fn event_file(bytes: &[u8]) -> std::io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::env::temp_dir().join(format!(
        ".workdo-event-{}",
        hex::encode(rand::random::<[u8; 12]>())
    ));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    f.write_all(bytes)?;
    f.rewind()?;
    Ok(f)
}

pub(super) async fn call(
    argv: &[String],
    env: &BTreeMap<String, String>,
    event: &Event,
    timeout: Duration,
) -> Result<Outcome, InvokeError> {
    let program = &argv[0];
    let mut cmd = super::command(argv, env, "exec");
    if let Some(tp) = &event.traceparent {
        cmd.env("TRACEPARENT", tp);
    }
    // The event is written whole before the function starts, into an unlinked file that is its
    // stdin: a runtime killed between the start and the write left a function reading an
    // empty event from a pipe its writer had gone from.
    let input = serde_json::to_vec(event).unwrap_or_default();
    let written = event_file(&input).map_err(|e| {
        InvokeError::new(
            format!("cannot write {program}'s event: {e}"),
            String::new(),
        )
    })?;
    cmd.stdin(std::process::Stdio::from(written));
    let mut child = super::spawn(&mut cmd)
        .await
        .map_err(|e| InvokeError::new(format!("cannot start {program}: {e}"), String::new()))?;
    let _group = Group::of(&child);
    // Drained on tasks of their own, so that waiting for the exit does not wait for the pipes
    // to close, and a function that prints a lot before reading cannot deadlock.
    let mut out = child
        .stdout
        .take()
        .map(|s| tokio::spawn(read_capped(s, MAX_RESULT_BYTES + 1)));
    let mut err = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_head_tail(s, STDERR_KEEP / 2)));
    let run = child.wait();
    let exited = tokio::time::timeout(timeout, run).await;
    // After the exit (or the timeout), the pipes get a short grace, then the group is killed,
    // which closes them.
    let stderr = finish(&mut err, &_group).await.unwrap_or_default();
    let status = match exited {
        Ok(status) => status.map_err(|e| {
            InvokeError::new(format!("cannot wait for {program}: {e}"), stderr.clone())
        })?,
        Err(_) => {
            return Err(InvokeError::new(
                format!(
                    "{program} timed out after {:.1}s and was killed",
                    timeout.as_secs_f64()
                ),
                stderr,
            ));
        }
    };
    let (stdout, size) = finish(&mut out, &_group).await.unwrap_or_default();
    if !status.success() {
        return Err(InvokeError::new(
            format!("{program} {}", describe_exit(status)),
            stderr,
        ));
    }
    if size > MAX_RESULT_BYTES {
        return Err(InvokeError::new(
            format!(
                "{program} printed a result of {size} bytes, over the limit of {MAX_RESULT_BYTES}"
            ),
            stderr,
        ));
    }
    parse_result(&stdout).map_err(|m| InvokeError::new(format!("{program} {m}"), stderr))
}

/// A reader's answer: at once if its pipe is closed, else after [`PIPE_GRACE`], killing the
/// process group that holds the pipe open first.
async fn finish<T>(task: &mut Option<tokio::task::JoinHandle<T>>, group: &Group) -> Option<T> {
    let handle = task.as_mut()?;
    let done = match tokio::time::timeout(PIPE_GRACE, &mut *handle).await {
        Ok(done) => done,
        Err(_) => {
            group.kill();
            handle.await
        }
    };
    task.take();
    done.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::invoke::probe_event;

    /// A shell function in `dir` with `body` after reading its event.
    fn function(dir: &std::path::Path, body: &str) -> Vec<String> {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("f.sh");
        std::fs::write(&path, format!("#!/bin/sh\ncat >/dev/null\n{body}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        vec![path.display().to_string()]
    }

    async fn run(
        dir: &std::path::Path,
        body: &str,
        timeout: Duration,
    ) -> Result<Outcome, InvokeError> {
        call(
            &function(dir, body),
            &BTreeMap::new(),
            &probe_event("t"),
            timeout,
        )
        .await
    }

    /// Whether process `pid` is gone (or a zombie nobody reaped yet).
    fn gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    async fn wait_gone(pidfile: &std::path::Path) {
        let pid = std::fs::read_to_string(pidfile).expect("pid file");
        let pid = pid.trim();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !gone(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "process {pid} still runs"
            );
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn huge_stderr_is_drained_and_its_head_and_tail_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = run(
            dir.path(),
            "echo first-line >&2\nhead -c 50000000 /dev/zero | tr '\\0' x >&2\necho last-line >&2\nexit 1",
            Duration::from_secs(60),
        )
        .await
        .expect_err("exit 1");
        assert!(
            err.message.contains("exited with status 1"),
            "{}",
            err.message
        );
        let text = err.text.unwrap_or_default();
        assert!(text.starts_with("first-line"), "{}", &text[..40]);
        assert!(text.trim_end().ends_with("last-line"));
        assert!(text.contains("bytes of stderr cut"));
    }

    /// A program file still open for writing (a deploy copying it in place) is started once
    /// the writer lets go, not failed with "Text file busy".
    #[tokio::test]
    async fn a_program_being_written_is_started_when_the_writer_is_done() {
        let dir = tempfile::tempdir().expect("tempdir");
        let argv = function(dir.path(), "echo '{\"status\":\"completed\"}'");
        let writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&argv[0])
            .expect("open for writing");
        let done = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(40));
            drop(writer);
        });
        let o = call(
            &argv,
            &BTreeMap::new(),
            &probe_event("t"),
            Duration::from_secs(60),
        )
        .await
        .expect("started once the file was closed");
        assert_eq!(o.status, "completed");
        done.join().expect("writer");
    }

    #[tokio::test]
    async fn an_answer_is_read_when_the_function_exits_and_its_children_are_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("child.pid");
        let body = format!(
            "sleep 1000 &\necho $! > {}\necho '{{\"status\":\"completed\",\"note\":\"answered\"}}'",
            pidfile.display()
        );
        let o = run(dir.path(), &body, Duration::from_secs(60))
            .await
            .expect("the answer counts although a child holds stdout");
        assert_eq!(o.note.as_deref(), Some("answered"));
        wait_gone(&pidfile).await;
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("child.pid");
        let body = format!("sleep 1000 &\necho $! > {}\nsleep 1000", pidfile.display());
        let err = run(dir.path(), &body, Duration::from_millis(500))
            .await
            .expect_err("times out");
        assert!(err.message.contains("timed out"), "{}", err.message);
        wait_gone(&pidfile).await;
    }

    #[tokio::test]
    async fn bad_output_is_an_error_naming_what_is_wrong() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cases = [
            (
                "head -c 2000000 /dev/zero | tr '\\0' ' '",
                "over the limit of 1048576",
            ),
            (
                "printf '{\"status\":\"completed\",\"note\":\"\\377\"}'",
                "not UTF-8",
            ),
            (
                "printf '{\"status\":\"completed\",\"note\":\"a\\\\u0000b\"}'",
                "field \"note\" contains a NUL",
            ),
            ("echo 'not json'", "not a valid result"),
        ];
        for (body, expected) in cases {
            let err = run(dir.path(), body, Duration::from_secs(30))
                .await
                .expect_err(body);
            assert!(err.message.contains(expected), "{body}: {}", err.message);
        }
    }
}
