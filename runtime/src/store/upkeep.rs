//! The hot tables vacuumed by the runtime itself when their dead row versions pile up faster
//! than autovacuum comes round, and by `workdo archive` after it deleted
//! ([0037](../../../docs/decisions/0037-the-runtime-vacuums-its-hot-tables.md)).

use crate::store::{Result, Store};

/// The tables a runtime rewrites all day, in name order, each with the one statement that
/// vacuums it: the statements are constants, so no name read back from the catalogue ever
/// becomes SQL.
const HOT_TABLES: [(&str, &str); 3] = [
    (
        "step_count_deltas",
        "vacuum (skip_locked) workdo.step_count_deltas",
    ),
    ("steps", "vacuum (skip_locked) workdo.steps"),
    ("workflows", "vacuum (skip_locked) workdo.workflows"),
];

/// What the archive deletes from, in name order, each with the statement that vacuums it. Not
/// `skip_locked`: an autovacuum already at the table gives way to it (Postgres cancels an
/// autovacuum that holds up another's lock), and a vacuum by another workdo is waited for, so
/// each table reported vacuumed was.
const ARCHIVED_TABLES: [(&str, &str); 3] = [
    ("events", "vacuum workdo.events"),
    ("steps", "vacuum workdo.steps"),
    ("workflows", "vacuum workdo.workflows"),
];

impl Store {
    /// Vacuum each hot table (`steps`, `step_count_deltas`, `workflows`) whose dead row
    /// versions, as the server's statistics last counted them, number at least `share` of its
    /// live rows and at least `floor`. A table another vacuum is at (autovacuum, or another
    /// workdo's) is left to it: not tried when `pg_stat_progress_vacuum` shows one, skipped
    /// (`skip_locked`) when one starts in between, so that many runtimes never queue up behind
    /// each other nor fill their logs with the server's notices. So is a table this role could
    /// not vacuum (it neither owns it nor is a member of its owner). Returns the tables
    /// vacuumed, in name order.
    pub async fn hot_tables_vacuum(&self, share: f64, floor: i64) -> Result<Vec<&'static str>> {
        self.vacuum(&HOT_TABLES, Some((share, floor))).await
    }

    /// Vacuum the tables `workdo archive` deletes from (`events`, `steps`, `workflows`), after
    /// it moved or purged workflows: the space their rows held is reusable at once, not
    /// after autovacuum's next look, so the next starts and events fill it instead of growing
    /// the files. A table this role could not vacuum is skipped. Returns the tables vacuumed.
    pub async fn archived_tables_vacuum(&self) -> Result<Vec<&'static str>> {
        self.vacuum(&ARCHIVED_TABLES, None).await
    }

    /// Vacuum those of `tables` this role may vacuum: with `dead_past` (share, floor), only
    /// those whose dead rows are past it and that no vacuum is at; without, all of them.
    async fn vacuum(
        &self,
        tables: &[(&'static str, &'static str)],
        dead_past: Option<(f64, i64)>,
    ) -> Result<Vec<&'static str>> {
        // One connection for the look and the vacuums, its `statement_timeout` lifted for
        // them: an operator's (set on the role or the database) would cancel a long vacuum of
        // a large table every time, and the work would be done again and again for nothing.
        let mut conn = self.pool.acquire().await?;
        sqlx::raw_sql("set statement_timeout = 0")
            .execute(&mut *conn)
            .await?;
        let done = Self::vacuum_on(&mut conn, tables, dead_past).await;
        let reset = sqlx::raw_sql("reset statement_timeout")
            .execute(&mut *conn)
            .await;
        let done = done?;
        reset?;
        Ok(done)
    }

    async fn vacuum_on(
        conn: &mut sqlx::PgConnection,
        tables: &[(&'static str, &'static str)],
        dead_past: Option<(f64, i64)>,
    ) -> Result<Vec<&'static str>> {
        let names: Vec<&str> = tables.iter().map(|(name, _)| *name).collect();
        let due: Vec<String> = sqlx::query_scalar(
            "select c.relname::text
               from pg_class c
               join pg_namespace n on n.oid = c.relnamespace
               left join pg_stat_user_tables s on s.relid = c.oid
              where n.nspname = 'workdo' and c.relname = any($1::text[])
                and pg_has_role(c.relowner, 'USAGE')
                and ($2::float8 is null
                     or (coalesce(s.n_dead_tup, 0)
                           >= greatest($3::bigint, $2 * coalesce(s.n_live_tup, 0))
                         and not exists (select 1 from pg_stat_progress_vacuum p
                                          where p.relid = c.oid)))",
        )
        .bind(&names)
        .bind(dead_past.map(|(share, _)| share))
        .bind(dead_past.map(|(_, floor)| floor))
        .fetch_all(&mut *conn)
        .await?;
        let mut done = Vec::with_capacity(due.len());
        for (name, statement) in tables {
            if due.iter().any(|d| d == name) {
                // VACUUM cannot run inside a transaction block: the simple protocol, one
                // statement, no transaction of ours around it.
                sqlx::raw_sql(*statement).execute(&mut *conn).await?;
                done.push(*name);
            }
        }
        Ok(done)
    }
}
