//! A session lost to a pooler while running: noticed, claims stopped, connections dropped,
//! and claiming resumed only once the session is sound again.
//!
//! `connect` refuses a transaction pooler ([`crate::store::db`]), but a pooler can be switched to
//! transaction mode (PgBouncer's `pool_mode`, and a `RELOAD`) under running processes. From
//! then on two client connections take turns on one server connection: sqlx's named prepared
//! statements (`sqlx_s_N`, numbered per client connection) land where another client made its
//! own under the same name, or where none exists. Postgres then answers "prepared statement
//! … does not exist", "… already exists" or "bind message supplies N parameters, but prepared
//! statement requires M", or runs one client's statement with another's parameters and sends a
//! row of the wrong shape.
//!
//! Any of those marks the session **lost**, process-wide ([`mark_lost`]). While it is lost:
//! - the pools close every connection they would hand out or take back, so nothing already
//!   prepared is used again;
//! - the runtime's workers claim nothing and its template reload changes no worker;
//! - the runtime's session watch (`runtime/session.rs`) checks the session again, from new
//!   connections, and clears the mark only after consecutive sound checks.
//!
//! A caller that met it gets [`crate::store::StoreError::SessionLost`], which says what to configure,
//! in place of the raw statement error.

use std::sync::OnceLock;

use tokio::sync::watch;

/// Whether a session of this process was found shared: one watch channel, its value the one
/// truth (a flag beside it could disagree with it for a moment), waking waiters on a change.
fn mark() -> &'static watch::Sender<bool> {
    static MARK: OnceLock<watch::Sender<bool>> = OnceLock::new();
    MARK.get_or_init(|| watch::Sender::new(false))
}

/// What is said when the session is lost: what happened and what to configure.
pub const LOST_SESSION: &str = "the database session is shared with another client: DATABASE_URL \
     now reaches a transaction (or statement) pooler, where prepared statements land on other \
     clients' server connections. workdo stopped claiming and dropped its connections; it needs a \
     session of its own (PgBouncer: pool_mode = session, then RELOAD)";

/// Whether `e` shows a session shared with another client: a named prepared statement missing,
/// already made, or made for other parameters, or a row that does not have the shape the
/// statement described.
pub fn shows_lost_session(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            let prepared = d.message().contains("prepared statement");
            match d.code().as_deref() {
                // invalid_sql_statement_name, duplicate_prepared_statement
                Some("26000" | "42P05") => true,
                // protocol_violation: "bind message supplies 7 parameters, but prepared
                // statement "sqlx_s_2" requires 1"
                Some("08P01") => prepared,
                _ => false,
            }
        }
        sqlx::Error::ColumnIndexOutOfBounds { .. } | sqlx::Error::ColumnNotFound(_) => true,
        _ => false,
    }
}

/// Mark the session lost (see the module's text); `true` when it was not marked before.
pub fn mark_lost() -> bool {
    let first = mark().send_if_modified(|lost| !std::mem::replace(lost, true));
    if first {
        tracing::error!("{LOST_SESSION}");
    }
    first
}

/// The session is sound again: claiming may resume.
pub fn mark_sound() {
    if mark().send_if_modified(|lost| std::mem::replace(lost, false)) {
        tracing::info!("the database session is its own again; claiming resumes");
    }
}

/// Whether the session is marked lost now.
pub fn is_lost() -> bool {
    *mark().borrow()
}

/// Returns once the session is not marked lost (at once when it is not).
pub async fn sound() {
    let mut rx = mark().subscribe();
    // `wait_for` fails only when the sender is gone, and it lives for the process.
    let _ = rx.wait_for(|lost| !*lost).await;
}

/// Returns once the session is marked lost.
pub async fn lost() {
    let mut rx = mark().subscribe();
    let _ = rx.wait_for(|lost| *lost).await;
}

/// Whether two sessions, both held, are served by one server connection: `times` comparisons
/// of their backends, `Some(pid)` at the first that is the same. Simple-protocol queries only,
/// so the check itself works through any pooler. Used at connect and by the session watch.
pub(crate) async fn shared_backend(
    a: &mut sqlx::PgConnection,
    b: &mut sqlx::PgConnection,
    times: usize,
) -> Result<Option<i32>, sqlx::Error> {
    async fn backend(conn: &mut sqlx::PgConnection) -> Result<i32, sqlx::Error> {
        use sqlx::Row;
        sqlx::raw_sql("select pg_backend_pid()")
            .fetch_one(conn)
            .await?
            .try_get::<i32, _>(0)
    }
    for _ in 0..times {
        let pid = backend(a).await?;
        if backend(b).await? == pid {
            return Ok(Some(pid));
        }
    }
    Ok(None)
}

/// How many times in a row two held connections are compared in one check.
const COMPARISONS: usize = 3;

impl crate::store::Store {
    /// Whether two of this store's connections, both held, are served by one server connection
    /// (a transaction pooler): `Some(backend pid)` when they are. Simple-protocol queries only,
    /// so the check itself works through any pooler; `None` also when the pool cannot give a
    /// second connection within a second (nothing to learn now).
    ///
    /// # Errors
    /// When the database cannot be reached.
    pub async fn session_shared(&self) -> crate::store::Result<Option<i32>> {
        let mut first = self.pool.acquire().await?;
        let second =
            tokio::time::timeout(std::time::Duration::from_secs(1), self.pool.acquire()).await;
        let Ok(second) = second else { return Ok(None) };
        let mut second = second?;
        Ok(shared_backend(&mut first, &mut second, COMPARISONS).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_row_shapes_show_a_lost_session_and_io_errors_do_not() {
        assert!(shows_lost_session(&sqlx::Error::ColumnIndexOutOfBounds {
            index: 3,
            len: 1
        }));
        assert!(shows_lost_session(&sqlx::Error::ColumnNotFound(
            "id".into()
        )));
        assert!(!shows_lost_session(&sqlx::Error::PoolTimedOut));
        assert!(!shows_lost_session(&sqlx::Error::RowNotFound));
    }
}
