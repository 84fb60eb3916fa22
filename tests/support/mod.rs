//! Test support: a real Postgres for every test, each test in a fresh database of its own.
//!
//! With `DATABASE_URL` set, databases are created on that server (the role needs CREATEDB).
//! Without it, each test binary starts one private cluster from the installed server binaries in a
//! temporary directory (fsync off: it is thrown away), and a watchdog process stops it and removes
//! the directory when the test binary exits, however it exits.

#![allow(dead_code)]

pub mod api;
pub mod browser;
pub mod counts;
pub mod engine;
pub mod machines;
pub mod openapi;
pub mod smtp;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use workdo::model::retry::Backoff;
use workdo::pg::{Cluster, ClusterOptions};
use workdo::runtime::{self, Config};
use workdo::store::db::{self, with_database};
use workdo::store::{Claimed, Store};

struct Server {
    /// URL of a database on the server to run CREATE DATABASE from.
    admin_url: String,
    /// A migrated database to copy for each test.
    template_db: String,
}

static SERVER: OnceCell<Server> = OnceCell::const_new();
static COUNTER: AtomicU32 = AtomicU32::new(0);

async fn server() -> &'static Server {
    SERVER
        .get_or_init(|| async {
            let admin_url = match std::env::var("DATABASE_URL") {
                Ok(url) if !url.trim().is_empty() => url,
                _ => start_private_cluster(),
            };
            drop_stale_databases(&admin_url).await;
            let template_db = format!("workdo_t_{}_template", std::process::id());
            db::create_database(&admin_url, &template_db)
                .await
                .expect("create the template database");
            let pool = db::connect(&with_database(&admin_url, &template_db), 2)
                .await
                .expect("connect to the template database");
            db::migrate(&pool)
                .await
                .expect("migrate the template database");
            pool.close().await;
            Server {
                admin_url,
                template_db,
            }
        })
        .await
}

fn start_private_cluster() -> String {
    let dir = tempfile::Builder::new()
        .prefix("workdo-test-pg-")
        .tempdir()
        .expect("create a temporary directory")
        .keep();
    let cluster = Cluster::ensure(&ClusterOptions {
        dir: dir.clone(),
        ephemeral: true,
    })
    .unwrap_or_else(|e| panic!("cannot start a private Postgres for the tests: {e}"));
    spawn_watchdog(&cluster, &dir);
    cluster.url("postgres")
}

/// A detached shell that waits for this process to end, then stops the cluster and removes it.
/// It is never waited for on purpose: it must outlive this process.
#[allow(clippy::zombie_processes)]
fn spawn_watchdog(cluster: &Cluster, dir: &Path) {
    use std::os::unix::process::CommandExt;
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.2; done; {stop} >/dev/null 2>&1; rm -rf '{dir}'",
        pid = std::process::id(),
        stop = cluster.stop_command(),
        dir = dir.display()
    );
    std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn the cluster watchdog");
}

/// Databases left by test processes that no longer run (only matters with DATABASE_URL).
async fn drop_stale_databases(admin_url: &str) {
    let Ok(pool) = db::connect(admin_url, 1).await else {
        return;
    };
    let names: Vec<String> =
        sqlx::query_scalar("select datname from pg_database where datname like 'workdo\\_t\\_%'")
            .fetch_all(&pool)
            .await
            .unwrap_or_default();
    for name in names {
        let pid = name.split('_').nth(2).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let sql = format!("drop database if exists \"{name}\" with (force)");
            let _ = sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await;
        }
    }
    pool.close().await;
}

/// A fresh, migrated database for one test.
pub struct TestDb {
    pub url: String,
    pub store: Store,
    /// The test's own connections, for reading and writing rows directly.
    pub pool: PgPool,
}

impl TestDb {
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// A database name no other test of any test process uses.
fn unique_name() -> String {
    format!(
        "workdo_t_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh database that nothing has migrated yet; its URL.
pub async fn empty_db() -> String {
    let server = server().await;
    let name = unique_name();
    db::create_database(&server.admin_url, &name)
        .await
        .expect("create an empty test database");
    with_database(&server.admin_url, &name)
}

pub async fn db() -> TestDb {
    // Every test that talks HTTPS or builds a client needs the crypto provider, whichever of a
    // binary's tests runs first (one without it failed only when it ran first).
    workdo::install_crypto();
    let server = server().await;
    let name = unique_name();
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&server.admin_url)
        .await
        .expect("connect to the test server");
    let sql = format!(
        "create database \"{name}\" template \"{}\"",
        server.template_db
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut conn)
        .await
        .expect("create the test database");
    let url = with_database(&server.admin_url, &name);
    let pool = db::connect(&url, 16)
        .await
        .expect("connect to the test database");
    TestDb {
        url,
        store: Store::new(pool.clone()),
        pool,
    }
}

/// Parse a template from text, failing the test on problems.
pub fn template(origin: &str, source: &str) -> workdo::model::template::Loaded {
    let format =
        workdo::model::template::Format::from_path(Path::new(origin)).expect("known extension");
    workdo::model::template::parse(origin, format, source).unwrap_or_else(|e| panic!("{e}"))
}

/// Load a template from text into the store.
pub async fn load(store: &Store, origin: &str, source: &str) {
    store
        .template_save(&template(origin, source))
        .await
        .expect("save template");
}

/// The kinds of an object's events for one step, oldest first.
pub async fn event_kinds(pool: &PgPool, object: &str, step: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select kind from workdo.events where object_id = $1 and step = $2 order by id",
    )
    .bind(object)
    .bind(step)
    .fetch_all(pool)
    .await
    .expect("events")
}

/// The repository's `workflows/` folder.
pub fn workflows_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../workflows")
}

/// googleScannedBookWF's shape from the WorkDo paper: bootstrap, fan-out, fan-in.
pub const GOOGLE_XML: &str = r#"<workflow-def id="googleScannedBookWF" repository="dor">
  <process name="register-object" status="completed" lifecycle="inprocess"/>
  <process name="descriptive-metadata"><prereq>register-object</prereq></process>
  <process name="google-convert"><prereq>descriptive-metadata</prereq></process>
  <process name="google-download"><prereq>descriptive-metadata</prereq></process>
  <process name="process-content"><prereq>google-convert</prereq><prereq>google-download</prereq></process>
  <process name="shelve" lifecycle="released"><prereq>process-content</prereq></process>
  <process name="publish" lifecycle="published"><prereq>process-content</prereq></process>
  <process name="sdr-ingest-transfer" lifecycle="archived"><prereq>shelve</prereq><prereq>publish</prereq></process>
  <process name="cleanup" lifecycle="accessioned"><prereq>sdr-ingest-transfer</prereq></process>
</workflow-def>
"#;

/// An executable shell script `name` in `dir` with `body`; its path, for a function's argv.
pub fn function_script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write the function script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

/// `workdo up --no-api` against the database at `url`, with `args` added, output discarded.
pub fn spawn_up(url: &str, args: &[&str]) -> std::process::Child {
    let mut all = vec!["up", "--no-api"];
    all.extend_from_slice(args);
    spawn_workdo(url, &all)
}

/// `workdo ARGS` against the database at `url`, in the repository's root (where templates name
/// their functions by relative paths), output discarded.
pub fn spawn_workdo(url: &str, args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_workdo"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "error")
        .current_dir(workflows_dir().join(".."))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn workdo")
}

/// A runtime's configuration for tests: short polls and back-offs.
pub fn config() -> Config {
    Config {
        poll_interval: Duration::from_millis(200),
        backoff: Backoff {
            base: Duration::from_millis(50),
            max: Duration::from_secs(1),
            jitter: 0.0,
        },
        grace: Duration::from_secs(5),
        ..Config::default()
    }
}

pub struct Running {
    pub token: CancellationToken,
    pub handle: JoinHandle<Result<(), runtime::WorkerError>>,
}

impl Running {
    pub async fn stop(self) {
        self.token.cancel();
        self.handle
            .await
            .expect("runtime task")
            .expect("runtime ran");
    }
}

pub async fn start(store: &Store, config: Config) -> Running {
    let bindings = runtime::bindings(store, &[]).await.expect("bindings");
    let token = CancellationToken::new();
    let handle = tokio::spawn(runtime::run(store.clone(), config, bindings, token.clone()));
    Running { token, handle }
}

/// Poll `sql` (a query returning one boolean) until it is true; fail after `secs`.
/// Wait (up to `secs`) until every workflow in the database is completed.
pub async fn all_completed(pool: &PgPool, secs: u64) {
    wait_until(
        pool,
        "select bool_and(status = 'completed') from workdo.workflows",
        secs,
    )
    .await;
}

pub async fn wait_until(pool: &PgPool, sql: &'static str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let done: bool = sqlx::query_scalar(sql)
            .fetch_one(pool)
            .await
            .expect("condition query");
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {sql}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The HTTP API (and the admin page) served on a loopback port of its own, in this process;
/// its base URL.
pub async fn serve_api(store: &Store, access: workdo::api::Access) -> String {
    workdo::install_crypto();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let state = workdo::api::AppState {
        store: store.clone(),
        access,
    };
    tokio::spawn(async move { axum::serve(listener, workdo::api::app(state)).await });
    base
}

/// Wait until `f` answers true, at most `secs` seconds, naming `what` when it does not.
pub async fn wait_for<F, Fut>(what: &str, secs: u64, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The number one query counts.
pub async fn count(pool: &sqlx::PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("count")
}

/// Put document `name` (`xml`) on `object`, registering it when new.
pub async fn put_document(t: &TestDb, object: &str, name: &str, xml: &str) {
    let mut docs = std::collections::BTreeMap::new();
    docs.insert(name.to_string(), xml.to_string());
    t.store
        .object_put(object, &Default::default(), &docs, "test")
        .await
        .expect("object");
}

/// The names of an object's generated steps (dynamic dispatch), sorted.
pub async fn generated_names(t: &TestDb, object: &str) -> Vec<String> {
    sqlx::query_scalar(
        "select name from workdo.steps where object_id = $1 and generated is not null order by name",
    )
    .bind(object)
    .fetch_all(t.pool())
    .await
    .expect("names")
}

/// An exec function (a script in `dir`) that completes every step.
pub fn completing_function(dir: &Path) -> String {
    function_script(
        dir,
        "ok.sh",
        "#!/bin/sh\ncat >/dev/null\necho '{\"status\":\"completed\"}'\n",
    )
}

/// The active step `name` of `object`, as a row.
pub async fn step(pool: &PgPool, object: &str, name: &str) -> workdo::store::StepRow {
    sqlx::query_as("select * from workdo.steps where object_id = $1 and name = $2 and active")
        .bind(object)
        .bind(name)
        .fetch_one(pool)
        .await
        .expect("step row")
}

/// lectureWF started on `druid` with the lecture document, observed and composed now (its
/// observer and generator run through the worker's path, nothing else): the subnet waits in
/// its queues.
pub async fn lecture_composed(t: &TestDb, druid: &str) {
    let file = workflows_dir().join("lectureWF.yaml");
    let loaded = workdo::cli::files::parse_file(&file).expect("lectureWF");
    t.store.template_save(&loaded).await.expect("saved");
    put_document(
        t,
        druid,
        "lecture",
        include_str!("../fixtures/documents/lecture.xml"),
    )
    .await;
    t.store
        .workflow_start(&workdo::store::StartRequest::new("lectureWF", &[druid]))
        .await
        .expect("start");
    let bindings = runtime::bindings(&t.store, &[]).await.expect("bindings");
    for step in ["get-docs", "feature-extraction"] {
        let b = bindings.iter().find(|b| b.step == step).expect("a binding");
        let ran = runtime::inject::run_now(&t.store, b, &config(), &[druid.to_string()])
            .await
            .expect("run");
        assert_eq!(ran.len(), 1, "{step} ran");
    }
}

/// An `<items>` document of `n` `<item/>` elements (tests/fixtures/seqWF.yaml observes them).
pub fn items_document(n: usize) -> String {
    format!("<items>{}</items>", "<item/>".repeat(n))
}

/// Run `step` of `object`'s workflow now, as `workdo run` does (claim, call, commit).
pub async fn run_step(t: &TestDb, object: &str, step: &str) {
    let bindings = workdo::runtime::bindings(&t.store, &[])
        .await
        .expect("bindings");
    let b = bindings.iter().find(|b| b.step == step).expect("binding");
    workdo::runtime::inject::run_now(&t.store, b, &config(), &[object.to_string()])
        .await
        .expect("run");
}

/// `step` of `object`'s `template` workflow, claimed as a worker claims it (a 10-minute lease).
pub async fn claim_step(t: &TestDb, template: &str, object: &str, step: &str) -> Claimed {
    let mut claimed = t
        .store
        .step_claim_objects(
            template,
            step,
            &[object.to_string()],
            "test",
            Duration::from_secs(600),
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "{step} of {object} claimed");
    claimed.remove(0)
}

/// What a worker commits for `claimed`: `status` (the event `event`) under its lease, with
/// `effects`.
pub fn result_for(
    claimed: &Claimed,
    status: workdo::model::status::Status,
    event: &'static str,
    effects: workdo::store::Effects,
) -> workdo::store::StepResult {
    let mut change = workdo::store::Change::new(claimed.id, status, event);
    change.lease = Some(claimed.lease_token);
    workdo::store::StepResult {
        change,
        object_id: claimed.object_id.clone(),
        workflow_id: claimed.workflow_id,
        effects,
    }
}

/// How many sessions of the test's database wait for a lock now.
pub async fn lock_waiters(pool: &PgPool) -> i64 {
    count(
        pool,
        "select count(*) from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock'",
    )
    .await
}

/// A process of a test's (a server it started, a `workdo up`), killed when dropped: at the
/// test's end or while a failed one unwinds.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
