//! Completers: commit workers' results in batches (group commit), sharded by object.
//!
//! Everything a result changes (its step, the step's dependants, its workflow, its object)
//! belongs to one object, so completers that each own a share of the objects commit in
//! parallel without contending for rows. Every result goes through
//! [`Store::results_commit`], the one commit path (`workdo run` and the bench use it too).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::store::{StepResult, Store};

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
async fn complete(store: Store, mut rx: mpsc::Receiver<StepResult>, max: usize, actor: String) {
    let mut batch: Vec<StepResult> = Vec::with_capacity(max);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        while batch.len() < max {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let mut delay = Duration::from_millis(100);
        loop {
            let span = tracing::info_span!("commit", workdo.results = batch.len());
            let committed = {
                use tracing::Instrument;
                store.results_commit(&batch, &actor).instrument(span).await
            };
            match committed {
                Ok(applied) => {
                    if !applied.lost.is_empty() {
                        warn!(steps = ?applied.lost, "results dropped: their leases were lost");
                    }
                    break;
                }
                Err(e) => {
                    // The database is unreachable or refused: keep the results and try again.
                    // If leases expire meanwhile the steps run again; nothing is applied twice.
                    warn!(error = %e, n = batch.len(), "commit failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        batch.clear();
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
