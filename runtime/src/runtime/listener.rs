//! The listener: wakes the worker of `template:step` when a NOTIFY on
//! [`READY_CHANNEL`](crate::store::READY_CHANNEL) says it has ready work. A lost notification
//! costs at most a worker's poll interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::store::Store;

/// The workers' wake-ups by `template:step`; the runtime adds and removes entries as templates
/// come and go.
pub(super) type Notifies = Arc<std::sync::RwLock<HashMap<String, Arc<Notify>>>>;

/// Wake the worker of `template:step` when a NOTIFY says it has ready work, the machine loops
/// (`signals`) when a signal or alarm is set, and the runtime (`templates`) when a template's
/// current version changes.
pub(super) async fn listen(
    store: Store,
    notifies: Notifies,
    signals: [Arc<Notify>; 2],
    templates: Arc<Notify>,
    held: Arc<super::leases::Held>,
    stop: CancellationToken,
) {
    let mut first = true;
    loop {
        let mut listener = match store.ready_listener().await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "LISTEN connection failed; polling only until it returns");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        // Back after losing the connection: a claim in flight then may have committed unseen.
        if !std::mem::take(&mut first) {
            tracing::info!("LISTEN connection back");
            held.doubt();
        }
        // Anything notified while we were not listening is picked up by one claim round.
        for n in notifies
            .read()
            .map(|m| m.values().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            n.notify_one();
        }
        templates.notify_one();
        for s in &signals {
            s.notify_one();
        }
        loop {
            tokio::select! {
                msg = listener.try_recv() => match msg {
                    Ok(Some(m)) if m.channel() == crate::store::SIGNAL_CHANNEL => {
                        for s in &signals {
                            s.notify_one();
                        }
                    }
                    Ok(Some(m)) if m.channel() == crate::store::TEMPLATES_CHANNEL => {
                        templates.notify_one();
                    }
                    Ok(Some(m)) => {
                        let n = notifies.read().ok().and_then(|map| map.get(m.payload()).cloned());
                        if let Some(n) = n {
                            n.notify_one();
                        }
                    }
                    // The connection was lost; the next call reconnects. Claims in flight then
                    // may have committed unseen, and notifications may have been missed.
                    Ok(None) => {
                        warn!("LISTEN connection lost; reconnecting");
                        break;
                    }
                    Err(e) => {
                        warn!(error = %e, "LISTEN connection lost; reconnecting");
                        break;
                    }
                },
                () = stop.cancelled() => return,
            }
        }
    }
}
