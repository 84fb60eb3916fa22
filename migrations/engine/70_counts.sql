-- Step counts per template, step and status, kept from what each statement changes (tables and
-- reasons in migrations/0014_step_counts.sql). Statement-level triggers on updates and deletes,
-- one per event (a trigger with transition tables serves one event), append each statement's net
-- change, grouped, to workdo.step_count_deltas; workdo.step_counts_rollup folds them into
-- workdo.step_counts and workdo.step_throughput.
--
-- Inserts are counted by the statements that make them (engine 22). The engine's inserts (a
-- start, a composition, a machine's call) set `workdo.steps_counted` for their transaction and
-- append their own deltas: a start knows its rows without reading them back, and a trigger with
-- a transition table makes Postgres copy every inserted row for it, used or not (a bulk start of
-- 18,000 steps: 91-97 ms with the counting trigger, 80-84 ms without it, 86-90 ms with it
-- skipped by a WHEN, the copy still paid; BENCHMARKS.md, stop 35). Any other insert (SQL by
-- hand, a workdo older than engine 22) leaves a `recount` mark, and the next fold counts the
-- active steps afresh: exact again, at the cost of one scan, for writes that are rare.

-- workdo.facet_name: the name a step is counted under. A generated step
-- (`generator/bricklet#n/step`, 0011) is counted under its bricklet step
-- (`generator/bricklet/step`), a machine's call (`call/f#n`) under `call/f`: one row however
-- many instances, so the overview does not grow with every instance; the page lists the
-- instances when asked.
CREATE OR REPLACE FUNCTION workdo.facet_name(p_name text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    select case when strpos(p_name, '#') = 0 then p_name
                else regexp_replace(p_name, '#[0-9]+(/|$)', '\1', 'g') end
$function$;

-- An insert that did not count itself (its trigger's WHEN, below): mark the counts for a recount.
CREATE OR REPLACE FUNCTION workdo.step_counts_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    insert into workdo.step_count_deltas (template, name, status, n, first_id)
    values ('', '', 'recount', 0, 0);
    return null;
end
$function$;

CREATE OR REPLACE FUNCTION workdo.step_counts_updated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    -- n counts active steps, moved all of them (throughput); a row that kept its template,
    -- step, status and activity cancels out (having).
    insert into workdo.step_count_deltas (template, name, status, n, moved, first_id, updated)
    select template, name, status, coalesce(sum(n) filter (where active), 0), sum(n), min(id),
           true
      from (select template, workdo.facet_name(name) as name, status, active, 1 as n, id from new_steps
            union all
            select template, workdo.facet_name(name), status, active, -1, id from old_steps) d
     group by template, name, status
    having coalesce(sum(n) filter (where active), 0) <> 0 or sum(n) <> 0;
    return null;
end
$function$;

CREATE OR REPLACE FUNCTION workdo.step_counts_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    insert into workdo.step_count_deltas (template, name, status, n, first_id)
    select template, workdo.facet_name(name), status, -count(*), min(id)
      from old_steps where active
     group by 1, 2, 3;
    return null;
end
$function$;

CREATE OR REPLACE FUNCTION workdo.step_counts_truncated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    delete from workdo.step_count_deltas;
    delete from workdo.step_counts;
    return null;
end
$function$;

CREATE OR REPLACE TRIGGER step_counts_inserted AFTER INSERT ON workdo.steps
    FOR EACH STATEMENT
    WHEN (current_setting('workdo.steps_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION workdo.step_counts_inserted();
CREATE OR REPLACE TRIGGER step_counts_updated AFTER UPDATE ON workdo.steps
    REFERENCING OLD TABLE AS old_steps NEW TABLE AS new_steps
    FOR EACH STATEMENT EXECUTE FUNCTION workdo.step_counts_updated();
CREATE OR REPLACE TRIGGER step_counts_deleted AFTER DELETE ON workdo.steps
    REFERENCING OLD TABLE AS old_steps
    FOR EACH STATEMENT EXECUTE FUNCTION workdo.step_counts_deleted();
CREATE OR REPLACE TRIGGER step_counts_truncated AFTER TRUNCATE ON workdo.steps
    FOR EACH STATEMENT EXECUTE FUNCTION workdo.step_counts_truncated();

-- workdo.step_counts_scan: the active steps counted by scanning them, as step_counts would hold
-- them: what a recount writes and what a reader counts while a recount mark waits.
CREATE OR REPLACE FUNCTION workdo.step_counts_scan()
 RETURNS TABLE(template text, name text, status text, n bigint, first_id bigint)
 LANGUAGE sql
 STABLE
AS $function$
    select s.template, workdo.facet_name(s.name), s.status, count(*), min(s.id)
      from workdo.steps s
     where s.active
     group by 1, 2, 3
$function$;

-- workdo.step_counts_rollup: fold the deltas committed so far into step_counts (dropping
-- counts that reach zero) and step_throughput; returns how many delta rows it folded, or
-- null when another session is folding (it does not wait). Throughput: within one UPDATE, a
-- positive net change of `completed` over all steps (`moved`) is that many completions, of
-- `retrying` or `error` that many failed attempts (a step leaves those statuses by other
-- statements). A `recount` mark (an insert that did not count itself) makes it count the
-- active steps afresh instead of adding the deltas to the counts: in the same statement, so the
-- deltas it takes and the steps it counts are of one snapshot (a change committed after that
-- snapshot left its delta for the next fold and is not in this count). A mark committed after
-- the check below stays for the next fold. With `p_recount` false (a reader's fold, which must
-- not scan `steps` on a request's time) marks are left for the maintenance loop's fold.
-- The signature without `p_recount` (engine 21 and before) goes in this same transaction; older
-- binaries' calls without it get the default.
DROP FUNCTION IF EXISTS workdo.step_counts_rollup();
CREATE OR REPLACE FUNCTION workdo.step_counts_rollup(p_recount boolean DEFAULT true)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
declare
    folded bigint;
    recount boolean;
begin
    if not pg_try_advisory_xact_lock(8606223218500370434) then
        return null;
    end if;
    recount := p_recount and exists (select 1 from workdo.step_count_deltas
                                      where template = '' and status = 'recount');
    with d as (
        delete from workdo.step_count_deltas
         where recount or not (template = '' and status = 'recount')
        returning *
    ),
    -- Scanned only for a recount (the condition is a one-time filter).
    fresh as (select * from workdo.step_counts_scan() where recount),
    gone as (
        delete from workdo.step_counts c
         where recount
           and not exists (select 1 from fresh f
                            where f.template = c.template and f.name = c.name and f.status = c.status)
    ),
    counted as (
        insert into workdo.step_counts as c (template, name, status, n, first_id)
        select template, name, status, sum(n), min(first_id)
          from d
         where not recount
         group by template, name, status
        union all
        select template, name, status, n, first_id from fresh
        on conflict (template, name, status) do update
           set n = case when recount then excluded.n else c.n + excluded.n end,
               first_id = case when recount then excluded.first_id
                               else least(c.first_id, excluded.first_id) end
    ),
    throughput as (
        insert into workdo.step_throughput as t (minute, template, name, completed, failed)
        select date_trunc('minute', at), template, name,
               coalesce(sum(moved) filter (where status = 'completed'), 0),
               coalesce(sum(moved) filter (where status in ('retrying', 'error', 'exception')), 0)
          from d
         where updated and moved > 0 and status in ('completed', 'retrying', 'error', 'exception')
         group by 1, 2, 3
        on conflict (minute, template, name) do update
           set completed = t.completed + excluded.completed,
               failed = t.failed + excluded.failed
    )
    select count(*) into folded from d;
    if folded > 0 then
        delete from workdo.step_counts where n = 0;
        delete from workdo.step_throughput where minute < now() - interval '2 days';
    end if;
    return folded;
end
$function$;

-- Counted afresh whenever this file set is applied, so that a database changed by an older
-- workdo (whose steps changed without these triggers) is exact again: a recount mark, folded now
-- (creating the triggers above locked `steps` against writes until this transaction commits).
-- When another session is folding, the mark waits for the next fold; readers count by a scan
-- meanwhile.
insert into workdo.step_count_deltas (template, name, status, n, first_id)
values ('', '', 'recount', 0, 0);
select workdo.step_counts_rollup();
