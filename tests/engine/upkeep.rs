//! The hot tables vacuumed by the runtime itself when their dead rows pile up (decision 0037):
//! the store leaves a table below its threshold alone and vacuums one past it, a running
//! runtime does so unasked, a role that does not own the tables leaves them alone, and an
//! operator's `statement_timeout` cancels none of the vacuums.

use crate::support;

use std::time::Duration;

use support::engine::load_one_step;
use support::{TestDb, config, db, start, wait_until};
use workdo::store::StartRequest;

/// How many times `workdo.steps` was vacuumed by hand (autovacuum is counted apart).
async fn steps_vacuumed(t: &TestDb) -> i64 {
    sqlx::query_scalar(
        "select vacuum_count from pg_stat_user_tables where relid = 'workdo.steps'::regclass",
    )
    .fetch_one(&t.pool)
    .await
    .expect("vacuum count")
}

/// Run `statements`, each built at run time (names of roles and databases), on `pool`.
async fn run_all(pool: &sqlx::PgPool, statements: impl IntoIterator<Item = String>, what: &str) {
    for sql in statements {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .expect(what);
    }
}

/// One look of the store's hot-table vacuums with `share` and `floor`: the tables vacuumed.
async fn vacuums(t: &TestDb, share: f64, floor: i64) -> Vec<&'static str> {
    t.store
        .hot_tables_vacuum(share, floor)
        .await
        .expect("vacuum look")
}

/// 300 one-step workflows, then each step row rewritten once with a new priority (an indexed
/// column, so no update is HOT and no page pruning takes the dead versions out of the count):
/// 300 live rows and at least 300 dead. Autovacuum is off for the table, so that only the
/// vacuums under test can take them.
async fn dead_steps(t: &TestDb) {
    sqlx::query("alter table workdo.steps set (autovacuum_enabled = false)")
        .execute(&t.pool)
        .await
        .expect("autovacuum off for the table");
    load_one_step(&t.store).await;
    let objects: Vec<String> = (0..300).map(|i| format!("obj:vacuum{i}")).collect();
    let names: Vec<&str> = objects.iter().map(String::as_str).collect();
    t.store
        .workflow_start(&StartRequest::new("oneWF", &names))
        .await
        .expect("start");
    sqlx::query("update workdo.steps set priority = priority + 1")
        .execute(&t.pool)
        .await
        .expect("rewrite every step");
    // The server's statistics reach the table's counts within a second of the commit.
    wait_until(
        &t.pool,
        "select n_dead_tup >= 300 from pg_stat_user_tables
          where relid = 'workdo.steps'::regclass",
        30,
    )
    .await;
}

#[tokio::test]
async fn a_hot_table_is_vacuumed_past_its_threshold_and_not_before() {
    let t = db().await;
    dead_steps(&t).await;
    assert_eq!(steps_vacuumed(&t).await, 0);

    // Past the share (300 dead ≥ 0.5 × 300 live) but not the floor: left alone.
    let done = vacuums(&t, 0.5, 1_000_000).await;
    assert!(
        !done.contains(&"steps"),
        "vacuumed below the floor: {done:?}"
    );
    // Past the floor but not the share (300 dead < 2 × 300 live): left alone.
    let done = vacuums(&t, 2.0, 100).await;
    assert!(
        !done.contains(&"steps"),
        "vacuumed below the share: {done:?}"
    );
    assert_eq!(steps_vacuumed(&t).await, 0);

    // Past both: vacuumed, once.
    let done = vacuums(&t, 0.5, 100).await;
    assert!(done.contains(&"steps"), "not vacuumed past both: {done:?}");
    assert_eq!(steps_vacuumed(&t).await, 1);

    // The vacuum took the dead rows out of the count: the next look finds nothing to do.
    let done = vacuums(&t, 0.5, 100).await;
    assert!(!done.contains(&"steps"), "vacuumed twice: {done:?}");
    assert_eq!(steps_vacuumed(&t).await, 1);
}

#[tokio::test]
async fn a_running_runtime_vacuums_the_step_table_itself() {
    let t = db().await;
    dead_steps(&t).await;
    assert_eq!(steps_vacuumed(&t).await, 0);
    let mut cfg = config();
    cfg.maintenance_interval = Duration::from_millis(50);
    cfg.vacuum_dead = (0.5, 100);
    let running = start(&t.store, cfg).await;
    wait_until(
        &t.pool,
        "select vacuum_count >= 1 from pg_stat_user_tables
          where relid = 'workdo.steps'::regclass",
        30,
    )
    .await;
    running.stop().await;
}

#[tokio::test]
async fn a_role_that_does_not_own_the_tables_leaves_them_to_autovacuum() {
    let t = db().await;
    dead_steps(&t).await;
    // A login role of its own that may read the schema but owns nothing in it.
    let role = format!("workdo_not_owner_{}", std::process::id());
    let statements = [
        format!("drop role if exists {role}"),
        format!("create role {role} login password 'not-the-owner'"),
        format!("grant usage on schema workdo to {role}"),
    ];
    run_all(&t.pool, statements, "the role").await;
    let options: sqlx::postgres::PgConnectOptions = t.url.parse().expect("test URL");
    let pool = sqlx::PgPool::connect_with(options.username(&role).password("not-the-owner"))
        .await
        .expect("connect as the role");
    let store = workdo::store::Store::new(pool.clone());
    let hot = store
        .hot_tables_vacuum(0.5, 100)
        .await
        .expect("no error, only nothing done");
    let archived = store
        .archived_tables_vacuum()
        .await
        .expect("no error, only nothing done");
    pool.close().await;
    assert!(hot.is_empty(), "vacuumed tables it does not own: {hot:?}");
    assert!(
        archived.is_empty(),
        "vacuumed tables it does not own: {archived:?}"
    );
    assert_eq!(steps_vacuumed(&t).await, 0);
    let statements = [format!("drop owned by {role}"), format!("drop role {role}")];
    run_all(&t.pool, statements, "the role dropped").await;
    // The owner still can.
    let done = vacuums(&t, 0.5, 100).await;
    assert!(done.contains(&"steps"), "{done:?}");
}

#[tokio::test]
async fn an_operators_statement_timeout_does_not_cancel_the_vacuums() {
    let t = db().await;
    dead_steps(&t).await;
    let name: String = sqlx::query_scalar("select current_database()")
        .fetch_one(&t.pool)
        .await
        .expect("database");
    // An operator's timeout on the database, far shorter than any vacuum: every new connection
    // takes it.
    let timeout = format!("alter database \"{name}\" set statement_timeout = '1ms'");
    run_all(&t.pool, [timeout], "the operator's timeout").await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&t.url)
        .await
        .expect("a connection under the timeout");
    let timed_out = sqlx::query("select pg_sleep(0.1)").execute(&pool).await;
    let store = workdo::store::Store::new(pool.clone());
    let hot = store.hot_tables_vacuum(0.5, 100).await;
    let archived = store.archived_tables_vacuum().await;
    // The connection has its timeout back for whatever it runs next.
    let timed_out_after = sqlx::query("select pg_sleep(0.1)").execute(&pool).await;
    pool.close().await;
    let reset = format!("alter database \"{name}\" reset statement_timeout");
    run_all(&t.pool, [reset], "the timeout taken back").await;
    assert!(timed_out.is_err(), "the timeout was not in force");
    let hot = hot.expect("the vacuums were cancelled");
    assert!(hot.contains(&"steps"), "{hot:?}");
    assert_eq!(
        archived.expect("the archive's vacuums were cancelled"),
        vec!["events", "steps", "workflows"]
    );
    assert!(timed_out_after.is_err(), "the timeout was not put back");
    assert_eq!(steps_vacuumed(&t).await, 2);
}
