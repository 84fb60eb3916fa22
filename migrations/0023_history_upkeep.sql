-- Keeping the hot tables and the history small (issue 47, "Disk and history"). The reasons and
-- the figures behind them: ARCHITECTURE.md, "Autovacuum on the hot tables".

-- `workdo archive --purge-archived-before D` deletes the archive's oldest rows first.
create index archive_archived on workdo.archive (archived_at);

-- steps: every step row is rewritten several times in a minute of work (ready, started,
-- completed) and few of those updates are HOT (its status is in the claim index). Postgres's
-- default waits until a fifth of the table is dead before vacuuming: on a table of a few
-- million rows that is hundreds of thousands of dead versions the claims' index scans walk past,
-- and a table about four times its live size. Vacuum at 2% dead instead, without the cost
-- delay that makes it lag behind a busy runtime. (Its fillfactor, 80, and the workflows', 50,
-- are migrations/0004's.)
alter table workdo.steps set (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- workflows: updated at each completion and by machines' transitions.
alter table workdo.workflows set (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- events: append-only, emptied by the archive; vacuumed after deletes at 5% so the space the
-- archive frees is reused rather than the file growing on.
alter table workdo.events set (
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.1
);

-- The inbox and the counts' deltas are written and emptied all day.
alter table workdo.signals set (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
alter table workdo.step_count_deltas set (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
