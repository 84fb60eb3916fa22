//! The overview's step counts against a scan of the steps, and the recount marks a statement
//! that did not count itself leaves (migrations/engine/70_counts.sql).

use sqlx::PgPool;
use workdo::store::Store;

/// Counts as the overview reads them, sorted.
pub async fn overview(store: &Store) -> Vec<(String, String, String, i64)> {
    let mut v: Vec<_> = store
        .facets(None)
        .await
        .expect("facets")
        .into_iter()
        .map(|f| (f.template, f.step, f.status, f.count))
        .collect();
    v.sort();
    v
}

/// Counts by scanning the steps, sorted.
pub async fn scanned(pool: &PgPool) -> Vec<(String, String, String, i64)> {
    sqlx::query_as(
        "select template, workdo.facet_name(name), status, count(*) from workdo.steps where active
          group by 1, 2, 3 order by 1, 2, 3",
    )
    .fetch_all(pool)
    .await
    .expect("count steps")
}

/// Recount marks waiting to be folded: a write of steps that did not count itself.
pub async fn marks(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from workdo.step_count_deltas where template = '' and status = 'recount'",
    )
    .fetch_one(pool)
    .await
    .expect("count marks")
}

/// Every write since the last fold counted itself (no recount mark), and the overview, read
/// from the counts and the deltas not yet folded, equals a scan.
pub async fn counted_by_their_statements(store: &Store, pool: &PgPool, after: &str) {
    assert_eq!(marks(pool).await, 0, "{after} left a recount mark");
    assert_eq!(overview(store).await, scanned(pool).await, "after {after}");
}
