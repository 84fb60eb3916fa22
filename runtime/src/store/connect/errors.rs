//! What goes wrong connecting and migrating, said once: a leaf both `db.rs` and `hosts.rs` use.

use crate::pg::PgError;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Embedded(#[from] PgError),
    #[error("invalid database URL: {0}")]
    Url(sqlx::Error),
    #[error("cannot connect to {url}: {}", reason(cause))]
    Connect { url: String, cause: sqlx::Error },
    #[error("invalid database URL: {0}")]
    BadUrl(String),
    #[error("cannot connect to {url}: {why}")]
    NoServer { url: String, why: String },
    #[error(
        "{url} is a transaction (or statement) pooler: two of workdo's sessions were given the same server connection (backend {pid}). workdo needs a session of its own (LISTEN, advisory locks, prepared statements); point DATABASE_URL at Postgres itself or at a pool in session mode (PgBouncer: pool_mode = session)"
    )]
    TransactionPooler { url: String, pid: i32 },
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("applying the engine file migrations/engine/{file} failed")]
    Engine {
        file: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error(
        "the database's engine is version {recorded}, newer than this binary's {ours}, and works only with binaries of engine version {compatible_from} or newer; upgrade this binary (the engine is never downgraded)"
    )]
    EngineTooNew {
        recorded: i32,
        ours: i32,
        compatible_from: i32,
    },
    #[error(transparent)]
    Sql(#[from] sqlx::Error),
}

/// What went wrong connecting, said once: an I/O error's own words ("Connection refused (os
/// error 111)") rather than sqlx's wrapper around them.
pub(crate) fn reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}
