//! The scheduler: fire due cron schedules (each tick once, however many runtimes run).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::store::Store;

/// Fire due schedules; look again every 500 ms.
pub(super) async fn fire_schedules(store: Store, stop: CancellationToken) {
    loop {
        if !super::session::until_sound(&stop).await {
            return;
        }
        match store.schedules_fire_due().await {
            Ok(fired) => {
                for f in fired {
                    info!(schedule = %f.schedule, started = f.started, "schedule fired");
                }
            }
            Err(e) => warn!(error = %e, "firing schedules failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = stop.cancelled() => return,
        }
    }
}
