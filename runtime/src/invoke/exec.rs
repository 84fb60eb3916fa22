//! `exec`: a process per call, the event on stdin, the result on stdout.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{Event, InvokeError, Outcome, STDERR_KEEP, describe_exit, parse_result, tail};

pub(super) async fn call(
    argv: &[String],
    env: &BTreeMap<String, String>,
    event: &Event,
    timeout: Duration,
) -> Result<Outcome, InvokeError> {
    let program = &argv[0];
    let mut cmd = Command::new(program);
    cmd.args(&argv[1..])
        .envs(env)
        .env("WORKDO_MODE", "exec")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(tp) = &event.traceparent {
        cmd.env("TRACEPARENT", tp);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| InvokeError::new(format!("cannot start {program}: {e}"), String::new()))?;
    let input = serde_json::to_vec(event).unwrap_or_default();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Feed, drain and wait concurrently: a function that prints a lot before reading must not
    // deadlock against a full pipe.
    let feed = async {
        if let Some(mut s) = stdin.take() {
            let _ = s.write_all(&input).await;
            let _ = s.shutdown().await;
        }
    };
    let read_out = async {
        let mut buf = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_end(&mut buf).await;
        }
        buf
    };
    let read_err = async {
        let mut buf = Vec::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(4 * STDERR_KEEP as u64).read_to_end(&mut buf).await;
        }
        tail(&buf)
    };
    let run = async {
        let ((), out, err) = tokio::join!(feed, read_out, read_err);
        let status = child.wait().await;
        (out, err, status)
    };
    let (out, err, status) = match tokio::time::timeout(timeout, run).await {
        Ok(done) => done,
        Err(_) => {
            // The future owning the child was dropped: kill_on_drop ends the process.
            return Err(InvokeError::new(
                format!(
                    "{program} timed out after {:.1}s and was killed",
                    timeout.as_secs_f64()
                ),
                String::new(),
            ));
        }
    };
    let status = status
        .map_err(|e| InvokeError::new(format!("cannot wait for {program}: {e}"), err.clone()))?;
    if !status.success() {
        return Err(InvokeError::new(
            format!("{program} {}", describe_exit(status)),
            err,
        ));
    }
    parse_result(&out).map_err(|m| InvokeError::new(format!("{program} {m}"), err))
}
