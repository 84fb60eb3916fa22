//! Completers: commit workers' results in batches (group commit), sharded by object.
//!
//! Everything a result changes (its step, the step's dependants, its workflow, its object)
//! belongs to one object, so completers that each own a share of the objects commit in
//! parallel without contending for rows. Every result goes through
//! [`Store::results_commit`], the one commit path (`workdo run` and the bench use it too).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::leases::Held;
use crate::model::status::Status;
use crate::store::{Change, Effects, StepResult, Store};

/// Where workers hand their results: one channel per completer.
#[derive(Clone)]
pub(super) struct Results {
    senders: Vec<mpsc::Sender<StepResult>>,
}

impl Results {
    /// Hand a result to the completer that owns its object.
    pub(super) async fn finish(&self, result: StepResult) {
        let i = shard(&result.object_id, self.senders.len());
        if let Some(tx) = self.senders.get(i) {
            let _ = tx.send(result).await;
        }
    }
}

/// Start `n` completers committing at most `max` results a transaction. They stop once every
/// [`Results`] handle is dropped and their queues are committed.
pub(super) fn start(
    store: &Store,
    n: usize,
    max: usize,
    actor: &str,
    held: &Arc<Held>,
    stop: &CancellationToken,
) -> (Results, Vec<JoinHandle<()>>) {
    let mut senders = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..n.max(1) {
        let (tx, rx) = mpsc::channel::<StepResult>(4096);
        senders.push(tx);
        handles.push(tokio::spawn(complete(
            store.clone(),
            rx,
            max,
            actor.to_string(),
            Arc::clone(held),
            stop.clone(),
        )));
    }
    (Results { senders }, handles)
}

/// The completer (of `n`) that commits an object's results: stable for the life of the
/// process, so one object's results are always committed in the order they were handed over.
fn shard(object_id: &str, n: usize) -> usize {
    use std::hash::{Hash, Hasher};
    if n <= 1 {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    object_id.hash(&mut h);
    (h.finish() % n as u64) as usize
}

/// Commit results in batches: whatever has arrived while the last commit ran goes in the next.
async fn complete(
    store: Store,
    mut rx: mpsc::Receiver<StepResult>,
    max: usize,
    actor: String,
    held: Arc<Held>,
    stop: CancellationToken,
) {
    let mut batch: Vec<StepResult> = Vec::with_capacity(max);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < max {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        commit(&store, &batch, &actor, &stop).await;
        // Committed, refused and recorded, or given up at shutdown: no lease to renew.
        held.let_go(batch.iter().map(|r| (r.change.id, r.change.lease)));
        batch.clear();
    }
}

/// Commit `batch` (one transaction). While the database is unreachable, keep the results
/// and try again with back-off; once `stop` is cancelled, give up after a few tries (the steps
/// run again when their leases expire: nothing is lost, and shutdown is not held hostage). When
/// the database refuses the data itself, commit the results one at a time so that only the
/// result at fault fails, and record that one as its step's error.
async fn commit(store: &Store, batch: &[StepResult], actor: &str, stop: &CancellationToken) {
    let mut delay = Duration::from_millis(100);
    let mut tries = 0;
    loop {
        let span = tracing::info_span!("commit", workdo.results = batch.len());
        let committed = {
            use tracing::Instrument;
            store.results_commit(batch, actor).instrument(span).await
        };
        match committed {
            Ok(applied) => {
                if !applied.lost.is_empty() {
                    warn!(steps = ?applied.lost, "results dropped: their steps no longer hold these leases (they expired, or these results were committed by an earlier try whose answer was lost)");
                }
                return;
            }
            Err(e) if e.is_refusal() => {
                match batch {
                    [one] => refused(store, one, actor, &e.to_string()).await,
                    _ => {
                        warn!(error = %e, n = batch.len(), "the database refused a batch; committing its results one by one");
                        for r in batch {
                            Box::pin(commit(store, std::slice::from_ref(r), actor, stop)).await;
                        }
                    }
                }
                return;
            }
            Err(e) => {
                tries += 1;
                if stop.is_cancelled() && tries >= 3 {
                    error!(error = %e, n = batch.len(), "shutting down with the database unreachable: these results are not committed; their steps run again when their leases expire");
                    return;
                }
                // The database is unreachable: keep the results and try again. If leases
                // expire meanwhile the steps run again; nothing is applied twice.
                warn!(error = %e, n = batch.len(), "commit failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = stop.cancelled() => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// A result the database refused: its step goes into `error` (under the same lease, with an
/// alert) saying why, and none of its side effects apply.
async fn refused(store: &Store, r: &StepResult, actor: &str, reason: &str) {
    let mut change = Change::new(r.change.id, Status::Error, "failed");
    change.lease = r.change.lease;
    change.error_message = Some(format!(
        "the function's result could not be stored: {reason}"
    ));
    change.detail = serde_json::json!({ "refused": r.change.status.as_str() });
    let failed = StepResult {
        change,
        object_id: r.object_id.clone(),
        workflow_id: r.workflow_id,
        effects: Effects::default(),
    };
    warn!(step = r.change.id, %reason, "the database refused a result; its step is put in error");
    if let Err(e) = store
        .results_commit(std::slice::from_ref(&failed), actor)
        .await
    {
        // Not even the error could be stored (or the database went away): the lease expires
        // and the step runs again.
        error!(step = r.change.id, error = %e, "recording a refused result failed");
    }
}

#[cfg(test)]
mod tests {
    use super::shard;

    #[test]
    fn an_objects_results_always_go_to_the_same_completer() {
        let objects: Vec<String> = (0..200).map(|i| format!("druid:bb{i:03}")).collect();
        let first: Vec<usize> = objects.iter().map(|o| shard(o, 4)).collect();
        let again: Vec<usize> = objects.iter().map(|o| shard(o, 4)).collect();
        assert_eq!(first, again);
        assert!(first.iter().all(|&i| i < 4));
        // Spread over every completer, so they share the work.
        for i in 0..4 {
            assert!(first.contains(&i), "no object went to completer {i}");
        }
        assert!(objects.iter().all(|o| shard(o, 1) == 0));
    }
}
