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

/// Start `n` completers, each sizing its commits with its own copy of `sizer`. They stop once
/// every [`Results`] handle is dropped and their queues are committed.
pub(super) fn start(
    store: &Store,
    n: usize,
    sizer: Sizer,
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
            sizer.clone(),
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

/// With `--commit-within`: the batch size that keeps a commit near the target, learnt from the
/// commits made, so that a dependant waits about that long for its prerequisite's commit
/// however busy the runtime is. Without it, every commit takes all that waits, up to `max`
/// (natural group commit: the most throughput, and under load the longest commits).
#[derive(Debug, Clone)]
pub(super) struct Sizer {
    /// Seconds of commit per result (moving average); none until a commit says.
    per_result: Option<f64>,
    max: usize,
    target: Option<Duration>,
}

impl Sizer {
    /// Fewer than this is never the cap: below it, a commit's fixed cost would dominate.
    const FLOOR: usize = 32;

    /// At most `max` results a commit, and with `target`, as many as commit within it.
    pub(super) fn new(max: usize, target: Option<Duration>) -> Self {
        Sizer {
            per_result: None,
            max: max.max(1),
            target,
        }
    }

    /// Most results the next commit takes.
    fn cap(&self) -> usize {
        match (self.target, self.per_result) {
            (Some(target), Some(per)) => {
                let fit = (target.as_secs_f64() / per.max(1e-7)) as usize;
                fit.clamp(Self::FLOOR.min(self.max), self.max)
            }
            _ => self.max,
        }
    }

    /// A commit of `n` results took `took`. Commits of a handful of results say more about
    /// the fixed cost than the per-result one, so they do not move the average.
    fn record(&mut self, n: usize, took: Duration) {
        if n < 8 {
            return;
        }
        let per = took.as_secs_f64() / n as f64;
        self.per_result = Some(match self.per_result {
            None => per,
            Some(old) => 0.8 * old + 0.2 * per,
        });
    }
}

/// Commit results in batches: whatever has arrived while the last commit ran goes in the next,
/// up to what `sizer` allows.
async fn complete(
    store: Store,
    mut rx: mpsc::Receiver<StepResult>,
    mut sizer: Sizer,
    actor: String,
    held: Arc<Held>,
    stop: CancellationToken,
) {
    let mut batch: Vec<StepResult> = Vec::with_capacity(sizer.max);
    while let Some(first) = rx.recv().await {
        batch.push(first);
        let cap = sizer.cap();
        while batch.len() < cap {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        let began = std::time::Instant::now();
        commit(&store, &batch, &actor, &stop).await;
        sizer.record(batch.len(), began.elapsed());
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
        // Nothing is committed through a session found shared (`store/connect/session.rs`): the
        // results wait for it to be sound again (or, at shutdown, their leases expire).
        if !super::session::until_sound(stop).await {
            error!(
                n = batch.len(),
                "shutting down with the database session shared: these results are not committed; their steps run again when their leases expire"
            );
            return;
        }
        let span = tracing::info_span!("commit", workdo.results = batch.len());
        let committed = {
            use tracing::Instrument;
            store.results_commit(batch, actor).instrument(span).await
        };
        match committed {
            Ok(applied) => {
                if !applied.lost.is_empty() {
                    warn!(steps = ?applied.lost, "results dropped: their steps no longer hold these leases: changed from outside while they ran (skipped, retried or set by an operator or a robot; see each step's events), their leases expired, or an earlier try committed them and its answer was lost");
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
    // A machine's call still tells its job it failed: without a signal the job waited for ever.
    let signal = r.effects.signal.as_ref().map(|(_, data)| {
        let step = data["step"].as_str().unwrap_or_default();
        let data =
            crate::model::machine::call_end_data(step, None, change.error_message.as_deref());
        ("error".to_string(), data)
    });
    let failed = StepResult {
        change,
        object_id: r.object_id.clone(),
        workflow_id: r.workflow_id,
        effects: Effects {
            signal,
            ..Effects::default()
        },
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
    use super::{Sizer, shard};
    use std::time::Duration;

    #[test]
    fn a_commit_is_sized_to_the_target_from_what_results_cost() {
        let target = Some(Duration::from_millis(4));
        // Without a target, every commit may take the configured most.
        let mut s = Sizer::new(500, None);
        s.record(100, Duration::from_millis(20));
        assert_eq!(s.cap(), 500);
        let mut s = Sizer::new(500, target);
        assert_eq!(s.cap(), 500, "before any commit, the configured most");
        // 100 results in 20 ms: 0.2 ms each, so 4 ms fits 20 — but never fewer than the floor.
        s.record(100, Duration::from_millis(20));
        assert_eq!(s.cap(), Sizer::FLOOR);
        // Cheap results: 500 in 1 ms fit the configured most.
        let mut s = Sizer::new(500, target);
        s.record(500, Duration::from_millis(1));
        assert_eq!(s.cap(), 500);
        // 40 µs a result: 100 fit in the target.
        let mut s = Sizer::new(500, target);
        s.record(200, Duration::from_millis(8));
        let fit = (0.004 / 40e-6) as usize;
        assert!(s.cap().abs_diff(fit) <= 1, "{} vs {fit}", s.cap());
        // A commit of a handful does not move it.
        s.record(2, Duration::from_millis(50));
        assert!(s.cap().abs_diff(fit) <= 1);
        // --commit-batch below the floor is obeyed.
        let mut s = Sizer::new(10, target);
        s.record(10, Duration::from_millis(100));
        assert_eq!(s.cap(), 10);
    }

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
