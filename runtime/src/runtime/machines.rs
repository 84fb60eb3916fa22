//! The machine loop: fires due alarms (each once, however many runtimes run: the rows are
//! claimed with `SKIP LOCKED`) and takes machine jobs' pending signals in order — self-stimulated
//! ones, fired alarms, function actions' results, `workdo.signal` from SQL. It sleeps until a
//! NOTIFY on the signal channel, the next alarm, or the polling interval.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::Store;

pub(super) async fn run(store: Store, wake: Arc<Notify>, poll: Duration, stop: CancellationToken) {
    loop {
        let mut busy = false;
        match store.machine_alarms_fire(500).await {
            Ok(n) => busy |= n > 0,
            Err(e) => warn!(error = %e, "firing alarms failed"),
        }
        match store.machine_inbox_run(100).await {
            Ok(n) => busy |= n > 0,
            Err(e) => warn!(error = %e, "taking machine signals failed"),
        }
        if busy {
            if stop.is_cancelled() {
                return;
            }
            continue;
        }
        let until_alarm = match store.machine_next_alarm().await {
            Ok(Some(at)) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
            _ => poll,
        };
        let nap = until_alarm.min(poll).max(Duration::from_millis(5));
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(nap) => {}
            () = stop.cancelled() => return,
        }
    }
}
