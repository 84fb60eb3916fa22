//! The machine loops: one fires due alarms (each once, however many runtimes run: the rows are
//! claimed with `SKIP LOCKED`), sleeping until the next alarm is due, a NOTIFY, or the polling
//! interval; the other takes machine jobs' pending signals in order — self-stimulated ones,
//! fired alarms, function actions' results, `workdo.signal` from SQL — woken by NOTIFY on the
//! signal channel. Apart, so that a long run of transitions never delays an alarm.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::Store;

/// `signals` wakes the inbox loop, `alarms` the alarm loop (the listener rings both on the
/// signal channel, which a transition that sets an alarm notifies too).
pub(super) async fn run(
    store: Store,
    signals: Arc<Notify>,
    alarms: Arc<Notify>,
    poll: Duration,
    stop: CancellationToken,
) {
    let firing = tokio::spawn(fire_alarms(
        store.clone(),
        Arc::clone(&signals),
        alarms,
        poll,
        stop.clone(),
    ));
    take_signals(store, signals, poll, stop).await;
    let _ = firing.await;
}

async fn fire_alarms(
    store: Store,
    wake: Arc<Notify>,
    set: Arc<Notify>,
    poll: Duration,
    stop: CancellationToken,
) {
    loop {
        if !super::session::until_sound(&stop).await {
            return;
        }
        match store.machine_alarms_fire(500).await {
            Ok(n) if n > 0 => {
                // Their signals wait in the inbox: wake the other loop.
                wake.notify_one();
                continue;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "firing alarms failed"),
        }
        let until_alarm = match store.machine_next_alarm().await {
            Ok(Some(at)) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
            _ => poll,
        };
        let nap = until_alarm.min(poll).max(Duration::from_millis(1));
        tokio::select! {
            () = tokio::time::sleep(nap) => {}
            // An alarm was set (or a signal sent): look at the next due time again.
            () = set.notified() => {}
            () = stop.cancelled() => return,
        }
    }
}

async fn take_signals(store: Store, wake: Arc<Notify>, poll: Duration, stop: CancellationToken) {
    loop {
        if !super::session::until_sound(&stop).await {
            return;
        }
        match store.machine_inbox_run(100).await {
            Ok(n) if n > 0 => {
                if stop.is_cancelled() {
                    return;
                }
                continue;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "taking machine signals failed"),
        }
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(poll) => {}
            () = stop.cancelled() => return,
        }
    }
}
