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

/// How much of a function's stderr is kept for the error text.
const STDERR_KEEP: usize = 16 * 1024;

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
        })
    }

    /// Call the function with `event`, waiting at most `timeout`.
    pub async fn invoke(&self, event: &Event, timeout: Duration) -> Result<Outcome, InvokeError> {
        match self {
            Invoker::Exec { argv, env } => exec::call(argv, env, event, timeout).await,
            Invoker::Warm(pool) => pool.invoke(event, timeout).await,
            Invoker::Http { url, client } => http::call(client, url, event, timeout).await,
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
