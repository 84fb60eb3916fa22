-- Why: the engine's functions were defined across migrations (workdo.apply four times, in 0004,
-- 0005, 0006 and 0007; claim, lease and apply_and_claim twice each): to read what a completion
-- does one replayed four files, and the largest duplicated regions of the project were these
-- copies. From here on every function in schema `workdo` is defined once, in
-- migrations/engine/*.sql, applied after the versioned migrations whenever those files change
-- (store/db.rs). This migration records which engine is applied, and drops what the engine
-- files no longer define or define with another signature:
--   * workdo.apply_and_claim (a batch's results and the next claim in one call): only the
--     bench and tests used it; the runtime commits through workdo.apply, and so does the
--     bench now, so that its figure describes the path users run.
--   * workdo.apply and workdo.apply_batch, whose parameters gain names (the runtime calls
--     them with named notation, so a mismatch fails loudly); CREATE OR REPLACE cannot rename
--     a parameter.

drop function workdo.apply_and_claim(
    bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], int[], bool[],
    uuid[], text[], jsonb[], text, text, text, text, bigint, text, float8);
drop function workdo.apply(
    bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], int[], bool[],
    uuid[], text[], jsonb[], text);
drop function workdo.apply_batch(
    bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], int[], bool[],
    uuid[], text[], jsonb[], text);

-- The engine files' combined SHA-256 when they were last applied (one row).
create table workdo.engine (
    one        boolean primary key default true check (one),
    sha256     text not null,
    applied_at timestamptz not null default now()
);
