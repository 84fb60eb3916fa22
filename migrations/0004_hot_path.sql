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

-- The claim, as functions so that their plans are made once per session. Called as a prepared
-- statement, the claim was planned afresh on every call (Postgres keeps custom plans when a
-- small LIMIT makes them look cheaper than the generic one), and planning cost as much as
-- running it. Inside these functions the plans are generic and cached; their shape does not
-- depend on the parameters (an index scan of steps_claim, then primary-key lookups).
--
-- workdo.lease: the steps `p_ids`, chosen and locked by the caller, become `started` under a
-- fresh lease for `p_owner`, with an attempt counted, and come back in `p_ids`' order with what
-- their function is given (object properties, workflow context, trace). The inputs are
-- primary-key lookups per row: as joins, the generic plan could merge-join the whole objects
-- table (measured: 98 ms at 1,000,000 objects). workdo.claim leases the head of a queue; task
-- injection (`workdo run`) leases the steps of named objects.
create type workdo.claimed as (
    id bigint, workflow_id bigint, object_id text, template text, name text, version integer,
    lane text, attempts integer, max_attempts integer, priority integer, lease_token uuid,
    lease_expires_at timestamptz, properties jsonb, context jsonb, trace_context text
);

create function workdo.lease(p_ids bigint[], p_owner text, p_lease_secs float8)
returns setof workdo.claimed
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
begin
    return query
    with leased as (
        update workdo.steps s set
            status = 'started',
            attempts = s.attempts + 1,
            lease_owner = p_owner,
            lease_token = gen_random_uuid(),
            lease_expires_at = now() + make_interval(secs => p_lease_secs),
            started_at = now(),
            updated_at = now()
         where s.id = any(p_ids)
        returning s.id, s.workflow_id, s.object_id, s.template, s.name, s.version, s.lane,
                  s.attempts, s.max_attempts, s.priority, s.lease_token, s.lease_expires_at,
                  (select o.properties from workdo.objects o where o.id = s.object_id) as properties,
                  (select w.context from workdo.workflows w where w.id = s.workflow_id) as context,
                  (select w.trace_context from workdo.workflows w where w.id = s.workflow_id)
                      as trace_context
    )
    select l.* from leased l order by array_position(p_ids, l.id);
end
$$;

-- Up to p_limit ready steps of p_template:p_step (of one lane, if given), highest priority
-- first, then longest ready, leased by workdo.lease.
create function workdo.claim(
    p_template text, p_step text, p_lane text, p_limit bigint, p_owner text, p_lease_secs float8
) returns setof workdo.claimed
language plpgsql
set plan_cache_mode = force_generic_plan
as $$
begin
    return query
    select * from workdo.lease(array(
        select c.id from workdo.steps c
         where c.template = p_template and c.name = p_step and c.status = 'ready' and c.active
           and (p_lane is null or c.lane = p_lane)
         order by c.priority desc, c.run_at, c.id
         limit p_limit
           for update skip locked), p_owner, p_lease_secs);
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
-- events that record all three and the milestones of completed steps. Same reason as
-- workdo.claim for being a function: as prepared statements these were re-planned on every call
-- (planning took 3–8x their run time for a batch of one); here they are planned once per
-- session, and their plans are joins on primary keys and (workflow_id, name) whatever the
-- parameters. Rows come back tagged `step`, `dependant` or `workflow`, in the order of their
-- events. $1–$11 are the changes (id, status, note, message, error text, lifecycle, elapsed,
-- due time, attempts delta, reset attempts, lease), $12 and $13 each change's event kind and
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
    dep workdo.applied[];
    wf workdo.applied[];
begin
    -- 1. The steps. `calc` decides each step's real new status: a step put back to waiting is
    --    ready at once when nothing holds it, or scheduled when not yet due. A change that
    --    names a lease applies only while the step is still started under it.
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
    ), changed as (
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
                  c.old_status, s.status, s.lifecycle, s.attempts
    )
    select coalesce(array_agg(row('step', u.id, u.workflow_id, u.object_id, u.template, u.version,
                                  u.name, u.old_status, u.status, u.lifecycle, u.attempts)::workdo.applied
                              order by array_position($1, u.id)), '{}')
      into st
      from changed u;
    if cardinality(st) = 0 then
        return;
    end if;

    -- 2. Steps that became finished (-1) or unfinished (+1): their dependants, found by
    --    (workflow_id, name ∈ prereqs), count down (or up) and become ready (or wait again).
    with f as (
        select s.workflow_id, s.name,
               case when s.status in ('completed', 'skipped') then -1 else 1 end as delta
          from unnest(st) s
         where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
    ), d as (
        select t.id, sum(f.delta)::int as delta, t.status as old_status
          from f join workdo.steps t on t.workflow_id = f.workflow_id and f.name = any(t.prereqs)
         group by t.id, t.status
    ), moved as (
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
        returning s.id, s.workflow_id, s.object_id, s.template, s.version, s.name, d.old_status, s.status
    )
    select coalesce(array_agg(row('dependant', null, u.workflow_id, u.object_id, u.template,
                                  u.version, u.name, u.old_status, u.status, null, null)::workdo.applied
                              order by u.id), '{}')
      into dep
      from moved u;

    -- 3. Their workflows: the unfinished-steps counter decides completion. The status before
    --    is derived: completed exactly when nothing was unfinished (CHECK above).
    with d as (
        select s.workflow_id as id,
               sum(case when s.status in ('completed', 'skipped') then -1 else 1 end)::int as delta
          from unnest(st) s
         where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
         group by s.workflow_id
    ), counted as (
        update workdo.workflows w set
            unfinished = w.unfinished + d.delta,
            status = case when w.unfinished + d.delta = 0 then 'completed' else 'active' end,
            completed_at = case when w.unfinished + d.delta = 0 then coalesce(w.completed_at, now()) end
          from d
         where w.id = d.id
        returning w.id, w.object_id, w.template, w.version,
                  case when w.unfinished - d.delta = 0 then 'completed' else 'active' end as old_status,
                  w.status
    )
    select coalesce(array_agg(row('workflow', u.id, u.id, u.object_id, u.template, u.version,
                                  null, u.old_status, u.status, null, null)::workdo.applied
                              order by u.id), '{}')
      into wf
      from counted u;

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
