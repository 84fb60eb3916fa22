-- Why: every status change of a step is an UPDATE that Postgres cannot make HOT (status is in the
-- claim index's predicate), so it writes one entry into every index whose predicate the new row
-- satisfies. pg_stat_statements over `workdo bench` showed the claim and the completion each
-- costing ~3x the yardstick's statements, with 4–5 index entries per change against its one.
-- This migration keeps only the indexes the hot path needs and makes the ones the admin side
-- needs partial, so that a claim (ready → started) and a completion (started → completed) write
-- 3 and 2 index entries instead of 5 and 4:
--   * steps_object (object_id, template, name) goes: per-object lookups go through
--     workflows (object_id, template, version) and then steps (workflow_id, name).
--   * steps_template_status (all statuses) becomes steps_open, covering only the statuses the
--     queue queries look for besides ready (waiting, error, and the rest a robot may set);
--     ready steps are found through steps_claim. Facet counts over all statuses scan the table.
--   * events_workflow goes: a workflow's events are its object's events (events_object).
-- Workflows get room on each page (fillfactor) so the unfinished-steps counter, which no index
-- covers, is updated in place (HOT) as each step finishes; steps likewise for the prerequisite
-- counter of fan-in steps.

drop index workdo.steps_object;
drop index workdo.steps_template_status;
create index steps_open on workdo.steps (template, name, status)
    where active and status not in ('ready', 'started', 'completed', 'skipped');
drop index workdo.events_workflow;

alter table workdo.workflows set (fillfactor = 50);
alter table workdo.steps set (fillfactor = 80);

-- A workflow is completed exactly when none of its steps is unfinished; the completion update
-- relies on it to know the status before the change without locking the row twice.
alter table workdo.workflows add constraint workflows_completed_when_finished
    check ((status = 'completed') = (unfinished = 0));

-- The claim, as a function so that its plan is made once per session. Called as a prepared
-- statement, the claim was planned afresh on every call (Postgres keeps custom plans when a
-- small LIMIT makes them look cheaper than the generic one), and planning cost as much as
-- running it. Inside this function the plan is generic and cached; its shape does not depend on
-- the parameters (an index scan of steps_claim, then primary-key lookups), so nothing is lost.
create function workdo.claim(
    p_template text, p_step text, p_lane text, p_limit bigint, p_owner text, p_lease_secs float8
) returns table (
    id bigint, workflow_id bigint, object_id text, template text, name text, version integer,
    lane text, attempts integer, max_attempts integer, priority integer, lease_token uuid,
    lease_expires_at timestamptz, properties jsonb, context jsonb, trace_context text
)
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
begin
    -- In claim order: highest priority first, then longest ready.
    return query
    with claimed as (
        update workdo.steps s set
            status = 'started',
            attempts = s.attempts + 1,
            lease_owner = p_owner,
            lease_token = gen_random_uuid(),
            lease_expires_at = now() + make_interval(secs => p_lease_secs),
            started_at = now(),
            updated_at = now()
         where s.id = any(array(
                  select c.id from workdo.steps c
                   where c.template = p_template and c.name = p_step and c.status = 'ready' and c.active
                     and (p_lane is null or c.lane = p_lane)
                   order by c.priority desc, c.run_at, c.id
                   limit p_limit
                     for update skip locked))
        -- Inputs by primary-key lookups per claimed row: as joins, the generic plan could
        -- merge-join the whole objects table (measured: 98 ms at 1,000,000 objects).
        returning s.id, s.workflow_id, s.object_id, s.template, s.name, s.version, s.lane,
                  s.attempts, s.max_attempts, s.priority, s.lease_token, s.lease_expires_at,
                  (select o.properties from workdo.objects o where o.id = s.object_id) as properties,
                  (select w.context from workdo.workflows w where w.id = s.workflow_id) as context,
                  (select w.trace_context from workdo.workflows w where w.id = s.workflow_id)
                      as trace_context,
                  s.run_at
    )
    select c.id, c.workflow_id, c.object_id, c.template, c.name, c.version, c.lane, c.attempts,
           c.max_attempts, c.priority, c.lease_token, c.lease_expires_at, c.properties, c.context,
           c.trace_context
      from claimed c
     order by c.priority desc, c.run_at, c.id;
end
$$;

-- The three statements of a status-change batch, run by workdo.apply below: the steps
-- themselves, their dependants, their workflows. Same reason as workdo.claim: as prepared
-- statements they were re-planned on every call (planning took 3–8x their run time for a batch
-- of one); as functions they are planned once per session. Their plans are joins on primary
-- keys and (workflow_id, name), whatever the parameters. Parameters are positional ($1…), as in
-- the statements they replace; `#variable_conflict use_column` lets the SQL keep its column names.
create function workdo.apply_steps(
    bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], int[], bool[], uuid[]
) returns table (
    id bigint, workflow_id bigint, object_id text, template text, version integer, name text,
    old_status text, status text, lifecycle text, attempts integer
)
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
    return query
    with input as (
        select * from unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::float8[], $8::timestamptz[], $9::int[],
                             $10::bool[], $11::uuid[])
            as t(id, status, note, message, etext, lifecycle, elapsed, run_at, add_attempts,
                 reset, lease)
     ), calc as (
        select s.id, s.status as old_status, i.note, i.message, i.etext, i.lifecycle,
               i.elapsed, i.add_attempts, i.reset,
               case
                 when i.status in ('waiting', 'ready', 'scheduled') and s.pending > 0 then 'waiting'
                 when i.status in ('waiting', 'ready', 'scheduled')
                      and coalesce(i.run_at, w.start_at) > now() then 'scheduled'
                 when i.status in ('waiting', 'ready', 'scheduled') then 'ready'
                 else i.status
               end as new_status,
               coalesce(i.run_at, w.start_at) as due
          from workdo.steps s
          join input i on i.id = s.id
          join workdo.workflows w on w.id = s.workflow_id
         where i.lease is null or (s.status = 'started' and s.lease_token = i.lease)
           for update of s
     )
     update workdo.steps s set
        status = c.new_status,
        run_at = case
                   when c.new_status = 'ready' and c.old_status <> 'ready' then now()
                   when c.new_status in ('scheduled', 'retrying') then c.due
                   else s.run_at
                 end,
        note = coalesce(c.note, s.note),
        error_message = case
                          when c.new_status in ('error', 'retrying') then coalesce(c.message, s.error_message)
                          when c.new_status in ('completed', 'skipped', 'waiting', 'ready', 'scheduled') then null
                          else coalesce(c.message, s.error_message)
                        end,
        error_text = case
                       when c.new_status in ('error', 'retrying') then coalesce(c.etext, s.error_text)
                       when c.new_status in ('completed', 'skipped', 'waiting', 'ready', 'scheduled') then null
                       else coalesce(c.etext, s.error_text)
                     end,
        lifecycle = coalesce(c.lifecycle, s.lifecycle),
        elapsed = coalesce(c.elapsed,
                           case when c.new_status in ('completed', 'skipped', 'error', 'retrying')
                                     and s.started_at is not null and c.old_status = 'started'
                                then extract(epoch from clock_timestamp() - s.started_at)::float8 end,
                           s.elapsed),
        attempts = greatest(0, case when c.reset then 0 else s.attempts end + c.add_attempts),
        lease_owner = case when c.new_status = 'started' then s.lease_owner end,
        lease_token = case when c.new_status = 'started' then s.lease_token end,
        lease_expires_at = case when c.new_status = 'started' then s.lease_expires_at end,
        started_at = case when c.new_status = 'started' and c.old_status <> 'started' then now()
                          else s.started_at end,
        finished_at = case
                        when c.new_status in ('completed', 'skipped')
                          then case when c.old_status in ('completed', 'skipped')
                                    then s.finished_at else now() end
                      end,
        updated_at = now()
       from calc c
      where s.id = c.id
     returning s.id, s.workflow_id, s.object_id, s.template, s.version, s.name,
               c.old_status, s.status, s.lifecycle, s.attempts;
end
$$;

create function workdo.apply_dependants(bigint[], text[], int[])
returns table (
    workflow_id bigint, object_id text, template text, version integer, name text,
    old_status text, status text
)
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
    return query
    with f as (
            select * from unnest($1::bigint[], $2::text[], $3::int[]) as f(workflow_id, name, delta)
         ), d as (
            select s.id, sum(f.delta)::int as delta, s.status as old_status
              from f join workdo.steps s
                on s.workflow_id = f.workflow_id and f.name = any(s.prereqs)
             group by s.id, s.status
         )
         update workdo.steps s set
            pending = s.pending + d.delta,
            status = case
                       when s.status = 'waiting' and s.pending + d.delta = 0
                         then case when w.start_at > now() then 'scheduled' else 'ready' end
                       when s.status in ('ready', 'scheduled') and s.pending + d.delta > 0
                         then 'waiting'
                       else s.status
                     end,
            run_at = case
                       when s.status = 'waiting' and s.pending + d.delta = 0
                         then greatest(now(), w.start_at)
                       else s.run_at
                     end,
            updated_at = now()
           from d, workdo.workflows w
          where s.id = d.id and w.id = s.workflow_id
         returning s.workflow_id, s.object_id, s.template, s.version, s.name, d.old_status, s.status;
end
$$;

create function workdo.apply_workflows(bigint[], int[])
returns table (
    id bigint, object_id text, template text, version integer, old_status text, status text
)
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
    return query
    with d as (select * from unnest($1::bigint[], $2::int[]) as d(id, delta))
         update workdo.workflows w set
            unfinished = w.unfinished + d.delta,
            status = case when w.unfinished + d.delta = 0 then 'completed' else 'active' end,
            completed_at = case when w.unfinished + d.delta = 0 then coalesce(w.completed_at, now()) end
           from d
          where w.id = d.id
         returning w.id, w.object_id, w.template, w.version,
                   -- the status before: completed exactly when nothing was unfinished
                   case when w.unfinished - d.delta = 0 then 'completed' else 'active' end,
                   w.status;
end
$$;

-- Starting workflows in bulk spent 30% of the steps INSERT in the foreign-key check of each step
-- row against its workflow (EXPLAIN ANALYZE: 114 ms of 384 ms for 36,000 steps). Steps are only
-- ever inserted by the store, in the transaction and statement sequence that inserts their
-- workflow, so the per-row check guards nothing the code does not; what the key also gave —
-- deleting a workflow (or its object) deletes its steps — is kept by a statement-level trigger.
alter table workdo.steps drop constraint steps_workflow_id_fkey;

create function workdo.delete_steps_of_deleted_workflows() returns trigger
language plpgsql as $$
begin
    delete from workdo.steps s using deleted d where s.workflow_id = d.id;
    return null;
end
$$;

create trigger workflows_delete_steps
    after delete on workdo.workflows
    referencing old table as deleted
    for each statement execute function workdo.delete_steps_of_deleted_workflows();

-- A status-change batch in one round trip: the steps, then — for the steps that became
-- finished or unfinished — their dependants' counters and their workflows' counters, with the
-- events that record all three and the milestones of completed steps, written by the same
-- call. Rows come back tagged `step`, `dependant` or `workflow`, in the order of their events.
-- $1–$11 are the changes (as for workdo.apply_steps), $12 and $13 each change's event kind and
-- detail, $14 the actor.
create type workdo.applied as (
    kind text, id bigint, workflow_id bigint, object_id text, template text, version integer,
    name text, old_status text, status text, lifecycle text, attempts integer
);

create function workdo.apply(
    bigint[], text[], text[], text[], text[], text[], float8[], timestamptz[], int[], bool[], uuid[],
    text[], jsonb[], text
) returns setof workdo.applied
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
declare
    st workdo.applied[];
    dep workdo.applied[] := '{}';
    wf workdo.applied[] := '{}';
    wf_ids bigint[];
    wf_deltas int[];
begin
    select coalesce(array_agg(row('step', a.id, a.workflow_id, a.object_id, a.template, a.version,
                                  a.name, a.old_status, a.status, a.lifecycle, a.attempts)::workdo.applied
                              order by a.n), '{}')
      into st
      from workdo.apply_steps($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
           with ordinality as a(id, workflow_id, object_id, template, version, name, old_status,
                                status, lifecycle, attempts, n);
    if cardinality(st) = 0 then
        return;
    end if;

    -- Steps that became finished (-1) or unfinished (+1) move their dependants and workflows.
    select array_agg(f.wf order by f.wf), array_agg(f.delta order by f.wf)
      into wf_ids, wf_deltas
      from (select s.workflow_id as wf,
                   sum(case when s.status in ('completed', 'skipped') then -1 else 1 end)::int as delta
              from unnest(st) s
             where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
             group by s.workflow_id) f;
    if wf_ids is not null then
        select coalesce(array_agg(row('dependant', null, d.workflow_id, d.object_id, d.template,
                                      d.version, d.name, d.old_status, d.status, null, null)::workdo.applied), '{}')
          into dep
          from workdo.apply_dependants(
                 array(select s.workflow_id from unnest(st) with ordinality s
                        where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
                        order by s.ordinality),
                 array(select s.name from unnest(st) with ordinality s
                        where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
                        order by s.ordinality),
                 array(select case when s.status in ('completed', 'skipped') then -1 else 1 end
                         from unnest(st) with ordinality s
                        where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
                        order by s.ordinality)) d;
        select coalesce(array_agg(row('workflow', w.id, w.id, w.object_id, w.template, w.version,
                                      null, w.old_status, w.status, null, null)::workdo.applied), '{}')
          into wf
          from workdo.apply_workflows(wf_ids, wf_deltas) w;
    end if;

    insert into workdo.milestones (object_id, version, name, workflow_id)
    select s.object_id, s.version, s.lifecycle, s.workflow_id
      from unnest(st) with ordinality s
     where s.status = 'completed' and s.old_status <> 'completed' and s.lifecycle is not null
     order by s.ordinality;

    insert into workdo.events
        (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
    select e.object_id, e.workflow_id, e.template, e.version, e.step, e.kind, e.status, e.attempt,
           $14, e.detail
      from (
        select 1 as g, s.ordinality as n, s.object_id, s.workflow_id, s.template, s.version,
               s.name as step, i.ev as kind, s.status, s.attempts as attempt,
               coalesce(case when jsonb_typeof(i.detail) = 'object' then i.detail end, '{}'::jsonb)
                 || jsonb_build_object('from', s.old_status)
                 || jsonb_strip_nulls(jsonb_build_object('message', i.message, 'note', i.note,
                                                         'run_at', i.due)) as detail
          from unnest(st) with ordinality s
          join unnest($1, $12, $13, $3, $4, $8) as i(id, ev, detail, note, message, due)
            on i.id = s.id
        union all
        select 2, d.ordinality, d.object_id, d.workflow_id, d.template, d.version, d.name,
               'prerequisites', d.status, null, jsonb_build_object('from', d.old_status)
          from unnest(dep) with ordinality d
         where d.old_status <> d.status
        union all
        select 3, w.ordinality, w.object_id, w.workflow_id, w.template, w.version, null,
               case when w.status = 'completed' then 'workflow_completed' else 'workflow_reopened' end,
               w.status, null, null
          from unnest(wf) with ordinality w
         where w.old_status <> w.status
      ) e
     order by e.g, e.n;

    return query
    select * from unnest(st)
    union all
    select * from unnest(dep)
    union all
    select * from unnest(wf);
end
$$;
