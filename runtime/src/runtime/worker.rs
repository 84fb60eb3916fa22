//! A worker: one loop per bound template step. It claims up to `batch-limit` ready steps
//! (never more than it has free concurrency for), calls the function for each in a task of its
//! own, and hands each result to the completers. It sleeps until a NOTIFY says its step has
//! ready work, or the poll interval passes.
//!
//! Shutdown: stop claiming, give calls in flight `grace` to finish, then abort the rest and
//! release their steps (back to the queue, attempt given back).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::completer::Results;
use super::execute::execute;
use super::functions::{Resolved, StepFunctions};
use super::{Binding, Config};
use crate::model::status::Status;
use crate::store::{Change, Claimed, Effects, StepInputs, StepResult, Store, StoreError, session};

/// What every worker of a runtime shares.
pub(super) struct Shared {
    pub(super) store: Store,
    pub(super) config: Config,
    pub(super) results: Results,
    pub(super) held: Arc<super::leases::Held>,
    /// Deployed functions fetched for this host.
    pub(super) cache: Arc<super::function_cache::FunctionCache>,
}

/// How one claim ended, handed back to the worker loop with the slots it took.
struct Claim {
    permits: Vec<OwnedSemaphorePermit>,
    outcome: Outcome,
}

enum Outcome {
    /// Steps leased, their inputs read and, where it varies, what each runs: call them.
    Claimed(
        Vec<Claimed>,
        HashMap<i64, StepInputs>,
        HashMap<i64, Result<Resolved, String>>,
    ),
    /// The claim failed (and was reported); claim again after the poll interval.
    Failed,
}

/// How many claims one worker has in flight at once. A worker of batch-limit 1 and concurrency
/// 2 claimed one step, then the next, one round trip and one synchronous commit after the other:
/// claims, not calls or commits, were what bounded it (the yardstick's two connections claim two
/// at a time), and an exec worker of concurrency 2 claimed for its second slot only once the
/// first slot's claim was back. So a small worker (concurrency at most four) claims for each slot
/// on its own, and a larger one as many claims as its concurrency holds whole batches, at most
/// four: few enough that a worker of big batches still claims big batches.
fn claims_at_once(batch: usize, concurrency: usize) -> usize {
    let c = concurrency.max(1);
    if c <= 4 {
        return c;
    }
    (c / batch.clamp(1, c)).clamp(1, 4)
}

/// One worker loop for one template step.
pub(super) async fn work(
    shared: Arc<Shared>,
    binding: Arc<Binding>,
    functions: Arc<StepFunctions>,
    notify: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let cfg = &shared.config;
    let timeout = Duration::from_secs_f64(binding.function.timeout_secs);
    // Renewed while the call runs (`leases::keep`), so it need not cover the whole timeout.
    let lease = (timeout + cfg.lease_margin).min(cfg.lease);
    let batch = binding.batch_limit.unwrap_or(cfg.default_batch).max(1) as usize;
    let concurrency = binding.function.concurrency.max(1) as usize;
    let at_once = claims_at_once(batch, concurrency);
    let slots = Arc::new(Semaphore::new(concurrency));
    let inflight: Arc<Mutex<HashMap<i64, Claimed>>> = Arc::default();
    let mut calls = JoinSet::new();
    let mut claims: JoinSet<Claim> = JoinSet::new();
    // Not claiming until this instant; `true`: or until a NOTIFY says there is work.
    let mut paused: Option<(tokio::time::Instant, bool)> = None;
    // Claims in flight allowed now: one until a claim comes back full (an idle worker woken by
    // a NOTIFY sends one claim, not `at_once` of which all but one find nothing), then all.
    let mut allowed = 1;
    loop {
        while calls.try_join_next().is_some() {}
        let until = paused.map(|(t, _)| t);
        let by_notify = paused.is_some_and(|(_, n)| n);
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            Some(done) = claims.join_next(), if !claims.is_empty() => {
                let Claim { permits, outcome } = match done {
                    Ok(c) => c,
                    Err(e) => {
                        // Its permits went with it; steps it held (if any) are renewed until
                        // this process stops and then expire back to the queue.
                        warn!(step = %binding.key(), error = %e, "a claim task failed");
                        continue;
                    }
                };
                match outcome {
                    Outcome::Failed => {
                        allowed = 1;
                        paused = Some((tokio::time::Instant::now() + cfg.poll_interval, false));
                    }
                    Outcome::Claimed(claimed, inputs, resolved) => {
                        // Fewer ready steps than free slots (none at all, often): the queue is
                        // empty now. Claim again once a commit makes steps of this step ready
                        // (its NOTIFY; one that arrived meanwhile is kept by `notify` and wakes
                        // us at once) or the poll interval passes, not straight away: after a
                        // claim that got some steps, an immediate second claim found nothing
                        // about as often as every other claim in the DAG bench, at a round
                        // trip and an index scan each.
                        if claimed.len() < permits.len() {
                            allowed = 1;
                            paused = Some((tokio::time::Instant::now() + cfg.poll_interval, true));
                        } else {
                            allowed = at_once;
                        }
                        let call = Call { shared: &shared, binding: &binding, functions: &functions, inflight: &inflight, timeout };
                        call.spawn(&mut calls, claimed, (inputs, resolved), permits);
                    }
                }
            }
            // A session found shared (a transaction pooler switched on under this process)
            // claims nothing until it is sound again (`store/connect/session.rs`).
            () = session::sound(), if session::is_lost() => {}
            () = notify.notified(), if by_notify => paused = None,
            () = sleep_until(until), if until.is_some() => paused = None,
            p = Arc::clone(&slots).acquire_owned(), if paused.is_none() && claims.len() < allowed && !session::is_lost() => {
                let Ok(first) = p else { break };
                let mut permits = vec![first];
                while permits.len() < batch {
                    match Arc::clone(&slots).try_acquire_owned() {
                        Ok(p) => permits.push(p),
                        Err(_) => break,
                    }
                }
                claims.spawn(claim_and_read(
                    Arc::clone(&shared),
                    Arc::clone(&binding),
                    Arc::clone(&functions),
                    permits,
                    (lease, shutdown.clone()),
                ));
            }
        }
    }
    // Claims in flight at shutdown are let finish, and what they took goes back uncalled.
    while let Some(done) = claims.join_next().await {
        if let Ok(Claim {
            outcome: Outcome::Claimed(claimed, _, _),
            ..
        }) = done
        {
            give_back(&shared, claimed, "shutdown").await;
        }
    }
    drain(&shared, calls, &inflight).await;
    functions.shutdown().await;
}

/// What a claim's calls need of their worker.
struct Call<'a> {
    shared: &'a Arc<Shared>,
    binding: &'a Arc<Binding>,
    functions: &'a Arc<StepFunctions>,
    inflight: &'a Arc<Mutex<HashMap<i64, Claimed>>>,
    timeout: Duration,
}

impl Call<'_> {
    /// A call of its own for each claimed step, holding one of the claim's slots until its
    /// result is handed to the completers.
    fn spawn(
        &self,
        calls: &mut JoinSet<()>,
        claimed: Vec<Claimed>,
        (mut inputs, mut resolved): (
            HashMap<i64, StepInputs>,
            HashMap<i64, Result<Resolved, String>>,
        ),
        permits: Vec<OwnedSemaphorePermit>,
    ) {
        if let Ok(mut f) = self.inflight.lock() {
            f.extend(claimed.iter().map(|c| (c.id, c.clone())));
        }
        for (c, permit) in claimed.into_iter().zip(permits) {
            let input = inputs.remove(&c.id).unwrap_or_default();
            let shared = Arc::clone(self.shared);
            let mut binding = Arc::clone(self.binding);
            let inflight = Arc::clone(self.inflight);
            // The worker's own function, or what this step's version and pin say it runs; a
            // function that cannot be had fails the call, saying why.
            let (invoker, timeout, deployed) =
                match (self.functions.fixed(), resolved.remove(&c.id)) {
                    (_, Some(Ok(r))) => {
                        if let Some(own) = r.binding {
                            binding = own;
                        }
                        (
                            r.invoker,
                            Duration::from_secs_f64(r.function.timeout_secs),
                            r.deployed,
                        )
                    }
                    (_, Some(Err(why))) => (
                        Arc::new(crate::invoke::Invoker::Fails(why)),
                        self.timeout,
                        None,
                    ),
                    (Some(own), None) => (Arc::clone(own), self.timeout, None),
                    (None, None) => (
                        Arc::new(crate::invoke::Invoker::Fails(
                            "no function was resolved for this step".into(),
                        )),
                        self.timeout,
                        None,
                    ),
                };
            calls.spawn(async move {
                let result = execute(
                    &invoker,
                    &binding,
                    &shared.config,
                    &c,
                    input,
                    timeout,
                    deployed.as_ref(),
                )
                .await;
                shared.results.finish(result).await;
                if let Ok(mut f) = inflight.lock()
                    && f.get(&c.id)
                        .is_some_and(|held| held.lease_token == c.lease_token)
                {
                    f.remove(&c.id);
                }
                drop(permit);
            });
        }
    }
}

/// Steps claimed and not called go back to the queue with their attempts, saying why.
async fn give_back(shared: &Shared, claimed: Vec<Claimed>, reason: &str) {
    for c in claimed {
        shared
            .results
            .finish(released(c, &shared.config.owner, reason))
            .await;
    }
}

/// `sleep_until` for an optional deadline (a select branch disabled when there is none).
async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// One claim of up to `permits.len()` steps, recorded as held, with the inputs their functions
/// asked for. Steps whose inputs cannot be read go back to the queue with their attempts.
async fn claim_and_read(
    shared: Arc<Shared>,
    binding: Arc<Binding>,
    functions: Arc<StepFunctions>,
    permits: Vec<OwnedSemaphorePermit>,
    (lease, shutdown): (Duration, CancellationToken),
) -> Claim {
    let gate = shared.held.claiming().await;
    // Stopping while this claim waited for the gate: claim nothing.
    if shutdown.is_cancelled() {
        return Claim {
            permits,
            outcome: Outcome::Claimed(Vec::new(), HashMap::new(), HashMap::new()),
        };
    }
    let claim = claim(&shared, &binding, permits.len(), lease).await;
    if let Ok(c) = &claim {
        shared.held.hold(c, lease);
    }
    drop(gate);
    let mut claimed = match claim {
        Ok(c) => c,
        Err(e) => {
            warn!(step = %binding.key(), error = %e, "claim failed; retrying");
            if !e.is_refusal() {
                // It may have committed all the same: steps leased to us that we do not
                // hold are given back once the server answers again.
                shared.held.doubt();
            }
            return Claim {
                permits,
                outcome: Outcome::Failed,
            };
        }
    };
    debug!(step = %binding.key(), n = claimed.len(), "claimed");
    // What each step runs, where it varies (its workflow's template version, a deployed
    // function's pin), then the documents any of them asks for.
    let resolved = if functions.fixed().is_some() {
        HashMap::new()
    } else {
        functions.resolve(&claimed).await
    };
    let mut documents = binding.function.documents.clone();
    for r in resolved.values().flatten() {
        for d in &r.function.documents {
            if !documents.contains(d) {
                documents.push(d.clone());
            }
        }
    }
    match shared.store.step_inputs(&mut claimed, &documents).await {
        Ok(inputs) => Claim {
            permits,
            outcome: Outcome::Claimed(claimed, inputs, resolved),
        },
        Err(e) => {
            // Never call a function without what it asked for: give the steps back (their
            // attempts too) and try again after the poll interval.
            warn!(step = %binding.key(), error = %e, "reading step inputs failed; giving the steps back");
            give_back(&shared, claimed, &format!("reading inputs failed: {e}")).await;
            Claim {
                permits,
                outcome: Outcome::Failed,
            }
        }
    }
}

/// A claimed step given back to the queue uncalled, with its attempt.
pub(super) fn released(c: Claimed, owner: &str, reason: &str) -> StepResult {
    let mut change = Change::new(c.id, Status::Waiting, "released");
    change.attempts_delta = -1;
    change.lease = Some(c.lease_token);
    change.detail = serde_json::json!({ "worker": owner, "reason": reason });
    StepResult {
        change,
        object_id: c.object_id,
        workflow_id: c.workflow_id,
        effects: Effects::default(),
    }
}

/// Claim up to `n` ready steps of `binding` under a lease of `lease`, traced and timed.
async fn claim(
    shared: &Shared,
    binding: &Binding,
    n: usize,
    lease: Duration,
) -> Result<Vec<Claimed>, StoreError> {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "claim",
        otel.name = %format!("claim {}", binding.key()),
        workdo.template = %binding.template,
        workdo.step = %binding.step,
        workdo.requested = n,
    );
    let began = std::time::Instant::now();
    let claimed = match (&binding.named, &binding.queue) {
        (Some(named), _) => {
            // The named queue's ready objects, then those objects' steps leased as task
            // injection leases them: what another worker took meanwhile is skipped.
            let store = &shared.store;
            let owner = &shared.config.owner;
            async move {
                let ready: Vec<String> = store
                    .queue_named_waiting(&named.name, (n as i64).saturating_mul(4).max(100))
                    .await?
                    .into_iter()
                    .filter(|e| e.status == "ready")
                    .map(|e| e.object_id)
                    .take(n)
                    .collect();
                if ready.is_empty() {
                    return Ok(Vec::new());
                }
                store
                    .step_claim_objects(&binding.template, &binding.step, &ready, owner, lease)
                    .await
            }
            .instrument(span)
            .await
        }
        (None, Some(queue)) => {
            shared
                .store
                .step_claim_queue(queue, None, n as i64, &shared.config.owner, lease)
                .instrument(span)
                .await
        }
        (None, None) => {
            shared
                .store
                .step_claim(
                    &binding.template,
                    &binding.step,
                    None,
                    n as i64,
                    &shared.config.owner,
                    lease,
                )
                .instrument(span)
                .await
        }
    };
    if claimed.is_ok() {
        crate::telemetry::metrics().claim.record(
            began.elapsed().as_secs_f64(),
            &[
                opentelemetry::KeyValue::new("template", binding.template.clone()),
                opentelemetry::KeyValue::new("step", binding.step.clone()),
            ],
        );
    }
    claimed
}

/// Shutdown: let calls in flight finish within the grace period, then give the rest back.
async fn drain(shared: &Shared, mut calls: JoinSet<()>, inflight: &Mutex<HashMap<i64, Claimed>>) {
    let grace = tokio::time::sleep(shared.config.grace);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = calls.join_next() => if next.is_none() { break },
            () = &mut grace => {
                calls.abort_all();
                while calls.join_next().await.is_some() {}
                break;
            }
        }
    }
    let left: Vec<Claimed> = inflight
        .lock()
        .map(|mut f| f.drain().map(|(_, c)| c).collect())
        .unwrap_or_default();
    give_back(shared, left, "shutdown").await;
}

#[cfg(test)]
mod tests {
    use super::claims_at_once;

    #[test]
    fn claims_at_once_fits_whole_batches_in_the_concurrency() {
        // (batch, concurrency) → claims in flight
        for (batch, concurrency, want) in [
            (1, 1, 1),
            (1, 2, 2),
            (1, 4, 4),
            (100, 2, 2),
            (100, 4, 4),
            (1, 64, 4),
            (100, 200, 2),
            (100, 100, 1),
            (3, 8, 2),
            (0, 0, 1),
        ] {
            assert_eq!(
                claims_at_once(batch, concurrency),
                want,
                "{batch}, {concurrency}"
            );
        }
    }
}
