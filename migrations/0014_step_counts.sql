-- Why: the overview (admin page, `workdo status`, GET /api/facets) grouped every active step by
-- template, step and status: with 1,000,008 steps the facets query took 140 ms, a parallel
-- sequential scan of `steps`, on every page load of every operator every 5 seconds. Counting
-- where the statuses move — a counter row per (template, step, status) updated by each
-- claim and completion — would make every worker's statement contend for the same few rows
-- (and deadlock when two batches touch them in different orders). Instead each statement that
-- changes steps appends what it changed, grouped, to `step_count_deltas` (statement-level
-- triggers with transition tables, in migrations/engine/70_counts.sql): appends never wait on
-- each other. `workdo.step_counts_rollup()` (the maintenance loop, and every reader first)
-- folds the deltas into `step_counts`; a reader adds counts and the deltas not yet folded, so
-- what it reads is exact at its snapshot. The same deltas give the throughput chart:
-- completions and failures per minute per template step (`step_throughput`), with no index on
-- the events table and no extra write per step.

-- Active steps per template, step and status; `first_id` (the lowest step id counted) orders
-- a template's steps as they were first created.
create table workdo.step_counts (
    template text   not null,
    name     text   not null,
    status   text   not null,
    n        bigint not null,
    first_id bigint not null,
    primary key (template, name, status)
);

-- What each statement changed, not yet folded into step_counts: n is the net change of active
-- steps in (template, name, status) by one statement at `at`, `moved` the same over all steps
-- (a superseded workflow's step that completes did work, though no count shows it), and
-- `updated` when the statement was an UPDATE (only those count as throughput: a step created
-- completed did no work); no index, so appends are cheap.
create table workdo.step_count_deltas (
    template text        not null,
    name     text        not null,
    status   text        not null,
    n        bigint      not null,
    moved    bigint      not null default 0,
    first_id bigint      not null,
    updated  boolean     not null default false,
    at       timestamptz not null default now()
);

-- Steps that entered `completed`, and that entered `retrying` or `error` (a failed attempt),
-- per minute, template and step; kept for two days.
create table workdo.step_throughput (
    minute    timestamptz not null,
    template  text        not null,
    name      text        not null,
    completed bigint      not null default 0,
    failed    bigint      not null default 0,
    primary key (minute, template, name)
);
