//! The session watch: a pooler switched to transaction mode under this runtime is noticed within
//! a second or at the first statement it breaks (`store/connect/session.rs`); claims stop until the
//! session is found sound [`SOUND_IN_A_ROW`] times in a row.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::store::{Store, session};

/// How often the session is checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Sound checks in a row, after a lost session, before claiming resumes: a busy transaction
/// pooler may hand two connections two server connections by chance, not five times running.
const SOUND_IN_A_ROW: u32 = 5;

/// Check the session every [`CHECK_EVERY`] until `stop`: in every long-lived process (`up`,
/// `worker`, `serve`), so a mark set there is cleared once the session is sound again.
pub async fn watch(store: Store, stop: CancellationToken) {
    let mut sound = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        match store.session_shared().await {
            Ok(Some(pid)) => {
                sound = 0;
                if session::mark_lost() {
                    error!(
                        backend = pid,
                        "two of this runtime's connections share one server connection"
                    );
                }
            }
            Ok(None) => {
                if session::is_lost() {
                    sound += 1;
                    if sound >= SOUND_IN_A_ROW {
                        session::mark_sound();
                        sound = 0;
                    }
                }
            }
            Err(e) => {
                // A lost session was marked by the conversion; a server gone is the failover
                // watcher's and the pool's business.
                sound = 0;
                warn!(error = %e, "checking the database session failed");
            }
        }
    }
}

/// Wait while the session is lost, so a background loop writes nothing through a shared one;
/// `false` when `stop` came first.
pub(super) async fn until_sound(stop: &CancellationToken) -> bool {
    if !session::is_lost() {
        return true;
    }
    tokio::select! {
        () = session::sound() => true,
        () = stop.cancelled() => false,
    }
}
