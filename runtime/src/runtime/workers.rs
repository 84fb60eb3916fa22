//! The runtime's workers as a set that follows the templates: a template loaded (or a version
//! made current) while `workdo up` runs gets its workers within a moment — the listener hears
//! the template's NOTIFY, with a poll as the fallback — and a step whose function changed or
//! that is gone has its worker stopped (it finishes or gives back what it holds, as at
//! shutdown).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::Binding;
use super::functions::StepFunctions;
use super::listener::Notifies;
use super::worker::{self, Shared};

struct Running {
    /// What the worker was started from; a different one means a new worker.
    fingerprint: String,
    stop: CancellationToken,
}

pub(super) struct WorkerSet {
    shared: Arc<Shared>,
    notifies: Notifies,
    shutdown: CancellationToken,
    running: HashMap<String, Running>,
    tasks: JoinSet<()>,
}

impl WorkerSet {
    pub(super) fn new(
        shared: Arc<Shared>,
        notifies: Notifies,
        shutdown: CancellationToken,
    ) -> Self {
        WorkerSet {
            shared,
            notifies,
            shutdown,
            running: HashMap::new(),
            tasks: JoinSet::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.running.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Run a worker for each of `bindings` and no other: stop those gone or changed, start the
    /// new ones. A step whose function cannot run here (an unknown builtin of a newer binary)
    /// is logged and left in its queue.
    pub(super) fn reconcile(&mut self, bindings: Vec<Binding>) {
        let wanted: HashMap<String, Binding> = bindings.into_iter().map(|b| (b.key(), b)).collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(k, r)| {
                wanted
                    .get(*k)
                    .is_none_or(|b| format!("{b:?}") != r.fingerprint)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            if let Some(r) = self.running.remove(&key) {
                r.stop.cancel();
                info!(step = %key, "worker stopped: its template changed or is gone");
            }
        }
        let env = self.shared.config.function_env();
        for (key, b) in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            let b = Arc::new(b);
            let functions = match StepFunctions::new(
                self.shared.store.clone(),
                Arc::clone(&self.shared.cache),
                env.clone(),
                Arc::clone(&b),
            ) {
                Ok(f) => Arc::new(f),
                Err(e) => {
                    error!(step = %key, error = %e,
                        "this step's function cannot run here; its steps wait in the queue");
                    continue;
                }
            };
            let notify = {
                let mut map = self.notifies.write().unwrap_or_else(|p| p.into_inner());
                Arc::clone(
                    map.entry(key.clone())
                        .or_insert_with(|| Arc::new(Notify::new())),
                )
            };
            // Work that arrived before this worker existed is claimed at once.
            notify.notify_one();
            let stop = self.shutdown.child_token();
            let fingerprint = format!("{b:?}");
            if !self.running.is_empty() || !self.tasks.is_empty() {
                info!(step = %key, "worker started");
            }
            self.tasks.spawn(worker::work(
                Arc::clone(&self.shared),
                b,
                functions,
                notify,
                stop.clone(),
            ));
            self.running.insert(key, Running { fingerprint, stop });
        }
    }

    /// Wait for one worker to end (workers end only when stopped).
    pub(super) async fn join_next(&mut self) -> Option<()> {
        self.tasks.join_next().await.map(|_| ())
    }

    /// Wait for every worker to end (after the shutdown token was cancelled).
    pub(super) async fn wait_all(mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}
