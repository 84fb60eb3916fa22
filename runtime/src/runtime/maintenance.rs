//! Maintenance: promote due `scheduled`/`retrying` steps often, fold the step-count deltas
//! into the counts, sweep expired leases less often, and sample queue depths for metrics; and,
//! in a task of its own, vacuum the hot tables when their dead rows pile up. Safe in many
//! processes at once (`SKIP LOCKED`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::store::Store;

/// Promote due steps often, sweep expired leases less often.
pub(super) async fn maintain(
    store: Store,
    every: Duration,
    cache: std::sync::Arc<super::function_cache::FunctionCache>,
    stop: CancellationToken,
) {
    let mut tick: u64 = 0;
    loop {
        if !super::session::until_sound(&stop).await {
            return;
        }
        if let Err(e) = store.steps_promote_due(1000).await {
            warn!(error = %e, "promoting due steps failed");
        }
        if crate::telemetry::enabled() && tick.is_multiple_of(25) {
            match store.queue_depths().await {
                Ok(rows) => {
                    if let Ok(mut q) = crate::telemetry::metrics().queues.lock() {
                        *q = rows
                            .into_iter()
                            .map(|(t, s, l, n, age)| ((t, s, l), (n as u64, age)))
                            .collect();
                    }
                }
                Err(e) => warn!(error = %e, "reading queue depths failed"),
            }
        }
        if let Err(e) = store.step_counts_rollup().await {
            warn!(error = %e, "folding step counts failed");
        }
        if tick.is_multiple_of(5) {
            match store.steps_sweep_leases(1000).await {
                Ok(0) => {}
                Ok(n) => info!(steps = n, "expired leases returned to the queue"),
                Err(e) => warn!(error = %e, "sweeping leases failed"),
            }
        }
        // About once a minute: trim the deployed functions' cache of what nothing pins.
        if tick.is_multiple_of(300) {
            match store.functions_hashes_in_use().await {
                Ok(keep) => {
                    let cache = std::sync::Arc::clone(&cache);
                    let gone = tokio::task::spawn_blocking(move || cache.trim(&keep))
                        .await
                        .unwrap_or(0);
                    if gone > 0 {
                        info!(functions = gone, "function cache trimmed");
                    }
                }
                Err(e) => warn!(error = %e, "reading the functions in use failed"),
            }
        }
        // About once a minute: forget idempotency keys past their day.
        if tick.is_multiple_of(300)
            && let Err(e) = store.idempotency_expire().await
        {
            warn!(error = %e, "expiring idempotency keys failed");
        }
        tick = tick.wrapping_add(1);
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Fold the step-count deltas every `every` until `stop`: what `workdo serve` runs, so that an
/// API-only deployment (robots updating steps, no runtime's maintenance loop) keeps the deltas
/// table small whether or not anyone reads the overview.
pub async fn fold_step_counts(store: Store, every: Duration, stop: CancellationToken) {
    let mut tick: u64 = 0;
    loop {
        if let Err(e) = store.step_counts_rollup().await {
            warn!(error = %e, "folding step counts failed");
        }
        // `workdo serve` alone keeps idempotency keys too: they expire here as well.
        if tick.is_multiple_of(60)
            && let Err(e) = store.idempotency_expire().await
        {
            warn!(error = %e, "expiring idempotency keys failed");
        }
        tick = tick.wrapping_add(1);
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// A hot table is vacuumed once its dead row versions pass this share of its live rows and
/// this many (a small table is left to autovacuum): [`Config::vacuum_dead`]'s default, and
/// `workdo serve`'s.
///
/// [`Config::vacuum_dead`]: super::Config::vacuum_dead
pub const VACUUM_DEAD: (f64, i64) = (0.2, 10_000);

/// Vacuum the hot tables (`steps`, `step_count_deltas`, `workflows`) every `every` that their
/// dead row versions pass `share` of their live rows and `floor`, until `stop`
/// ([0037](../../../docs/decisions/0037-the-runtime-vacuums-its-hot-tables.md), which has the
/// measurements). A step leaves about three dead versions of its row behind, faster than
/// autovacuum comes round (once a minute by default, never when it is off), and the claims walk
/// them until a vacuum. A task of its own, so that a long vacuum of a large table never holds
/// up promotion, the lease sweep or the counts.
pub async fn vacuum_hot_tables(
    store: Store,
    every: Duration,
    (share, floor): (f64, i64),
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            done = store.hot_tables_vacuum(share, floor) => match done {
                Ok(tables) if !tables.is_empty() => debug!(?tables, "hot tables vacuumed"),
                Ok(_) => {}
                Err(e) => warn!(error = %e, "vacuuming the hot tables failed"),
            },
            () = stop.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
    }
}
