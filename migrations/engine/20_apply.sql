-- The current SQL engine: every function in schema `workdo`, in one place. These files are
-- applied after the versioned migrations, in file-name order, in one transaction, whenever
-- their combined SHA-256 differs from the one recorded in `workdo.engine` (store/db.rs). A
-- function changes here, in place; a versioned migration only drops a signature that changes
-- (Postgres cannot rename a parameter with CREATE OR REPLACE). Reasons with their numbers
-- are in ARCHITECTURE.md ("Decisions") and in the migration that first measured them.

-- workdo.apply: a batch of status changes with every consequence — dependants' readiness
-- (counters through workdo.edges), workflow counters and completion, milestones, events, the
-- alert outbox and NOTIFY — in one statement, so it is atomic with or without a transaction
-- around it. One completion under lease goes to workdo.complete_one (statements on scalars:
-- -20% instructions per batch-1 step, migrations/0007); anything else to workdo.apply_batch.
-- Parameters are named: the runtime calls it with named notation, so a mismatch between
-- store/steps.rs and this file fails at the first call instead of binding a value to the
-- wrong column.
CREATE OR REPLACE FUNCTION workdo.apply(
    p_ids bigint[],
    p_statuses text[],
    p_notes text[],
    p_messages text[],
    p_texts text[],
    p_lifecycles text[],
    p_elapsed double precision[],
    p_due timestamp with time zone[],
    p_attempts integer[],
    p_reset boolean[],
    p_leases uuid[],
    p_events text[],
    p_details jsonb[],
    p_actor text
)
 RETURNS SETOF workdo.applied
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
begin
    if cardinality($1) = 1 and $2[1] = 'completed' and $11[1] is not null then
        return query
        select * from workdo.complete_one($1[1], $3[1], $4[1], $6[1], $7[1], $8[1], $9[1], $10[1],
                                          $11[1], $12[1], $13[1], $14);
    else
        return query
        select * from workdo.apply_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);
    end if;
end
$function$;

-- workdo.apply_batch: the general path. Completions under lease are one UPDATE whose WHERE
-- checks the lease, re-evaluated on the row's latest version (migrations/0006: 3.0 of 6.5 ms
-- per 100 completions went to locking and deciding before); other changes lock their steps
-- and decide their status from the workflow's template version.
CREATE OR REPLACE FUNCTION workdo.apply_batch(
    p_ids bigint[],
    p_statuses text[],
    p_notes text[],
    p_messages text[],
    p_texts text[],
    p_lifecycles text[],
    p_elapsed double precision[],
    p_due timestamp with time zone[],
    p_attempts integer[],
    p_reset boolean[],
    p_leases uuid[],
    p_events text[],
    p_details jsonb[],
    p_actor text
)
 RETURNS SETOF workdo.applied
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
    st workdo.applied[];
    dep workdo.applied[] := '{}';
    wf workdo.applied[] := '{}';
    ch workdo.applied;
    finishing boolean := false;
    milestone boolean := false;
    erring boolean := false;
    readying boolean := false;
begin
    -- 1. The steps. The common case first: every change is a worker's completion under its
    --    lease. The lease condition alone decides it (the step is started under that lease, so
    --    it was `started`), and a plain UPDATE re-checks it against the row's latest version,
    --    so the general path's lock-then-update (a WAL record and a join more per step) is
    --    not needed. Both paths give the same rows.
    if $2 <@ array['completed']::text[] and array_position($11, null) is null then
        -- In id order (the update's nested loop reads `input` in its order), whatever order the
        -- caller gives: every commit locks steps in id order (ARCHITECTURE.md, lock order).
        with input as materialized (
            select * from unnest($1::bigint[], $3::text[], $6::text[], $7::float8[], $9::int[],
                                 $10::bool[], $11::uuid[])
                as t(id, note, lifecycle, elapsed, add_attempts, reset, lease)
             order by t.id
        ), changed as (
            update workdo.steps s set
                status = 'completed',
                note = coalesce(i.note, s.note),
                error_message = null,
                error_text = null,
                lifecycle = coalesce(i.lifecycle, s.lifecycle),
                elapsed = coalesce(i.elapsed,
                                   case when s.started_at is not null
                                        then extract(epoch from clock_timestamp() - s.started_at)::float8 end,
                                   s.elapsed),
                attempts = greatest(0, case when i.reset then 0 else s.attempts end + i.add_attempts),
                lease_owner = null,
                lease_token = null,
                lease_expires_at = null,
                finished_at = now(),
                updated_at = now()
              from input i
             -- `is not distinct from` is `=` here (every lease is given) but, unlike `=`, does not
             -- let the planner read the steps through steps_leased and join every leased step
             -- (measured: 3x slower per batch); each step is found by its primary key.
             where s.id = i.id and s.status = 'started' and s.lease_token is not distinct from i.lease
            returning s.id, s.workflow_id, s.object_id, s.template, s.version, s.name,
                      'started'::text as old_status, s.status, s.lifecycle, s.attempts
        )
        select coalesce(array_agg(row('step', u.id, u.workflow_id, u.object_id, u.template, u.version,
                                      u.name, u.old_status, u.status, u.lifecycle, u.attempts)::workdo.applied
                                  order by array_position($1, u.id)), '{}')
          into st
          from changed u;
    else
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
            select s.id, s.status as old_status, s.finished_at as old_finished_at,
                   i.note, i.message, i.etext, i.lifecycle,
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
             order by s.id
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
                                  when c.new_status in ('error', 'exception', 'retrying') then coalesce(c.message, s.error_message)
                                  -- a retry come due keeps its last error in sight until it completes
                                  when c.new_status = 'ready' and c.old_status = 'retrying' then s.error_message
                                  when c.new_status in ('completed', 'skipped', 'waiting', 'ready', 'scheduled') then null
                                  else coalesce(c.message, s.error_message)
                                end,
                error_text = case
                               when c.new_status in ('error', 'exception', 'retrying') then coalesce(c.etext, s.error_text)
                               when c.new_status = 'ready' and c.old_status = 'retrying' then s.error_text
                               when c.new_status in ('completed', 'skipped', 'waiting', 'ready', 'scheduled') then null
                               else coalesce(c.etext, s.error_text)
                             end,
                lifecycle = coalesce(c.lifecycle, s.lifecycle),
                elapsed = coalesce(c.elapsed,
                                   case when c.new_status in ('completed', 'skipped', 'error', 'exception', 'retrying')
                                             and s.started_at is not null and c.old_status = 'started'
                                        then extract(epoch from clock_timestamp() - s.started_at)::float8 end,
                                   s.elapsed),
                attempts = greatest(0, case when c.reset then 0 else s.attempts end + c.add_attempts),
                lease_owner = case when c.new_status = 'started' then s.lease_owner end,
                lease_token = case when c.new_status = 'started' then s.lease_token end,
                lease_expires_at = case when c.new_status = 'started' then s.lease_expires_at end,
                started_at = case when c.new_status = 'started' and c.old_status <> 'started' then now()
                                  else s.started_at end,
                -- From the locked row `c`, like the status it tests, not from `s`: when another
                -- session finished the step after this statement's snapshot, Postgres computes
                -- the new row from the older `s` (no finished_at) and checks the constraints on
                -- it before it re-reads the row, and a finished step has a finished_at.
                finished_at = case
                                when c.new_status in ('completed', 'skipped')
                                  then case when c.old_status in ('completed', 'skipped')
                                            then c.old_finished_at else now() end
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
    end if;
    if cardinality(st) = 0 then
        return;
    end if;
    -- What else there is to do: each statement below that has nothing to do is skipped (at
    -- batch size 1 every statement's start-up costs about as much as its work).
    foreach ch in array st loop
        finishing := finishing
            or (ch.old_status in ('completed', 'skipped')) <> (ch.status in ('completed', 'skipped'));
        -- A skipped step reaches its milestone too, as in the workflow service (skipped counts
        -- as done there, for prerequisites and milestones alike).
        milestone := milestone
            or (ch.status in ('completed', 'skipped') and ch.old_status not in ('completed', 'skipped')
                and ch.lifecycle is not null);
        erring := erring or (ch.status in ('error', 'exception')
                              and ch.old_status not in ('error', 'exception'));
        readying := readying or (ch.status = 'ready' and ch.old_status <> 'ready');
    end loop;

    if finishing then
        -- 2. Steps that became finished (-1) or unfinished (+1): their dependants, named by the
        --    template's edges and found by (workflow_id, name), count down (or up) and become
        --    ready (or wait again).
        with f as (
            select s.workflow_id, s.name,
                   case when s.status in ('completed', 'skipped') then -1 else 1 end as delta
              from unnest(st) s
             where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
        ), d as materialized (
            select t.id, sum(f.delta)::int as delta, t.status as old_status
              from f
              join workdo.workflows w on w.id = f.workflow_id
              -- The template's edges, and the workflow's own (generated subnets, 0011).
             cross join lateral (
                   select e.dependant from workdo.edges e
                    where e.template_id = w.template_id and e.step = f.name
                   union all
                   select g.dependant from workdo.workflow_edges g
                    where g.workflow_id = f.workflow_id and g.step = f.name) e
              -- A subquery the planner keeps (offset 0), so that both columns are the index
              -- condition; as a plain join it reads every step of the workflow and filters.
             cross join lateral (
                   select t.id, t.status from workdo.steps t
                    where t.workflow_id = f.workflow_id and t.name = e.dependant
                   offset 0) t
             group by t.id, t.status
             -- Locked in id order (the update's nested loop reads `d` in its order), as every
             -- other commit locks steps (ARCHITECTURE.md, lock order): the grouping's own order
             -- is the plan's, not a promise.
             order by t.id
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
        with d as materialized (
            select s.workflow_id as id,
                   sum(case when s.status in ('completed', 'skipped') then -1 else 1 end)::int as delta
              from unnest(st) s
             where (s.old_status in ('completed', 'skipped')) <> (s.status in ('completed', 'skipped'))
             group by s.workflow_id
             -- Locked in id order, as the dependants above.
             order by s.workflow_id
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
    end if;

    if milestone then
        insert into workdo.milestones (object_id, version, name, workflow_id)
        select s.object_id, s.version, s.lifecycle, s.workflow_id
          from unnest(st) with ordinality s
         where s.status in ('completed', 'skipped') and s.old_status not in ('completed', 'skipped')
           and s.lifecycle is not null
         order by s.ordinality;
    end if;

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

    -- Alert outbox: one row per step that just reached `error`, in this transaction, so no
    -- alert is lost and none is written for a change that rolls back. After the events: the
    -- first failure is read from them.
    if erring then
        insert into workdo.alert_outbox (kind, template, step, object_id, workflow_id, recipients, payload)
        select 'step_error', s.template, s.name, s.object_id, s.workflow_id,
               array(select jsonb_array_elements_text(coalesce(t.spec -> 'alert_to', '[]'::jsonb))),
               jsonb_build_object(
                 'object', s.object_id, 'template', s.template, 'step', s.name,
                 'version', s.version, 'attempts', s.attempts, 'max_attempts', s.max_attempts,
                 'message', s.error_message, 'text', left(s.error_text, 4000),
                 'first_failed_at', coalesce((
                     select min(e.at) from workdo.events e
                      where e.object_id = s.object_id and e.workflow_id = s.workflow_id
                        and e.step = s.name
                        and e.status in ('retrying', 'error', 'exception')
                        and e.id > coalesce((select max(r.id) from workdo.events r
                                              where r.object_id = s.object_id
                                                and r.workflow_id = s.workflow_id and r.step = s.name
                                                and r.kind = 'retried'), 0)), now()),
                 'last_failed_at', now())
          from unnest(st) with ordinality x
          join workdo.steps s on s.id = x.id
          join workdo.workflows w on w.id = s.workflow_id
          join workdo.templates t on t.id = w.template_id
         where x.status in ('error', 'exception') and x.old_status not in ('error', 'exception')
         order by x.ordinality;
    end if;

    -- One NOTIFY per template:step with newly ready steps, delivered when the transaction
    -- commits (workers LISTEN on workdo_ready).
    foreach ch in array dep loop
        readying := readying or (ch.status = 'ready' and ch.old_status <> 'ready');
    end loop;
    if readying then
        perform pg_notify('workdo_ready', k)
           from (select distinct workdo.ready_key(r.template, r.name) as k
                   from (select * from unnest(st) union all select * from unnest(dep)) r
                  where r.status = 'ready' and r.old_status <> 'ready') n;
    end if;

    return query
    select * from unnest(st)
    union all
    select * from unnest(dep)
    union all
    select * from unnest(wf);
end
$function$;

-- workdo.complete_one: one completion under lease, the same rows and events as
-- workdo.apply_batch writes for it (`one_completion_and_a_batch_record_the_same` compares
-- them), with the dependants' statement only for a step that has dependants.
CREATE OR REPLACE FUNCTION workdo.complete_one(p_id bigint, p_note text, p_message text, p_lifecycle text, p_elapsed double precision, p_due timestamp with time zone, p_add_attempts integer, p_reset boolean, p_lease uuid, p_event text, p_detail jsonb, p_actor text)
 RETURNS SETOF workdo.applied
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
declare
    st workdo.applied;
    wf workdo.applied;
    dep workdo.applied[] := '{}';
    has_dependants boolean;
begin
    update workdo.steps s set
        status = 'completed',
        note = coalesce(p_note, s.note),
        error_message = null,
        error_text = null,
        lifecycle = coalesce(p_lifecycle, s.lifecycle),
        elapsed = coalesce(p_elapsed,
                           case when s.started_at is not null
                                then extract(epoch from clock_timestamp() - s.started_at)::float8 end,
                           s.elapsed),
        attempts = greatest(0, case when p_reset then 0 else s.attempts end + p_add_attempts),
        lease_owner = null,
        lease_token = null,
        lease_expires_at = null,
        finished_at = now(),
        updated_at = now()
     where s.id = p_id and s.status = 'started' and s.lease_token is not distinct from p_lease
    returning 'step', s.id, s.workflow_id, s.object_id, s.template, s.version, s.name, 'started',
              s.status, s.lifecycle, s.attempts,
              exists (select from workdo.workflows w
                        join workdo.edges e on e.template_id = w.template_id
                       where w.id = s.workflow_id and e.step = s.name)
              or exists (select from workdo.workflow_edges g
                          where g.workflow_id = s.workflow_id and g.step = s.name)
      into st.kind, st.id, st.workflow_id, st.object_id, st.template, st.version, st.name,
           st.old_status, st.status, st.lifecycle, st.attempts, has_dependants;
    if not found then
        return;
    end if;

    if has_dependants then
        -- Locked in id order, as a batch locks them (apply_batch); the edges give them by name.
        with d as materialized (
            select t.id, t.status as old_status, w.start_at
              from workdo.workflows w
             cross join lateral (
                   select e.dependant from workdo.edges e
                    where e.template_id = w.template_id and e.step = st.name
                   union all
                   select g.dependant from workdo.workflow_edges g
                    where g.workflow_id = st.workflow_id and g.step = st.name) e
             cross join lateral (
                   select t.id, t.status from workdo.steps t
                    where t.workflow_id = st.workflow_id and t.name = e.dependant
                   offset 0) t
             where w.id = st.workflow_id
             order by t.id
        ), moved as (
            -- A prerequisite finished: the count only goes down, so (ready and scheduled steps
            -- having none pending) only a waiting step can change status.
            update workdo.steps s set
                pending = s.pending - 1,
                status = case
                           when s.status = 'waiting' and s.pending = 1
                             then case when d.start_at > now() then 'scheduled' else 'ready' end
                           else s.status
                         end,
                run_at = case
                           when s.status = 'waiting' and s.pending = 1
                             then greatest(now(), d.start_at)
                           else s.run_at
                         end,
                updated_at = now()
              from d
             where s.id = d.id
            returning s.id, s.name, d.old_status, s.status
        )
        select coalesce(array_agg(row('dependant', null, st.workflow_id, st.object_id, st.template,
                                      st.version, m.name, m.old_status, m.status, null, null)::workdo.applied
                                  order by m.id), '{}')
          into dep
          from moved m;
    end if;

    update workdo.workflows w set
        unfinished = w.unfinished - 1,
        status = case when w.unfinished - 1 = 0 then 'completed' else 'active' end,
        completed_at = case when w.unfinished - 1 = 0 then coalesce(w.completed_at, now()) end
     where w.id = st.workflow_id
    returning 'workflow', w.id, w.id, w.object_id, w.template, w.version, null, 'active', w.status
      into wf.kind, wf.id, wf.workflow_id, wf.object_id, wf.template, wf.version, wf.name,
           wf.old_status, wf.status;

    if st.lifecycle is not null then
        insert into workdo.milestones (object_id, version, name, workflow_id)
        values (st.object_id, st.version, st.lifecycle, st.workflow_id);
    end if;

    insert into workdo.events
        (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
    values (st.object_id, st.workflow_id, st.template, st.version, st.name, p_event, st.status,
            st.attempts, p_actor,
            coalesce(case when jsonb_typeof(p_detail) = 'object' then p_detail end, '{}'::jsonb)
              || jsonb_build_object('from', st.old_status)
              || jsonb_strip_nulls(jsonb_build_object('message', p_message, 'note', p_note,
                                                      'run_at', p_due)));
    if cardinality(dep) > 0 then
        insert into workdo.events
            (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
        select d.object_id, d.workflow_id, d.template, d.version, d.name, 'prerequisites', d.status,
               null, p_actor, jsonb_build_object('from', d.old_status)
          from unnest(dep) with ordinality d
         where d.old_status <> d.status
         order by d.ordinality;
        perform pg_notify('workdo_ready', workdo.ready_key(st.template, n.name))
           from (select distinct d.name from unnest(dep) d
                  where d.status = 'ready' and d.old_status <> 'ready') n;
    end if;
    if wf.status = 'completed' then
        insert into workdo.events
            (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
        values (wf.object_id, wf.workflow_id, wf.template, wf.version, null, 'workflow_completed',
                wf.status, null, p_actor, null);
    end if;

    return next st;
    return query select * from unnest(dep);
    return next wf;
end
$function$;
