//! The steps this runtime holds, and keeping their leases honest.
//!
//! A worker records every step it claims ([`Held::hold`]); a completer forgets it once its
//! result is committed ([`Held::let_go`]). From that record:
//!
//! - **Heartbeat.** Every third of the shortest lease held, the leases of every step held are
//!   renewed in one statement, so a lease can be short (`--lease`) however long a function runs:
//!   a runtime that dies gives its steps back within one lease, not after the longest timeout.
//! - **Giving back what a lost connection left.** A claim whose answer was lost (the connection
//!   or the server went away while it committed) may have committed all the same: those steps
//!   are `started` under this runtime's name and nobody runs them. After such a claim, and
//!   whenever the LISTEN connection comes back, the steps leased to this runtime that it does
//!   not hold go back to the queue with their attempts. Claims wait for that to finish (and it
//!   for claims in progress), so a step is never given back between its claim and its record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, RwLock, RwLockReadGuard};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use crate::store::{Claimed, Store};

/// The steps this runtime holds: id → (lease token, lease length).
#[derive(Default)]
pub(super) struct Held {
    gate: RwLock<()>,
    steps: Mutex<HashMap<i64, (Uuid, Duration)>>,
    in_doubt: AtomicBool,
    wake: Notify,
}

impl Held {
    /// Hold this while claiming and until the claimed steps are [`hold`](Held::hold)-recorded.
    pub(super) async fn claiming(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Record steps just claimed under a lease of `lease`.
    pub(super) fn hold(&self, claimed: &[Claimed], lease: Duration) {
        if let Ok(mut s) = self.steps.lock() {
            s.extend(claimed.iter().map(|c| (c.id, (c.lease_token, lease))));
        }
    }

    /// Forget steps whose results are committed (or given up), each under the lease it was
    /// held by: a step claimed again meanwhile (a new lease) is still held.
    pub(super) fn let_go(&self, done: impl IntoIterator<Item = (i64, Option<Uuid>)>) {
        if let Ok(mut s) = self.steps.lock() {
            for (id, token) in done {
                if s.get(&id).is_some_and(|(held, _)| Some(*held) == token) {
                    s.remove(&id);
                }
            }
        }
    }

    /// A claim's answer was lost, or the connection came back: look for steps leased to this
    /// runtime that it does not hold.
    pub(super) fn doubt(&self) {
        self.in_doubt.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    fn snapshot(&self) -> Vec<(i64, Uuid, f64)> {
        self.steps
            .lock()
            .map(|s| {
                s.iter()
                    .map(|(id, (t, l))| (*id, *t, l.as_secs_f64()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A third of the shortest lease held, between 200 ms and 10 s.
    fn beat(&self) -> Duration {
        let shortest = self
            .steps
            .lock()
            .ok()
            .and_then(|s| s.values().map(|(_, l)| *l).min())
            .unwrap_or(Duration::from_secs(30));
        (shortest / 3).clamp(Duration::from_millis(200), Duration::from_secs(10))
    }
}

/// Renew the leases held, and give back what lost connections left, until `stop`. `lease` is
/// the longest lease a claim gets: a step claimed while this sleeps is renewed within a third
/// of it.
pub(super) async fn keep(
    store: Store,
    held: Arc<Held>,
    owner: String,
    lease: Duration,
    stop: CancellationToken,
) {
    loop {
        // A give-back that failed (the server is still away) is tried again soon.
        let wait = if held.in_doubt.load(Ordering::SeqCst) {
            Duration::from_millis(500)
        } else {
            held.beat().min(lease / 3)
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = held.wake.notified() => {}
            () = stop.cancelled() => return,
        }
        if held.in_doubt.swap(false, Ordering::SeqCst) {
            let _claims = held.gate.write().await;
            let keep: Vec<i64> = held.snapshot().iter().map(|h| h.0).collect();
            match store.steps_return_leases(&owner, &keep).await {
                Ok(0) => {}
                Ok(n) => info!(
                    steps = n,
                    "gave back steps whose claim was lost with the connection"
                ),
                Err(e) => {
                    warn!(error = %e, "giving back steps after a lost connection failed; trying again");
                    held.in_doubt.store(true, Ordering::SeqCst);
                }
            }
        }
        let now = held.snapshot();
        if now.is_empty() {
            continue;
        }
        match store.steps_renew_leases(&now).await {
            // Fewer renewed than held: results committed between the snapshot and the renewal
            // (the usual case), or leases that lapsed while the database was away (their steps
            // may run again elsewhere; their results will be dropped as lost). Logged at debug.
            Ok(n) if (n as usize) < now.len() => {
                tracing::debug!(
                    held = now.len(),
                    renewed = n,
                    "some held leases were not renewed (committed meanwhile, or lost)"
                );
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, steps = now.len(), "renewing leases failed; trying again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Held;
    use std::time::Duration;
    use uuid::Uuid;

    #[test]
    fn a_step_is_let_go_only_under_the_lease_it_is_held_by() {
        let held = Held::default();
        let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
        if let Ok(mut s) = held.steps.lock() {
            s.insert(7, (second, Duration::from_secs(60)));
        }
        // A late result of the first claim does not release the second claim's lease.
        held.let_go([(7, Some(first))]);
        assert_eq!(held.snapshot().len(), 1);
        held.let_go([(7, Some(second))]);
        assert!(held.snapshot().is_empty());
    }
}
