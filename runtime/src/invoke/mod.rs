//! Running step functions: `exec` (a process per call), `warm` (a pool of long-lived processes
//! answering newline-delimited JSON), `http` (POST to a URL) and `builtin` (in-process).
//!
//! Whatever goes wrong while calling a function — it cannot start, crashes, exits non-zero,
//! prints something that is not a result, or runs past its timeout — comes back as an
//! [`InvokeError`] whose message says which, with the captured stderr as text; the worker turns it
//! into a retryable error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod exec;
mod http;
mod warm;

pub use crate::model::outcome::{
    Event, InvokeError, ObjectUpdate, Outcome, PROTOCOL, StartWorkflow,
};
pub use warm::WarmPool;

use crate::model::template::{FunctionSpec, Runner};

/// The largest result a function may print (exec, warm) or answer (http): 1 MiB.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// The longest `note` a result may carry.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;
/// The longest error `message` a result may carry.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024;
/// The longest error `text` a result may carry.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// How much of a function's stderr is kept for the error text.
const STDERR_KEEP: usize = 16 * 1024;

/// A function's process group (it was started with `process_group(0)`, so the group id is its
/// pid), killed (SIGKILL) when dropped, so no grandchild outlives the call or the process.
pub(super) struct Group(Option<i32>);

impl Group {
    pub(super) fn of(child: &tokio::process::Child) -> Group {
        Group(
            child
                .id()
                .and_then(|p| i32::try_from(p).ok())
                .filter(|p| *p > 0),
        )
    }

    /// Kill every process left in the group.
    pub(super) fn kill(&self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) with a negative pid signals the process group; it touches no
            // memory. The group id stays reserved while any member lives, so this reaches only
            // what is left of this function's processes (ESRCH, ignored, when nothing is).
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
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
    /// A function that cannot be had (a deployed function not fetched, a version not found):
    /// every call fails saying why, and is retried under its step's attempts.
    Fails(String),
}

impl Invoker {
    /// Prepare `spec`'s function. Exec and warm functions get `env` and the step's own `env` as
    /// their whole environment (besides `WORKDO_MODE` and, for exec, `TRACEPARENT`): nothing of
    /// the runtime's own is inherited.
    ///
    /// # Errors
    /// A builtin function that does not exist.
    pub fn new(
        spec: &FunctionSpec,
        env: &BTreeMap<String, String>,
    ) -> Result<Invoker, InvokeError> {
        let mut full_env = env.clone();
        full_env.extend(spec.env.clone());
        Ok(match &spec.runner {
            Runner::Exec { argv } => Invoker::Exec {
                argv: resolve(argv),
                env: full_env,
            },
            Runner::Warm {
                argv,
                pool,
                pipeline,
            } => Invoker::Warm(Arc::new(WarmPool::new(
                resolve(argv),
                full_env,
                *pool as usize,
                *pipeline as usize,
            ))),
            Runner::Http { url } => Invoker::Http {
                url: url.clone(),
                client: http_client(),
            },
            Runner::Builtin { name } => Invoker::Builtin(builtin(name).ok_or_else(|| {
                InvokeError::new(format!("no builtin function {name:?}"), String::new())
            })?),
            // Which version runs is the step's workflow's pin: the worker resolves it per call
            // (runtime/functions.rs) into an exec or warm runner of the cached file.
            Runner::Deployed { name, .. } => {
                return Err(InvokeError::new(
                    format!("deployed function {name} is resolved per call, not prepared once"),
                    String::new(),
                ));
            }
        })
    }

    /// Call the function with `event`, waiting at most `timeout`.
    pub async fn invoke(&self, event: &Event, timeout: Duration) -> Result<Outcome, InvokeError> {
        match self {
            Invoker::Exec { argv, env } => exec::call(argv, env, event, timeout).await,
            Invoker::Warm(pool) => pool.invoke(event, timeout).await,
            Invoker::Http { url, client } => http::call(client, url, event, timeout).await,
            Invoker::Builtin(f) => Ok(f(event)),
            Invoker::Fails(why) => Err(InvokeError::new(why.clone(), String::new())),
        }
    }

    /// The runner's name, for spans and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Invoker::Exec { .. } => "exec",
            Invoker::Warm(_) => "warm",
            Invoker::Http { .. } => "http",
            Invoker::Builtin(_) => "builtin",
            Invoker::Fails(_) => "unavailable",
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

/// A function's answer as a result: UTF-8, within the limits, JSON of the protocol's shape,
/// nothing Postgres cannot store ([`check_outcome`]).
///
/// # Errors
/// What is wrong with the answer, in words that follow the function's name.
pub fn parse_result(stdout: &[u8]) -> Result<Outcome, String> {
    if stdout.len() > MAX_RESULT_BYTES {
        return Err(format!(
            "answered a result of {} bytes, over the limit of {MAX_RESULT_BYTES}",
            stdout.len()
        ));
    }
    let text = std::str::from_utf8(stdout).map_err(|e| {
        format!(
            "printed output that is not UTF-8 (an invalid byte at offset {})",
            e.valid_up_to()
        )
    })?;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("printed no result on stdout".into());
    }
    crate::model::numbers::check_exact(trimmed)
        .map_err(|e| format!("printed a result that workdo cannot keep exactly: {e}"))?;
    let outcome = serde_json::from_str::<Outcome>(trimmed).map_err(|e| {
        let head: String = trimmed.chars().take(200).collect();
        format!("printed output that is not a valid result ({e}): {head}")
    })?;
    check_outcome(&outcome)?;
    Ok(outcome)
}

/// What Postgres could not store, or what is over a documented limit, named by field: a
/// result with a NUL character (U+0000) anywhere, or a note, message or text too long.
pub fn check_outcome(o: &Outcome) -> Result<(), String> {
    let nul_in = |v: &serde_json::Value| crate::model::nul_at(v).is_some();
    let nul = |field: &str| {
        format!(
            "answered a result whose field {field:?} contains a NUL character (U+0000), which workdo cannot store"
        )
    };
    let texts = [
        ("status", Some(o.status.as_str())),
        ("note", o.note.as_deref()),
        ("lifecycle", o.lifecycle.as_deref()),
        ("message", o.message.as_deref()),
        ("text", o.text.as_deref()),
        ("until", o.until.as_deref()),
    ];
    for (field, value) in texts {
        if value.is_some_and(|v| v.contains('\0')) {
            return Err(nul(field));
        }
    }
    for (field, value, max) in [
        ("note", &o.note, MAX_NOTE_BYTES),
        ("message", &o.message, MAX_MESSAGE_BYTES),
        ("text", &o.text, MAX_TEXT_BYTES),
    ] {
        if let Some(v) = value
            && v.len() > max
        {
            return Err(format!(
                "answered a result whose field {field:?} has {} bytes, over the limit of {max}",
                v.len()
            ));
        }
    }
    if let Some(u) = &o.object {
        if u.properties
            .iter()
            .any(|(k, v)| k.contains('\0') || nul_in(v))
        {
            return Err(nul("object.properties"));
        }
        if u.documents
            .iter()
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(nul("object.documents"));
        }
    }
    if let Some(c) = &o.context
        && c.iter().any(|(k, v)| k.contains('\0') || nul_in(v))
    {
        return Err(nul("context"));
    }
    for s in &o.start {
        if let Some(at) = &s.start_at
            && chrono::DateTime::parse_from_rfc3339(at).is_err()
        {
            let shown: String = at.chars().take(60).collect();
            return Err(format!(
                "answered a result whose field \"start\" has start_at {shown:?}, which is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)"
            ));
        }
        let strings = [Some(&s.template), s.lane.as_ref(), s.start_at.as_ref()];
        if strings.iter().flatten().any(|v| v.contains('\0'))
            || s.context
                .as_ref()
                .is_some_and(|c| c.iter().any(|(k, v)| k.contains('\0') || nul_in(v)))
        {
            return Err(nul("start"));
        }
    }
    Ok(())
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("crashed (killed by signal {sig})"),
        _ => "ended abnormally".into(),
    }
}

fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(STDERR_KEEP);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// An event for calling a function outside any workflow (`workdo bench`, tests).
pub(crate) fn probe_event(object: &str) -> Event {
    Event {
        protocol: PROTOCOL.into(),
        step_id: 1,
        workflow_id: 1,
        object: object.into(),
        template: "probeWF".into(),
        step: "call".into(),
        version: 1,
        lane: "default".into(),
        attempt: 1,
        max_attempts: 3,
        properties: Default::default(),
        documents: Default::default(),
        context: Default::default(),
        traceparent: None,
        deadline: "2030-01-01T00:00:00Z".into(),
        call: None,
        fragment: None,
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

/// How a function process is started (exec, warm, and the bench's floor under exec): `argv`,
/// only `env` and `WORKDO_MODE` in its environment, three pipes, a process group of its own
/// (killed whole by [`Group`]), killed if the handle is dropped.
pub(crate) fn command(
    argv: &[String],
    env: &BTreeMap<String, String>,
    mode: &str,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env)
        .env("WORKDO_MODE", mode)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Start `cmd`, trying again for a moment while its program file is busy (ETXTBSY: a deploy
/// copying a new binary in place, or another thread's fork holding a write descriptor to a
/// script just written, for the instant before its exec closes it).
pub(crate) async fn spawn(
    cmd: &mut tokio::process::Command,
) -> std::io::Result<tokio::process::Child> {
    let mut tries: u64 = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 10 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(5 * tries)).await;
            }
            started => return started,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_a_template_may_name_exists() {
        for name in crate::model::template::BUILTINS {
            assert!(builtin(name).is_some(), "{name}");
        }
        assert!(builtin("rm-rf").is_none());
    }

    #[test]
    fn a_raw_nul_byte_in_a_result_is_refused() {
        let raw = b"{\"status\":\"completed\",\"note\":\"a\0b\"}\n";
        let err = parse_result(raw).err().unwrap_or_default();
        assert!(!err.is_empty(), "accepted");
    }

    #[test]
    fn what_postgres_cannot_store_is_refused_by_field() {
        let ok: Outcome =
            serde_json::from_str(r#"{"status":"completed","note":"fine"}"#).expect("a result");
        assert!(check_outcome(&ok).is_ok());
        for (json, field) in [
            (
                r#"{"status":"completed","object":{"properties":{"a":"x\u0000y"}}}"#,
                "object.properties",
            ),
            (
                r#"{"status":"completed","object":{"documents":{"d":"\u0000"}}}"#,
                "object.documents",
            ),
            (
                r#"{"status":"completed","context":{"k\u0000":1}}"#,
                "context",
            ),
            (r#"{"status":"error","message":"a\u0000"}"#, "message"),
            (
                r#"{"status":"completed","start":[{"template":"a\u0000"}]}"#,
                "start",
            ),
        ] {
            let o: Outcome = serde_json::from_str(json).expect("a result");
            let e = check_outcome(&o).expect_err(json);
            assert!(e.contains(&format!("{field:?}")), "{json}: {e}");
        }
        let long = Outcome::error("m".repeat(MAX_MESSAGE_BYTES + 1));
        assert!(check_outcome(&long).is_err_and(|e| e.contains("over the limit of 4096")),);
    }
}
