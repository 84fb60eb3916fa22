//! Running step functions: `exec` (a process per call), `warm` (a pool of long-lived processes
//! answering newline-delimited JSON), `http` (POST to a URL) and `builtin` (in-process).
//!
//! Whatever goes wrong while calling a function — it cannot start, crashes, exits non-zero,
//! prints something that is not a result, or runs past its timeout — comes back as an
//! [`InvokeError`] whose message says which, with the captured stderr as text; the worker turns it
//! into a retryable error.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, Semaphore};

pub use workdo_function::protocol::{Event, ObjectUpdate, Outcome, PROTOCOL, StartWorkflow};

use crate::template::{FunctionSpec, Runner};

/// How much of a function's stderr is kept for the error text.
const STDERR_KEEP: usize = 16 * 1024;

/// A call that did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InvokeError {
    pub message: String,
    /// Captured stderr (its last part), if any.
    pub text: Option<String>,
}

impl InvokeError {
    fn new(message: impl Into<String>, stderr: String) -> Self {
        InvokeError {
            message: message.into(),
            text: (!stderr.trim().is_empty()).then_some(stderr),
        }
    }
}

/// A function ready to be called.
pub enum Invoker {
    Exec {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
    },
    Warm(Arc<WarmPool>),
    Http {
        url: String,
        client: reqwest::Client,
    },
    Builtin(fn(&Event) -> Outcome),
}

impl Invoker {
    /// Prepare `spec`'s function. `env` is added to exec and warm functions' environment.
    pub fn new(spec: &FunctionSpec, env: &BTreeMap<String, String>) -> Result<Invoker, String> {
        let mut full_env = env.clone();
        full_env.extend(spec.env.clone());
        Ok(match &spec.runner {
            Runner::Exec { argv } => Invoker::Exec {
                argv: resolve(argv),
                env: full_env,
            },
            Runner::Warm { argv, pool } => Invoker::Warm(Arc::new(WarmPool::new(
                resolve(argv),
                full_env,
                *pool as usize,
            ))),
            Runner::Http { url } => Invoker::Http {
                url: url.clone(),
                client: http_client(),
            },
            Runner::Builtin { name } => Invoker::Builtin(
                builtin(name).ok_or_else(|| format!("no builtin function {name:?}"))?,
            ),
        })
    }

    /// Call the function with `event`, waiting at most `timeout`.
    pub async fn invoke(&self, event: &Event, timeout: Duration) -> Result<Outcome, InvokeError> {
        match self {
            Invoker::Exec { argv, env } => exec(argv, env, event, timeout).await,
            Invoker::Warm(pool) => pool.invoke(event, timeout).await,
            Invoker::Http { url, client } => http(client, url, event, timeout).await,
            Invoker::Builtin(f) => Ok(f(event)),
        }
    }

    /// The runner's name, for spans and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Invoker::Exec { .. } => "exec",
            Invoker::Warm(_) => "warm",
            Invoker::Http { .. } => "http",
            Invoker::Builtin(_) => "builtin",
        }
    }

    /// Stop any processes this function keeps.
    pub async fn shutdown(&self) {
        if let Invoker::Warm(pool) = self {
            pool.shutdown().await;
        }
    }
}

/// A program named without a path is looked up next to the `workdo` executable first (where
/// cargo puts the workspace's function binaries), then on PATH.
fn resolve(argv: &[String]) -> Vec<String> {
    let mut out = argv.to_vec();
    if let Some(first) = out.first_mut()
        && !first.contains('/')
        && let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
    {
        let sibling = dir.join(&*first);
        if sibling.is_file() {
            *first = sibling.display().to_string();
        }
    }
    out
}

fn http_client() -> reqwest::Client {
    crate::install_crypto();
    reqwest::Client::builder()
        .user_agent(concat!("workdo/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

fn parse_result(stdout: &[u8]) -> Result<Outcome, String> {
    let text = String::from_utf8_lossy(stdout);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("printed no result on stdout".into());
    }
    serde_json::from_str::<Outcome>(trimmed).map_err(|e| {
        let head: String = trimmed.chars().take(200).collect();
        format!("printed output that is not a valid result ({e}): {head}")
    })
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("crashed (killed by signal {sig})"),
        _ => "ended abnormally".into(),
    }
}

async fn exec(
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

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_KEEP);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

async fn http(
    client: &reqwest::Client,
    url: &str,
    event: &Event,
    timeout: Duration,
) -> Result<Outcome, InvokeError> {
    let mut req = client.post(url).timeout(timeout).json(event);
    if let Some(tp) = &event.traceparent {
        req = req.header("traceparent", tp);
    }
    let resp = req.send().await.map_err(|e| {
        let what = if e.is_timeout() {
            format!("POST {url} timed out after {:.1}s", timeout.as_secs_f64())
        } else {
            format!("POST {url} failed: {e}")
        };
        InvokeError::new(what, String::new())
    })?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(|e| {
        InvokeError::new(
            format!("reading the answer of {url} failed: {e}"),
            String::new(),
        )
    })?;
    if !status.is_success() {
        return Err(InvokeError::new(
            format!("POST {url} answered HTTP {status}"),
            tail(&body),
        ));
    }
    parse_result(&body).map_err(|m| InvokeError::new(format!("{url} {m}"), String::new()))
}

/// Long-lived processes answering one JSON event per line with one result per line.
pub struct WarmPool {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    slots: Semaphore,
    idle: Mutex<Vec<WarmProcess>>,
    spawned: std::sync::atomic::AtomicU64,
}

struct WarmProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<StdMutex<VecDeque<u8>>>,
}

impl WarmProcess {
    fn stderr_tail(&self) -> String {
        let buf = self
            .stderr
            .lock()
            .map(|b| b.iter().copied().collect::<Vec<u8>>());
        buf.map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

impl WarmPool {
    pub fn new(argv: Vec<String>, env: BTreeMap<String, String>, size: usize) -> Self {
        WarmPool {
            argv,
            env,
            slots: Semaphore::new(size.max(1)),
            idle: Mutex::new(Vec::new()),
            spawned: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many processes were started so far (crashed ones are replaced).
    pub fn spawned(&self) -> u64 {
        self.spawned.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn spawn(&self) -> Result<WarmProcess, InvokeError> {
        let program = &self.argv[0];
        let mut child = Command::new(program)
            .args(&self.argv[1..])
            .envs(&self.env)
            .env("WORKDO_MODE", "warm")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                InvokeError::new(format!("cannot start warm {program}: {e}"), String::new())
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(InvokeError::new(
                format!("warm {program}: no pipes"),
                String::new(),
            ));
        };
        let buf = Arc::new(StdMutex::new(VecDeque::with_capacity(1024)));
        let sink = Arc::clone(&buf);
        tokio::spawn(async move {
            let mut stderr = stderr;
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut b) = sink.lock() {
                    b.extend(&chunk[..n]);
                    let excess = b.len().saturating_sub(STDERR_KEEP);
                    b.drain(..excess);
                }
            }
        });
        self.spawned
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(WarmProcess {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr: buf,
        })
    }

    async fn invoke(&self, event: &Event, timeout: Duration) -> Result<Outcome, InvokeError> {
        let program = self.argv[0].clone();
        // Waiting for a free process counts against the call's timeout: a call queued behind
        // slow ones fails as timed out (and is retried) instead of running after its lease.
        let began = std::time::Instant::now();
        let _slot = match tokio::time::timeout(timeout, self.slots.acquire()).await {
            Ok(Ok(slot)) => slot,
            Ok(Err(_)) => return Err(InvokeError::new("warm pool is shut down", String::new())),
            Err(_) => {
                return Err(InvokeError::new(
                    format!(
                        "warm {program} timed out after {:.1}s waiting for a free process",
                        timeout.as_secs_f64()
                    ),
                    String::new(),
                ));
            }
        };
        let timeout_left = timeout.saturating_sub(began.elapsed());
        let popped = self.idle.lock().await.pop();
        let mut proc = match popped {
            Some(p) => p,
            None => self.spawn()?,
        };
        let mut line = serde_json::to_vec(event).unwrap_or_default();
        line.push(b'\n');
        let exchange = async {
            proc.stdin.write_all(&line).await?;
            proc.stdin.flush().await?;
            let mut answer = String::new();
            let n = proc.stdout.read_line(&mut answer).await?;
            Ok::<(usize, String), std::io::Error>((n, answer))
        };
        let result = tokio::time::timeout(timeout_left, exchange).await;
        match result {
            Ok(Ok((n, answer))) if n > 0 => match parse_result(answer.as_bytes()) {
                Ok(outcome) => {
                    self.idle.lock().await.push(proc);
                    Ok(outcome)
                }
                // A process that printed garbage is out of step with us: replace it.
                Err(m) => Err(InvokeError::new(
                    format!("warm {program} {m}"),
                    proc.stderr_tail(),
                )),
            },
            Ok(Ok(_)) | Ok(Err(_)) => {
                // End of output or a broken pipe: the process died. Say how, and replace it.
                let status = tokio::time::timeout(Duration::from_secs(2), proc.child.wait()).await;
                let how = match status {
                    Ok(Ok(s)) => describe_exit(s),
                    _ => "closed its output".into(),
                };
                tokio::time::sleep(Duration::from_millis(10)).await; // let stderr drain
                Err(InvokeError::new(
                    format!("warm {program} {how}"),
                    proc.stderr_tail(),
                ))
            }
            Err(_) => Err(InvokeError::new(
                format!(
                    "warm {program} timed out after {:.1}s and was killed",
                    timeout.as_secs_f64()
                ),
                proc.stderr_tail(),
            )),
        }
        // Any `proc` not returned to `idle` is dropped here, which kills it.
    }

    async fn shutdown(&self) {
        self.slots.close();
        let procs: Vec<WarmProcess> = std::mem::take(&mut *self.idle.lock().await);
        // Closing stdin is the polite stop; whoever has not exited after 2 s is killed.
        let mut exits = tokio::task::JoinSet::new();
        for p in procs {
            let WarmProcess {
                mut child, stdin, ..
            } = p;
            drop(stdin);
            exits.spawn(async move {
                if tokio::time::timeout(Duration::from_secs(2), child.wait())
                    .await
                    .is_err()
                {
                    let _ = child.kill().await;
                }
            });
        }
        while exits.join_next().await.is_some() {}
    }
}

/// In-process functions, for benchmarks and tests.
pub fn builtin(name: &str) -> Option<fn(&Event) -> Outcome> {
    Some(match name {
        "noop" => |_| Outcome::completed(),
        "fail" => |e| Outcome::error(format!("builtin fail on attempt {}", e.attempt)),
        "skip" => |_| Outcome::skipped(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(object: &str) -> Event {
        serde_json::from_value(serde_json::json!({
            "protocol": PROTOCOL, "step_id": 1, "workflow_id": 1, "object": object,
            "template": "t", "step": "s", "version": 1, "lane": "default", "attempt": 1,
            "max_attempts": 3, "deadline": "2030-01-01T00:00:00Z"
        }))
        .expect("event")
    }

    /// A call queued behind a busy warm process gives up when its timeout passes, saying why,
    /// rather than running after its lease has expired; the busy call is not disturbed.
    #[tokio::test]
    async fn waiting_for_a_warm_process_counts_against_the_timeout() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("slow.sh");
        // Answers each line after the sibling file `go` appears: the test decides when.
        let go = dir.path().join("go");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\nwhile read line; do\n  while [ ! -e '{}' ]; do sleep 0.01; done\n  echo '{{\"status\":\"completed\"}}'\ndone\n",
                go.display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let pool = Arc::new(WarmPool::new(
            vec![path.display().to_string()],
            BTreeMap::new(),
            1,
        ));
        let busy = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move { pool.invoke(&event("a"), Duration::from_secs(30)).await })
        };
        // The first call holds the only process before the second one asks.
        while pool.slots.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let queued = pool
            .invoke(&event("b"), Duration::from_millis(200))
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
}
