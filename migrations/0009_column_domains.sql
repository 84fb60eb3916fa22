-- Why: a table's CHECK constraints are read back from their stored form (stringToNode) and
-- planned on every execution of every statement that writes the table: counted with
-- bench/callgrind/run.sh, the twelve CHECKs of `steps` and `workflows` were 16% of the
-- instructions of a claim + completion at batch 1 (BENCHMARKS.md items 19 and 24), whether they
-- were twelve constraints or one. A domain's constraint is planned once per session (the type
-- cache) and checked only where a statement assigns the column. So the eight checks of one
-- column become domains with the same conditions; the four checks that tie columns together stay
-- table CHECKs. Counted the same way: 2,039k -> 1,828k instructions per claim + completion
-- (-10.3%), the claim 797k -> 723k. The invariants are unchanged: a value outside them is refused
-- by whatever statement writes it, the engine's or a person's.
--
-- Rows leave the database with the base types (Postgres describes a domain-typed column by its
-- base type), so clients see integer, text and jsonb as before. `workdo.claimed` carries the
-- domain-typed columns of a claim as they are, which PL/pgSQL's `return query` requires; the
-- one function that copies them into a table result, `workdo.apply_and_claim`, casts them back.

create domain workdo.count as integer check (value >= 0);
create domain workdo.positive as integer check (value >= 1);
-- A status is a built-in one or a custom name; the pattern admits every built-in status, so the
-- list changes nothing but the cost: the regular expression was 30% of inserting steps (starting
-- 2,000 nine-step workflows: 223 -> 159 ms, median of nine), and matching it is skipped for the
-- statuses the engine writes.
create domain workdo.status_name as text check (
    value in ('waiting', 'ready', 'started', 'completed', 'scheduled', 'retrying', 'error', 'skipped')
    or value ~ '^[A-Za-z][A-Za-z0-9 _.-]{0,63}$');
create domain workdo.workflow_status as text check (value in ('active', 'completed'));
create domain workdo.json_object as jsonb check (jsonb_typeof(value) = 'object');

alter table workdo.steps
    drop constraint steps_attempts_check,
    drop constraint steps_max_attempts_check,
    drop constraint steps_pending_check,
    drop constraint steps_status_check;
alter table workdo.steps
    alter column attempts type workdo.count,
    alter column pending type workdo.count,
    alter column max_attempts type workdo.positive,
    alter column status type workdo.status_name;

alter table workdo.workflows
    drop constraint workflows_context_check,
    drop constraint workflows_status_check,
    drop constraint workflows_unfinished_check,
    drop constraint workflows_version_check;
alter table workdo.workflows
    alter column context type workdo.json_object,
    alter column status type workdo.workflow_status,
    alter column unfinished type workdo.count,
    alter column version type workdo.positive;

alter type workdo.claimed
    alter attribute attempts type workdo.count,
    alter attribute max_attempts type workdo.positive,
    alter attribute context type workdo.json_object;

create or replace function workdo.apply_and_claim(
    bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], int[], bool[], uuid[],
    text[], jsonb[], text,
    p_template text, p_step text, p_lane text, p_limit bigint, p_owner text, p_lease_secs float8
) returns table (
    kind text, id bigint, workflow_id bigint, object_id text, template text, version integer,
    name text, old_status text, status text, lifecycle text, attempts integer, lane text,
    max_attempts integer, priority integer, lease_token uuid, lease_expires_at timestamptz,
    properties jsonb, context jsonb, trace_context text
)
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
    if cardinality($1) > 0 then
        return query
        select a.kind, a.id, a.workflow_id, a.object_id, a.template, a.version, a.name,
               a.old_status, a.status, a.lifecycle, a.attempts, null::text, null::int, null::int,
               null::uuid, null::timestamptz, null::jsonb, null::jsonb, null::text
          from workdo.apply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) a;
    end if;
    return query
    select 'claimed'::text, c.id, c.workflow_id, c.object_id, c.template, c.version, c.name,
           null::text, 'started'::text, null::text, c.attempts::int, c.lane, c.max_attempts::int,
           c.priority, c.lease_token, c.lease_expires_at, c.properties, c.context::jsonb,
           c.trace_context
      from workdo.claim(p_template, p_step, p_lane, p_limit, p_owner, p_lease_secs) c;
end
$$;
