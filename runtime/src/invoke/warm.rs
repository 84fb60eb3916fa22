//! `warm`: a pool of long-lived processes answering newline-delimited JSON.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{Mutex, Semaphore};

use super::{
    Event, Group, InvokeError, MAX_RESULT_BYTES, Outcome, STDERR_KEEP, describe_exit, parse_result,
    tail,
};

/// Long-lived processes answering one JSON event per line with one result per line.
///
/// Each event carries a `call` id, unique in the pool, and each answer must carry the same `call`
/// back: answers are matched to calls by it, never by position, so a function that prints an
/// answer twice, late or out of order can never hand one object's result to another. An answer
/// with a missing, unknown or already answered `call` is a protocol error: the process is
/// replaced and only the calls in flight on it fail (each retried like any error), saying so.
///
/// Each process may have up to `pipeline` calls in flight: their lines are written without
/// waiting for earlier answers, and a reader task hands each answer line to the call it names. With `pipeline: 1` a process has one call at a time. A call's timeout covers its wait
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
    /// Processes being started (counted with `procs` against `size`).
    starting: std::sync::atomic::AtomicUsize,
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

/// How many answered call ids a process remembers, to tell "answered twice" from "never sent".
const REMEMBERED_ANSWERS: usize = 256;

#[derive(Default)]
struct Waiting {
    /// Calls whose lines were written (or are being written), by call id.
    replies: std::collections::HashMap<String, Reply>,
    /// The latest calls answered, oldest first.
    answered: VecDeque<String>,
    /// Why the process is gone or going; set once, after which no call is queued on it.
    ended: Option<String>,
}

impl Waiting {
    /// The call `id`'s reply, or what is wrong with an answer naming it.
    fn take(&mut self, id: Option<&str>) -> Result<Reply, String> {
        let Some(id) = id else {
            return Err(
                "answered without a \"call\" field (each answer must carry its event's \
                        call back; see functions/README.md)"
                    .into(),
            );
        };
        if let Some(reply) = self.replies.remove(id) {
            if self.answered.len() == REMEMBERED_ANSWERS {
                self.answered.pop_front();
            }
            self.answered.push_back(id.to_string());
            return Ok(reply);
        }
        let shown: String = id.chars().take(80).collect();
        if self.answered.iter().any(|a| a == id) {
            Err(format!("answered call {shown:?} twice"))
        } else {
            Err(format!("answered call {shown:?}, which it was not sent"))
        }
    }
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
            starting: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many processes were started so far (crashed ones are replaced).
    pub fn spawned(&self) -> u64 {
        self.spawned.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn spawn(&self) -> Result<Arc<WarmProcess>, InvokeError> {
        let program = &self.argv[0];
        let mut cmd = super::command(&self.argv, &self.env, "warm");
        let mut child = super::spawn(&mut cmd).await.map_err(|e| {
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
        let stderr_reader = tokio::spawn(async move {
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
            stderr_reader,
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
    async fn pick(&self) -> Result<InFlight, InvokeError> {
        use std::sync::atomic::Ordering::Relaxed;
        loop {
            {
                let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
                procs.retain(|p| !p.shared.is_closing());
                let least = procs
                    .iter()
                    .min_by_key(|p| p.inflight.load(Relaxed))
                    .cloned();
                let full = procs.len() + self.starting.load(Relaxed) >= self.size;
                match least {
                    Some(p) if p.inflight.load(Relaxed) == 0 || full => {
                        return Ok(InFlight::new(p));
                    }
                    // Every process is still being started: wait for one.
                    None if full => {}
                    // Room for another process: start it outside the lock (starting one may
                    // wait for a program file a deploy is still writing).
                    _ => {
                        self.starting.fetch_add(1, Relaxed);
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let started = self.spawn().await;
        self.starting.fetch_sub(1, Relaxed);
        let p = started?;
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::clone(&p));
        Ok(InFlight::new(p))
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
        let proc = self.pick().await?;
        let call_id = new_call_id();
        let line = event_line(event, &call_id);
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
                    w.replies.insert(call_id, reply);
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

/// A call id no function can guess: 128 random bits, in hex. A pipelined process holds the
/// lines of calls queued behind the one it works on; with ids it could count on (a prefix and a
/// counter), it could answer one of those with its own data before reading it. It learns an id
/// only by reading its call's line, and the id is the line's last field, so it is read only once
/// the whole line was written (the reply is registered just before the line is written, under
/// the process's stdin lock: no answer can name a call whose line is not being written).
fn new_call_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// `event` as one line of JSON carrying `call`. The event's own `call` is never set by the
/// runtime (it is skipped when serialising), so the id goes in before the closing brace.
fn event_line(event: &Event, call: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(event).unwrap_or_else(|_| b"{}".to_vec());
    if line.last() == Some(&b'}') {
        line.pop();
        if line.len() > 1 {
            line.push(b',');
        }
        line.extend_from_slice(b"\"call\":");
        line.extend(serde_json::to_vec(call).unwrap_or_default());
        line.push(b'}');
    }
    line.push(b'\n');
    line
}

/// The `call` a line names, when the line is JSON with a string `call` at its top level.
fn call_of(line: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct CallOnly {
        call: Option<String>,
    }
    serde_json::from_slice::<CallOnly>(line).ok()?.call
}

/// A warm process's reader: hands each answer line to the call it names. When the process ends
/// (end of output, a line that is not a result, an answer naming no call, an unknown call or one
/// already answered, or a kill), every call still waiting gets an error saying how, and no call
/// is queued on it again. The process
/// runs in a group of its own, killed when the reader ends, so nothing it started outlives it.
async fn read_answers(
    proc: Arc<ProcessState>,
    mut child: Child,
    group: Group,
    mut stdout: BufReader<ChildStdout>,
    stderr_reader: tokio::task::JoinHandle<()>,
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
        if line.len() > MAX_RESULT_BYTES {
            // Which call it meant cannot be read from a line cut short: all in flight fail.
            proc.end(Some(format!(
                "was killed: it printed an answer line over {} KiB, the largest result allowed",
                MAX_RESULT_BYTES / 1024
            )));
            break true;
        }
        match parse_result(&line) {
            Ok(mut outcome) => {
                let taken = proc.lock().take(outcome.call.as_deref());
                match taken {
                    Ok(reply) => {
                        outcome.call = None;
                        let _ = reply.send(Ok(outcome));
                    }
                    Err(why) => {
                        proc.end(Some(format!("was killed: it {why}")));
                        break true;
                    }
                }
            }
            // A process that printed garbage is out of step with us: replace it. The call the
            // line names, if any can be read, gets what was wrong with it.
            Err(m) => {
                let named = call_of(&line).and_then(|id| proc.lock().take(Some(&id)).ok());
                let why = match named {
                    Some(reply) => {
                        let _ = reply.send(Err(InvokeError::new(
                            format!("warm {program} {m}"),
                            stderr_tail(&proc.stderr),
                        )));
                        "was killed: another call on the same process was answered with \
                         something that is not a result"
                            .to_string()
                    }
                    None => format!("was killed: it {m}"),
                };
                proc.end(Some(why));
                break true;
            }
        }
    };
    if killed {
        group.kill();
        let _ = child.start_kill();
    }
    let exit = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    // The process is gone; what it wrote to stderr last is read before the calls are told (a
    // grandchild could still hold stderr open: its group is killed, and the wait is bounded).
    if !killed {
        group.kill();
    }
    let _ = tokio::time::timeout(Duration::from_millis(500), stderr_reader).await;
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
    for (_, reply) in replies {
        let _ = reply.send(Err(InvokeError::new(
            format!("warm {program} {why}"),
            text.clone(),
        )));
    }
}

#[cfg(test)]
mod tests;
