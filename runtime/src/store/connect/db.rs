//! Connecting: `DATABASE_URL` when given, else the private embedded cluster; migrations.

use std::path::Path;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::pg::{Cluster, ClusterOptions, PgError};
pub use crate::store::connect::errors::DbError;
use crate::store::connect::hosts::{self, Hosts};
pub use crate::store::connect::redact::redact;

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// The engine's functions (`migrations/engine/`), applied after the versioned migrations in
/// this order, in one transaction, whenever their combined SHA-256 changes.
const ENGINE: &[(&str, &str)] = &[
    (
        "05_object_ids.sql",
        include_str!("../../../../migrations/engine/05_object_ids.sql"),
    ),
    (
        "10_claim.sql",
        include_str!("../../../../migrations/engine/10_claim.sql"),
    ),
    (
        "20_apply.sql",
        include_str!("../../../../migrations/engine/20_apply.sql"),
    ),
    (
        "30_templates.sql",
        include_str!("../../../../migrations/engine/30_templates.sql"),
    ),
    (
        "40_workflows.sql",
        include_str!("../../../../migrations/engine/40_workflows.sql"),
    ),
    (
        "50_prioritize.sql",
        include_str!("../../../../migrations/engine/50_prioritize.sql"),
    ),
    (
        "60_machines.sql",
        include_str!("../../../../migrations/engine/60_machines.sql"),
    ),
    (
        "70_counts.sql",
        include_str!("../../../../migrations/engine/70_counts.sql"),
    ),
    (
        "80_handoff.sql",
        include_str!("../../../../migrations/engine/80_handoff.sql"),
    ),
];

/// The engine's version: raised whenever a file in `migrations/engine/` changes (a test holds
/// [`ENGINE_SHA256`] to the files, so a change without a new version fails the suite).
pub const ENGINE_VERSION: i32 = 25;

/// The SHA-256 of the engine files of [`ENGINE_VERSION`] ([`engine_sha256`]).
pub const ENGINE_SHA256: &str = "5f4c653295aa65a6d798acc43ab410cc8e2f5afcf375b592778081190066dcc4";

/// The oldest engine version whose binaries still work on this engine (its functions keep the
/// signatures and meaning those binaries call them with). A binary older than this refuses to
/// run on it, naming both versions.
pub const ENGINE_COMPATIBLE_FROM: i32 = 15;

/// Key of the advisory lock that serialises migrating one database (any number of processes
/// may start at once on a new one).
const MIGRATE_LOCK: i64 = 0x776f_726b_646f_0001;

/// The engine files' combined SHA-256 (names and contents).
pub fn engine_sha256() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (name, sql) in ENGINE {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sql.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The names of the engine files, in the order they are applied.
pub fn engine_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    ENGINE.iter().copied()
}

/// Database name used on the embedded cluster.
pub const EMBEDDED_DATABASE: &str = "workdo";

/// Where the database is: the URL to use, and the embedded cluster when we started one.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub cluster: Option<Cluster>,
}

/// `url` when given; otherwise start (or reuse) the private cluster in `data_dir` and create its
/// `workdo` database.
///
/// # Errors
/// When no server binaries are installed, or the cluster cannot be started or reached.
pub async fn resolve(url: Option<&str>, data_dir: &Path) -> Result<Target, DbError> {
    if let Some(url) = url.filter(|u| !u.trim().is_empty()) {
        return Ok(Target {
            url: url.to_string(),
            cluster: None,
        });
    }
    let opts = ClusterOptions {
        dir: data_dir.to_path_buf(),
        ephemeral: false,
    };
    let cluster = tokio::task::spawn_blocking(move || Cluster::ensure(&opts))
        .await
        .map_err(|e| PgError::Command {
            what: "starting the embedded cluster".into(),
            detail: e.to_string(),
        })??;
    create_database(&cluster.url("postgres"), EMBEDDED_DATABASE).await?;
    Ok(Target {
        url: cluster.url(EMBEDDED_DATABASE),
        cluster: Some(cluster),
    })
}

/// Create `name` on the server behind `admin_url` unless it exists.
///
/// # Errors
/// When the server cannot be reached or refuses.
pub async fn create_database(admin_url: &str, name: &str) -> Result<(), DbError> {
    let (_, mut conn) = Hosts::parse(admin_url)?.pick(admin_url).await?;
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(&mut conn)
            .await?;
    if !exists {
        // Identifiers cannot be bound; the name is quoted as an identifier.
        let sql = format!("create database \"{}\"", name.replace('"', "\"\""));
        match sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
        {
            Ok(_) => {}
            // Lost a race with another process creating it: fine. Postgres says so with
            // 42P04 (duplicate_database) when the other creation has committed, and with
            // 23505 (unique_violation on pg_database's name index) when both are in flight.
            Err(sqlx::Error::Database(e))
                if matches!(e.code().as_deref(), Some("42P04") | Some("23505")) => {}
            Err(e) => return Err(e.into()),
        }
    }
    conn.close().await?;
    Ok(())
}

/// How long a pooled connection may sit idle and still be handed out without a ping.
const PING_AFTER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// When a pool pings a connection before handing it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ping {
    /// Every time (sqlx's rule): for API requests, whose clients do not retry, so a server
    /// that dropped a connection (a restart, a killed backend) costs a reconnect, not a 500.
    Always,
    /// Only after [`PING_AFTER_IDLE`] idle: for the runtime, whose every statement would
    /// otherwise pay a round trip more (claims, commits, signals). A server gone since fails
    /// the statement, which the runtime's callers retry (claims, the completers' back-off, the
    /// machine and alert loops), as they would had it gone just after a ping.
    AfterIdle,
}

/// Pool options for workdo's sessions: each new connection turns `jit` off (a claim whose cost
/// passes `jit_above_cost` would JIT-compile on every call) with a `SET` after connecting, not
/// with the `options` startup parameter, which poolers such as PgBouncer refuse.
pub fn pool_options(max_connections: u32, ping: Ping) -> PgPoolOptions {
    session_options(max_connections, false, ping, SESSION_SETTINGS.to_string())
}

/// What every workdo session sets after connecting.
const SESSION_SETTINGS: &str = "set jit = off";

/// How long an API request's statement may wait for a lock another session holds
/// (`lock_timeout`): past it the request is answered 503 with `Retry-After`, and nothing it
/// did is kept. A runtime holds a step's row for milliseconds; a lock held longer is an
/// operator's open transaction or a stuck client, which a caller should not wait behind.
pub const REQUEST_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one API request's statement may run (`statement_timeout`), then 503 as above. Bulk
/// actions of the page over 100,000 steps finish in seconds; a minute is far past any of them.
pub const REQUEST_STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// Pool options for API requests: [`pool_options`] with a ping before every use, and each
/// connection's `lock_timeout` and `statement_timeout` set to [`REQUEST_LOCK_TIMEOUT`] and
/// [`REQUEST_STATEMENT_TIMEOUT`] (with `SET`, which poolers pass on in session mode).
pub fn request_pool_options(max_connections: u32) -> PgPoolOptions {
    let settings = format!(
        "{SESSION_SETTINGS}; set lock_timeout = '{}ms'; set statement_timeout = '{}ms'",
        REQUEST_LOCK_TIMEOUT.as_millis(),
        REQUEST_STATEMENT_TIMEOUT.as_millis()
    );
    session_options(max_connections, false, Ping::Always, settings)
}

/// The pool's acquire and ping rules; each new connection runs `settings` (simple protocol, one
/// round trip), and when `writable`, a new connection to a server in recovery is refused (the
/// pool tries again, by then perhaps at the server [`hosts::follow`] found).
fn session_options(
    max_connections: u32,
    writable: bool,
    ping: Ping,
    settings: String,
) -> PgPoolOptions {
    // While the session is marked lost (a transaction pooler switched on under this process,
    // `session`), no idle connection is handed out again: each is closed when next asked for,
    // so no statement prepared on it is used again, and the pool opens new ones. (Checked on
    // the way out only: a released connection is idle until then, and a hook on every release
    // boxed a future per statement.)
    let options = PgPoolOptions::new().max_connections(max_connections);
    let options = match ping {
        Ping::Always => options
            .test_before_acquire(true)
            .before_acquire(|_conn, _meta| {
                Box::pin(async { Ok(!crate::store::connect::session::is_lost()) })
            }),
        Ping::AfterIdle => options
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if crate::store::connect::session::is_lost() {
                        return Ok(false);
                    }
                    if meta.idle_for >= PING_AFTER_IDLE {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            }),
    };
    options.after_connect(move |conn, _meta| {
        let settings = settings.clone();
        Box::pin(async move {
            if writable && hosts::read_only(&mut *conn).await? {
                return Err(sqlx::Error::Configuration(
                    "the server is read-only (in recovery); waiting for a writable one".into(),
                ));
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(settings))
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
    })
}

/// A pool for runtime sessions (see [`pool_options`]), with a recognisable application name.
///
/// `url` may name several hosts (`postgres://u@db1,db2/workdo?target_session_attrs=read-write`):
/// the first writable one is used, and followed when it goes ([`hosts`]). A transaction pooler
/// is refused with a message saying what to configure ([`DbError::TransactionPooler`]).
///
/// # Errors
/// When the URL is malformed or no server can be reached.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, DbError> {
    let hosts = Hosts::parse(url)?;
    // One connection first, to report why the server cannot be reached ("connection refused
    // at …") at once: the pool retries until its acquire timeout and then says only that it
    // timed out.
    let (i, mut probe) = hosts.pick(url).await?;
    refuse_transaction_pooler(url, &hosts.options[i], &mut probe).await?;
    let opts = hosts::session(hosts.options[i].clone());
    let pool = session_options(
        max_connections,
        hosts.followed(),
        Ping::AfterIdle,
        SESSION_SETTINGS.to_string(),
    )
    .acquire_timeout(Duration::from_secs(30))
    .connect_with(opts)
    .await
    .map_err(|source| DbError::Connect {
        url: redact(url),
        cause: source,
    })?;
    if hosts.followed() {
        tokio::spawn(hosts::follow(
            pool.clone(),
            hosts,
            url.to_string(),
            i,
            probe,
        ));
    } else {
        let _ = probe.close().await;
    }
    Ok(pool)
}

/// Refuse a transaction or statement pooler (PgBouncer's `pool_mode = transaction`): there,
/// two client sessions take turns on one server connection, which loses LISTEN, leaks advisory
/// locks and `SET`s between clients, and breaks prepared statements. Seen from here: with
/// `first` idle, a second session is handed the same backend. Simple-protocol queries only, so
/// the check itself works through any pooler.
async fn refuse_transaction_pooler(
    url: &str,
    opts: &PgConnectOptions,
    first: &mut sqlx::PgConnection,
) -> Result<(), DbError> {
    let mut second = match tokio::time::timeout(Duration::from_secs(10), opts.connect()).await {
        Ok(Ok(c)) => c,
        // The server has no room for a second session now: nothing to learn from it here, and
        // the pool says so soon enough if it stays that way.
        _ => return Ok(()),
    };
    let shared = crate::store::connect::session::shared_backend(first, &mut second, 2).await;
    let _ = second.close().await;
    match shared? {
        Some(pid) => Err(DbError::TransactionPooler {
            url: redact(url),
            pid,
        }),
        None => Ok(()),
    }
}

/// Drop `name` on the server behind `admin_url` if it exists, disconnecting its sessions.
///
/// # Errors
/// When the server cannot be reached or refuses.
pub async fn drop_database(admin_url: &str, name: &str) -> Result<(), DbError> {
    let pool = connect(admin_url, 1).await?;
    let sql = format!(
        "drop database if exists \"{}\" with (force)",
        name.replace('"', "\"\"")
    );
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await?;
    pool.close().await;
    Ok(())
}

/// Apply pending migrations. Their bookkeeping table lives in the `workdo` schema too.
///
/// # Errors
/// When a migration fails or an applied one was changed.
pub async fn migrate(pool: &PgPool) -> Result<(), DbError> {
    let mut conn = pool.acquire().await?;
    // One process at a time per database: `create schema if not exists` and the engine's
    // CREATE OR REPLACE both fail when two sessions run them at once.
    sqlx::query("select pg_advisory_lock($1)")
        .bind(MIGRATE_LOCK)
        .execute(&mut *conn)
        .await?;
    let result = migrate_locked(&mut conn).await;
    // The connection goes back to the pool: leave it as the others are.
    sqlx::query("reset search_path").execute(&mut *conn).await?;
    sqlx::query("select pg_advisory_unlock($1)")
        .bind(MIGRATE_LOCK)
        .execute(&mut *conn)
        .await?;
    result
}

async fn migrate_locked(conn: &mut sqlx::PgConnection) -> Result<(), DbError> {
    sqlx::query("create schema if not exists workdo")
        .execute(&mut *conn)
        .await?;
    sqlx::query("set search_path to workdo, public")
        .execute(&mut *conn)
        .await?;
    // A database a newer binary has migrated: run on it as it is when its engine says this
    // binary is compatible; never migrate or apply anything older over it.
    if let Some((recorded, compatible_from)) = recorded_engine(conn).await?
        && recorded > ENGINE_VERSION
    {
        if compatible_from <= ENGINE_VERSION {
            tracing::info!(
                recorded,
                ours = ENGINE_VERSION,
                "the database's engine is newer and compatible: running on it unchanged"
            );
            return Ok(());
        }
        return Err(DbError::EngineTooNew {
            recorded,
            ours: ENGINE_VERSION,
            compatible_from,
        });
    }
    MIGRATOR.run(&mut *conn).await?;
    apply_engine(conn).await
}

/// The engine version recorded in the database and the oldest it works with, once there is one
/// with a version (migration 0015 added the columns).
async fn recorded_engine(conn: &mut sqlx::PgConnection) -> Result<Option<(i32, i32)>, DbError> {
    let has_version: bool = sqlx::query_scalar(
        "select exists (select 1 from information_schema.columns
                         where table_schema = 'workdo' and table_name = 'engine'
                           and column_name = 'compatible_from')",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !has_version {
        return Ok(None);
    }
    Ok(
        sqlx::query_as("select version, compatible_from from workdo.engine")
            .fetch_optional(&mut *conn)
            .await?,
    )
}

/// Apply the engine files unless the recorded SHA-256 says they are applied already, in one
/// transaction (BEGIN and COMMIT as statements: `Connection::begin` on a borrowed connection
/// makes the future not `Send` for every lifetime, and callers spawn this).
async fn apply_engine(conn: &mut sqlx::PgConnection) -> Result<(), DbError> {
    let sha = engine_sha256();
    let applied: Option<String> = sqlx::query_scalar("select sha256 from workdo.engine")
        .fetch_optional(&mut *conn)
        .await?;
    if applied.as_deref() == Some(sha.as_str()) {
        return Ok(());
    }
    sqlx::raw_sql("begin").execute(&mut *conn).await?;
    let result = apply_engine_files(conn, &sha).await;
    let end = if result.is_ok() { "commit" } else { "rollback" };
    sqlx::raw_sql(end).execute(&mut *conn).await?;
    result
}

async fn apply_engine_files(conn: &mut sqlx::PgConnection, sha: &str) -> Result<(), DbError> {
    for (file, sql) in ENGINE {
        sqlx::raw_sql(*sql)
            .execute(&mut *conn)
            .await
            .map_err(|source| DbError::Engine { file, source })?;
    }
    sqlx::query(
        "insert into workdo.engine (sha256, version, compatible_from) values ($1, $2, $3)
         on conflict (one) do update set sha256 = excluded.sha256, version = excluded.version,
                compatible_from = excluded.compatible_from, applied_at = now()",
    )
    .bind(sha)
    .bind(ENGINE_VERSION)
    .bind(ENGINE_COMPATIBLE_FROM)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The same server's URL for another database (the path replaced, any query string kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn other_database_same_server() {
        assert_eq!(
            super::with_database("postgres://u@h:5/a?sslmode=disable", "b"),
            "postgres://u@h:5/b?sslmode=disable"
        );
        assert_eq!(
            super::with_database("postgres://u@h:5", "b"),
            "postgres://u@h:5/b"
        );
    }

    #[tokio::test]
    async fn an_unreachable_server_is_named_at_once() {
        // Port 1 on loopback: nothing listens there. The pool alone would retry for 30 s and
        // then say only "pool timed out".
        let err = super::connect("postgres://postgres@127.0.0.1:1/x", 2)
            .await
            .expect_err("nothing listens on port 1")
            .to_string();
        assert!(
            err.contains("127.0.0.1:1") && err.to_lowercase().contains("refused"),
            "{err}"
        );
    }
}
