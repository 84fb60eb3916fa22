//! The SQL engine lives in one place (migrations/engine) and is applied safely: once per
//! change, by one process at a time, however many start together.

use crate::support;

use std::collections::BTreeSet;

use workdo::store::db;

/// Names of the functions an engine file defines (`create or replace function workdo.NAME(`).
fn defined_in_engine_files() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, sql) in db::engine_files() {
        let lower = sql.to_lowercase();
        for (i, _) in lower.match_indices("function workdo.") {
            let rest = &lower[i + "function workdo.".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    names
}

#[tokio::test]
async fn every_function_is_defined_in_an_engine_file() {
    let t = support::db().await;
    let live: BTreeSet<String> = sqlx::query_scalar(
        "select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'workdo'",
    )
    .fetch_all(t.pool())
    .await
    .expect("functions")
    .into_iter()
    .collect();
    let defined = defined_in_engine_files();
    assert!(!live.is_empty());
    let missing: Vec<&String> = live.difference(&defined).collect();
    assert!(
        missing.is_empty(),
        "functions defined outside migrations/engine: {missing:?}"
    );
    // One definition each: no function is overloaded by a leftover signature.
    let overloads: Vec<String> = sqlx::query_scalar(
        "select p.proname::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'workdo' group by 1 having count(*) > 1",
    )
    .fetch_all(t.pool())
    .await
    .expect("overloads");
    assert!(overloads.is_empty(), "overloaded: {overloads:?}");
    let sha: String = sqlx::query_scalar("select sha256 from workdo.engine")
        .fetch_one(t.pool())
        .await
        .expect("the engine is recorded");
    assert_eq!(sha, db::engine_sha256());
}

#[tokio::test]
async fn migrating_again_changes_nothing() {
    let t = support::db().await;
    let before: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select applied_at from workdo.engine")
            .fetch_one(t.pool())
            .await
            .expect("applied_at");
    db::migrate(t.pool()).await.expect("migrate again");
    let after: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select applied_at from workdo.engine")
            .fetch_one(t.pool())
            .await
            .expect("applied_at");
    assert_eq!(before, after, "an unchanged engine is not applied again");
    // A changed engine (here: a different recorded hash) is applied again.
    sqlx::query("update workdo.engine set sha256 = 'old'")
        .execute(t.pool())
        .await
        .expect("pretend an older engine");
    db::migrate(t.pool())
        .await
        .expect("migrate a changed engine");
    let sha: String = sqlx::query_scalar("select sha256 from workdo.engine")
        .fetch_one(t.pool())
        .await
        .expect("sha");
    assert_eq!(sha, db::engine_sha256());
}

#[tokio::test]
async fn processes_starting_together_on_a_new_database_all_migrate_it() {
    let url = support::empty_db().await;
    // Four sessions at once (joined on this task: `migrate` borrows its connection in a way
    // that cannot be spawned; the database sees four concurrent sessions all the same).
    let one = || async {
        let pool = db::connect(&url, 2).await?;
        db::migrate(&pool).await?;
        pool.close().await;
        Ok::<(), db::DbError>(())
    };
    let (a, b, c, d) = tokio::join!(one(), one(), one(), one());
    for r in [a, b, c, d] {
        r.expect("every process migrates");
    }
    let pool = db::connect(&url, 1).await.expect("connect");
    let n: i64 = sqlx::query_scalar(
        "select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'workdo' and p.proname = 'apply'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(n, 1);
}

/// The engine files are the ones their version names: a change to `migrations/engine/` must
/// raise `ENGINE_VERSION` (and record the new hash), or binaries could not tell engines apart.
#[test]
fn the_engine_files_are_the_recorded_versions() {
    assert_eq!(
        db::engine_sha256(),
        db::ENGINE_SHA256,
        "migrations/engine changed: raise ENGINE_VERSION in store/connect/db.rs and set ENGINE_SHA256 to this hash"
    );
    const { assert!(db::ENGINE_COMPATIBLE_FROM <= db::ENGINE_VERSION) };
}

/// A rolling upgrade: a newer binary migrated the database. This (older) binary never applies
/// its engine over the newer one; it runs on it when the newer engine says it is compatible,
/// and otherwise refuses naming both versions.
#[tokio::test]
async fn an_older_binary_never_replaces_a_newer_engine() {
    let t = support::db().await;
    let newer = db::ENGINE_VERSION + 1;
    sqlx::query("update workdo.engine set sha256 = 'newer', version = $1, compatible_from = $2")
        .bind(newer)
        .bind(db::ENGINE_VERSION)
        .execute(t.pool())
        .await
        .expect("pretend a newer engine");
    db::migrate(t.pool())
        .await
        .expect("a compatible newer engine is run on");
    let sha: String = sqlx::query_scalar("select sha256 from workdo.engine")
        .fetch_one(t.pool())
        .await
        .expect("sha");
    assert_eq!(
        sha, "newer",
        "the older engine was applied over the newer one"
    );

    sqlx::query("update workdo.engine set compatible_from = $1")
        .bind(newer)
        .execute(t.pool())
        .await
        .expect("an incompatible newer engine");
    let e = db::migrate(t.pool())
        .await
        .expect_err("an incompatible newer engine is refused");
    let said = e.to_string();
    assert!(
        said.contains(&format!("version {newer}"))
            && said.contains(&format!("this binary's {}", db::ENGINE_VERSION)),
        "{said}"
    );
    let sha: String = sqlx::query_scalar("select sha256 from workdo.engine")
        .fetch_one(t.pool())
        .await
        .expect("sha");
    assert_eq!(sha, "newer");
}
