//! `warm`: a pool of long-lived processes answering newline-delimited JSON.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Mutex, Semaphore};

use std::process::Stdio;

use super::{
    Event, Group, InvokeError, MAX_RESULT_BYTES, Outcome, STDERR_KEEP, describe_exit, parse_result,
    tail,
};

/// Long-lived processes answering one JSON event per line with one result per line, in order.
///
/// Each process may have up to `pipeline` calls in flight: their lines are written without
/// waiting for earlier answers, and a reader task hands each answer line to the oldest call still
/// waiting. With `pipeline: 1` a process has one call at a time. A call's timeout covers its wait
/// for room in the pool and in its process's queue; a call that runs past it kills its process,
/// and the other calls in flight on that process fail with an error saying so (each is retried
/// like any other error), as do the calls in flight on a process that crashes or prints a line
/// that is not a result.
pub struct WarmPool {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    size: usize,
    /// Calls in flight in the whole pool: `size × pipeline`.
    slots: Semaphore,
    procs: StdMutex<Vec<Arc<WarmProcess>>>,
    spawned: std::sync::atomic::AtomicU64,
}

/// One process: its stdin (one writer at a time, so lines and waiting calls stay in the same
/// order), how many calls are in flight on it, and what it shares with its reader task. The
/// reader holds only the shared part: dropping the process closes its stdin, and a function that
/// sees its input end exits, which ends the reader.
struct WarmProcess {
    stdin: Mutex<Option<ChildStdin>>,
    inflight: std::sync::atomic::AtomicUsize,
    shared: Arc<ProcessState>,
    reader: StdMutex<Option<tokio::task::JoinHandle<()>>>,
}

struct ProcessState {
    program: String,
    waiting: StdMutex<Waiting>,
    /// Set as soon as the process is known to be ending: it takes no new calls.
    closing: std::sync::atomic::AtomicBool,
    kill: tokio::sync::Notify,
    stderr: Arc<StdMutex<VecDeque<u8>>>,
}

type Reply = tokio::sync::oneshot::Sender<Result<Outcome, InvokeError>>;

#[derive(Default)]
struct Waiting {
    /// Calls whose lines were written, oldest first.
    replies: VecDeque<Reply>,
    /// Why the process is gone or going; set once, after which no call is queued on it.
    ended: Option<String>,
}

fn stderr_tail(buf: &StdMutex<VecDeque<u8>>) -> String {
    buf.lock()
        .map(|b| tail(&b.iter().copied().collect::<Vec<u8>>()))
        .unwrap_or_default()
}

impl ProcessState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // A panic while holding this lock cannot leave it inconsistent (a deque and an option).
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Take no more calls; `why`, if given first, is what the calls still in flight are told.
    fn end(&self, why: Option<String>) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let mut w = self.lock();
        if w.ended.is_none() {
            w.ended = why;
        }
    }

    /// Have the reader kill the process, `why` being what the calls in flight on it are told.
    fn kill(&self, why: String) {
        self.end(Some(why));
        self.kill.notify_one();
    }
}

/// A call's place on a process: counted in the process's `inflight` while it lives.
struct InFlight(Arc<WarmProcess>);

impl InFlight {
    fn new(proc: Arc<WarmProcess>) -> Self {
        proc.inflight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight(proc)
    }
}

impl std::ops::Deref for InFlight {
    type Target = WarmProcess;
    fn deref(&self) -> &WarmProcess {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0
            .inflight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl WarmPool {
    pub fn new(
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        size: usize,
        pipeline: usize,
    ) -> Self {
        let (size, pipeline) = (size.max(1), pipeline.max(1));
        WarmPool {
            argv,
            env,
            size,
            slots: Semaphore::new(size.saturating_mul(pipeline)),
            procs: StdMutex::new(Vec::new()),
            spawned: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many processes were started so far (crashed ones are replaced).
    pub fn spawned(&self) -> u64 {
        self.spawned.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn spawn(&self) -> Result<Arc<WarmProcess>, InvokeError> {
        let program = &self.argv[0];
        let mut cmd = Command::new(program);
        cmd.args(&self.argv[1..])
            .envs(&self.env)
            .env("WORKDO_MODE", "warm")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = super::spawn(&mut cmd).map_err(|e| {
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
        let group = Group::of(&child);
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
        let shared = Arc::new(ProcessState {
            program: program.clone(),
            waiting: StdMutex::new(Waiting::default()),
            closing: std::sync::atomic::AtomicBool::new(false),
            kill: tokio::sync::Notify::new(),
            stderr: buf,
        });
        let reader = tokio::spawn(read_answers(
            Arc::clone(&shared),
            child,
            group,
            BufReader::new(stdout),
        ));
        let proc = Arc::new(WarmProcess {
            stdin: Mutex::new(Some(stdin)),
            inflight: std::sync::atomic::AtomicUsize::new(0),
            shared,
            reader: StdMutex::new(Some(reader)),
        });
        self.spawned
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(proc)
    }

    /// The live process with the fewest calls in flight — an idle one before a new one, a new
    /// one before a busy one while the pool has fewer than `size`. Ended processes leave the
    /// pool. The least busy process always has room: the caller holds one of `size × pipeline`
    /// slots, and calls on ended processes hold theirs until they are answered.
    fn pick(&self) -> Result<InFlight, InvokeError> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        procs.retain(|p| !p.shared.is_closing());
        let least = procs
            .iter()
            .min_by_key(|p| p.inflight.load(Relaxed))
            .cloned();
        let proc = match least {
            Some(p) if p.inflight.load(Relaxed) == 0 || procs.len() >= self.size => p,
            _ => {
                let p = self.spawn()?;
                procs.push(Arc::clone(&p));
                p
            }
        };
        Ok(InFlight::new(proc))
    }

    pub(super) async fn invoke(
        &self,
        event: &Event,
        timeout: Duration,
    ) -> Result<Outcome, InvokeError> {
        let program = self.argv[0].clone();
        // Waiting for room counts against the call's timeout: a call queued behind slow ones
        // fails as timed out (and is retried) instead of running after its lease.
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
        let proc = self.pick()?;
        let mut line = serde_json::to_vec(event).unwrap_or_default();
        line.push(b'\n');
        let (reply, answer) = tokio::sync::oneshot::channel();
        let exchange = async {
            {
                let mut stdin = proc.stdin.lock().await;
                {
                    let mut w = proc.shared.lock();
                    if let Some(how) = &w.ended {
                        return Err(InvokeError::new(
                            format!("warm {program} {how}"),
                            stderr_tail(&proc.shared.stderr),
                        ));
                    }
                    w.replies.push_back(reply);
                }
                // A failed write means the process is gone: its reader answers this call.
                if let Some(stdin) = stdin.as_mut()
                    && stdin.write_all(&line).await.is_ok()
                {
                    let _ = stdin.flush().await;
                }
            }
            answer.await.unwrap_or_else(|_| {
                Err(InvokeError::new(
                    format!("warm {program} ended without answering"),
                    stderr_tail(&proc.shared.stderr),
                ))
            })
        };
        match tokio::time::timeout(timeout_left, exchange).await {
            Ok(result) => result,
            Err(_) => {
                proc.shared.kill(format!(
                    "was killed: a call before this one timed out after {:.1}s",
                    timeout.as_secs_f64()
                ));
                Err(InvokeError::new(
                    format!(
                        "warm {program} timed out after {:.1}s and was killed",
                        timeout.as_secs_f64()
                    ),
                    stderr_tail(&proc.shared.stderr),
                ))
            }
        }
    }

    pub(super) async fn shutdown(&self) {
        self.slots.close();
        let procs: Vec<Arc<WarmProcess>> =
            std::mem::take(&mut *self.procs.lock().unwrap_or_else(|p| p.into_inner()));
        // Closing stdin is the polite stop; whoever has not exited after 2 s is killed (by its
        // reader task, which also waits for the exit).
        let mut exits = tokio::task::JoinSet::new();
        for p in procs {
            exits.spawn(async move {
                p.stdin.lock().await.take();
                let reader = p.reader.lock().map(|mut r| r.take()).ok().flatten();
                if let Some(mut reader) = reader
                    && tokio::time::timeout(Duration::from_secs(2), &mut reader)
                        .await
                        .is_err()
                {
                    p.shared.kill("was stopped".into());
                    let _ = reader.await;
                }
            });
        }
        while exits.join_next().await.is_some() {}
    }
}

/// A warm process's reader: hands each answer line to the oldest waiting call. When the process
/// ends (end of output, a line that is not a result, an answer nobody asked for, or a kill), every
/// call still waiting gets an error saying how, and no call is queued on it again. The process
/// runs in a group of its own, killed when the reader ends, so nothing it started outlives it.
async fn read_answers(
    proc: Arc<ProcessState>,
    mut child: Child,
    group: Group,
    mut stdout: BufReader<ChildStdout>,
) {
    let program = proc.program.clone();
    // Whether the process is killed (by a caller or for what it printed) or ended by itself.
    let killed = loop {
        // An answer line is read up to one byte past the largest result: a process printing
        // without end costs at most that much memory, and its call fails saying so.
        let mut line = Vec::new();
        let mut capped = (&mut stdout).take(MAX_RESULT_BYTES as u64 + 1);
        let read = tokio::select! {
            read = capped.read_until(b'\n', &mut line) => read,
            () = proc.kill.notified() => break true,
        };
        if !matches!(read, Ok(n) if n > 0) {
            // End of output or a read error: the process died (or closed its output).
            proc.end(None);
            break false;
        }
        let Some(reply) = proc.lock().replies.pop_front() else {
            proc.end(Some(format!(
                "was killed: it printed a line nobody asked for: {}",
                String::from_utf8_lossy(&line[..line.len().min(400)])
                    .trim()
                    .chars()
                    .take(200)
                    .collect::<String>()
            )));
            break true;
        };
        if line.len() > MAX_RESULT_BYTES {
            let _ = reply.send(Err(InvokeError::new(
                format!(
                    "warm {program} printed an answer line over {} KiB, the largest result \
                     allowed",
                    MAX_RESULT_BYTES / 1024
                ),
                stderr_tail(&proc.stderr),
            )));
            proc.end(Some(
                "was killed: a call before this one printed an answer over the size limit".into(),
            ));
            break true;
        }
        match parse_result(&line) {
            Ok(outcome) => {
                let _ = reply.send(Ok(outcome));
            }
            // A process that printed garbage is out of step with us: replace it.
            Err(m) => {
                let _ = reply.send(Err(InvokeError::new(
                    format!("warm {program} {m}"),
                    stderr_tail(&proc.stderr),
                )));
                proc.end(Some(
                    "was killed: a call before this one printed something that is not a result"
                        .into(),
                ));
                break true;
            }
        }
    };
    if killed {
        group.kill();
        let _ = child.start_kill();
    }
    let exit = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    if !killed {
        tokio::time::sleep(Duration::from_millis(10)).await; // let stderr drain
    }
    let (why, replies) = {
        let mut w = proc.lock();
        // Whoever killed the process has said why; one that ended by itself says how.
        let why = w
            .ended
            .get_or_insert_with(|| match exit {
                Ok(Ok(status)) => describe_exit(status),
                _ => "closed its output".into(),
            })
            .clone();
        (why, std::mem::take(&mut w.replies))
    };
    let text = stderr_tail(&proc.stderr);
    for reply in replies {
        let _ = reply.send(Err(InvokeError::new(
            format!("warm {program} {why}"),
            text.clone(),
        )));
    }
}

#[cfg(test)]
mod tests {
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
                "#!/bin/sh\nwhile read line; do\n  while [ ! -e '{}' ]; do sleep 0.01; done\n  echo '{{\"status\":\"completed\"}}'\ndone\n",
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

    /// Calls in flight on one process, answered in order: each answer reaches its own call.
    /// The function answers only after it has read four lines, so this completes only when four
    /// lines are written before the first answer comes back.
    #[tokio::test]
    async fn a_warm_process_takes_pipelined_calls_and_answers_each_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = [
            PY,
            "seen = []\nfor line in sys.stdin:\n    seen.append(json.loads(line)['object'])\n    if len(seen) == 4:\n        for o in seen:\n            print(json.dumps({'status': 'completed', 'note': o}), flush=True)\n        seen = []\n",
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
            "for line in sys.stdin:\n    if json.loads(line)['object'] == 'hang':\n        time.sleep(3600)\n    print(json.dumps({'status': 'completed'}), flush=True)\n",
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
}
