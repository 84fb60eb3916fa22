-- Why (1): a finished step found its dependants by reading every step of its workflow and testing
-- `name = any(prereqs)`: O(steps in the workflow) heap reads per finished step, O(n²) per
-- workflow (9 reads per step in the bench's DAG, ~15 in accessionWF). The template already knows
-- each step's dependants; `workdo.edges` holds them (filled from the template's spec when the
-- template is saved, by trigger, so every way of saving one fills it), and workdo.apply looks
-- dependants up by (workflow_id, name): one index probe per dependant.
-- Why (2): a status-change batch took three round trips after workdo.apply (alert outbox,
-- NOTIFY, and the commit of its explicit transaction): at batch size 1 each round trip costs as
-- much as the statement. workdo.apply now writes the alert outbox and sends the NOTIFY itself, so
-- one statement (autocommitted) records a batch; workdo.apply_and_claim does a worker's
-- commit-then-claim in one.

create table workdo.edges (
    template_id bigint not null references workdo.templates (id) on delete cascade,
    step        text   not null,
    dependant   text   not null,
    primary key (template_id, step, dependant)
);

-- A template spec's edges: (prerequisite, the step that lists it).
create function workdo.template_edges_of(p_spec jsonb) returns table (step text, dependant text)
language sql immutable as $$
    select distinct p.prereq, s ->> 'name'
      from jsonb_array_elements(
               case when jsonb_typeof(p_spec -> 'steps') = 'array' then p_spec -> 'steps'
                    else '[]'::jsonb end) s
     cross join lateral jsonb_array_elements_text(
               case when jsonb_typeof(s -> 'prereqs') = 'array' then s -> 'prereqs'
                    else '[]'::jsonb end) p(prereq)
$$;

create function workdo.template_edges() returns trigger
language plpgsql as $$
begin
    insert into workdo.edges (template_id, step, dependant)
    select t.id, e.step, e.dependant
      from new_templates t cross join lateral workdo.template_edges_of(t.spec) e;
    return null;
end
$$;

create trigger templates_edges
    after insert on workdo.templates
    referencing new table as new_templates
    for each statement execute function workdo.template_edges();

insert into workdo.edges (template_id, step, dependant)
select t.id, e.step, e.dependant
  from workdo.templates t cross join lateral workdo.template_edges_of(t.spec) e;

-- workdo.apply as in 0004, but for step 2 (dependants) and the alert outbox and NOTIFY at its end.
create or replace function workdo.apply(
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
    ch workdo.applied;
    finishing boolean := false;
    milestone boolean := false;
    erring boolean := false;
    readying boolean := false;
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
    -- What else there is to do: each statement below that has nothing to do is skipped (at
    -- batch size 1 every statement's start-up costs about as much as its work).
    foreach ch in array st loop
        finishing := finishing
            or (ch.old_status in ('completed', 'skipped')) <> (ch.status in ('completed', 'skipped'));
        milestone := milestone
            or (ch.status = 'completed' and ch.old_status <> 'completed' and ch.lifecycle is not null);
        erring := erring or (ch.status = 'error' and ch.old_status <> 'error');
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
        ), d as (
            select t.id, sum(f.delta)::int as delta, t.status as old_status
              from f
              join workdo.workflows w on w.id = f.workflow_id
              join workdo.edges e on e.template_id = w.template_id and e.step = f.name
              -- A subquery the planner keeps (offset 0), so that both columns are the index
              -- condition; as a plain join it reads every step of the workflow and filters.
             cross join lateral (
                   select t.id, t.status from workdo.steps t
                    where t.workflow_id = f.workflow_id and t.name = e.dependant
                   offset 0) t
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
    end if;

    if milestone then
        insert into workdo.milestones (object_id, version, name, workflow_id)
        select s.object_id, s.version, s.lifecycle, s.workflow_id
          from unnest(st) with ordinality s
         where s.status = 'completed' and s.old_status <> 'completed' and s.lifecycle is not null
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
                        and e.status in ('retrying', 'error')
                        and e.id > coalesce((select max(r.id) from workdo.events r
                                              where r.object_id = s.object_id
                                                and r.workflow_id = s.workflow_id and r.step = s.name
                                                and r.kind = 'retried'), 0)), now()),
                 'last_failed_at', now())
          from unnest(st) with ordinality x
          join workdo.steps s on s.id = x.id
          join workdo.workflows w on w.id = s.workflow_id
          join workdo.templates t on t.id = w.template_id
         where x.status = 'error' and x.old_status <> 'error'
         order by x.ordinality;
    end if;

    -- One NOTIFY per template:step with newly ready steps, delivered when the transaction
    -- commits (workers LISTEN on workdo_ready).
    foreach ch in array dep loop
        readying := readying or (ch.status = 'ready' and ch.old_status <> 'ready');
    end loop;
    if readying then
        perform pg_notify('workdo_ready', k)
           from (select distinct r.template || ':' || r.name as k
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
$$;

-- workdo.lease as in 0004, but each leased row's workflow is looked up once, not once for its
-- context and again for its trace: the subquery returns the whole workflow row.
create or replace function workdo.lease(p_ids bigint[], p_owner text, p_lease_secs float8)
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
                  (select w from workdo.workflows w where w.id = s.workflow_id) as wf
    )
    select l.id, l.workflow_id, l.object_id, l.template, l.name, l.version, l.lane, l.attempts,
           l.max_attempts, l.priority, l.lease_token, l.lease_expires_at, l.properties,
           (l.wf).context, (l.wf).trace_context
      from leased l order by array_position(p_ids, l.id);
end
$$;

-- A worker draining a queue commits its last results and claims its next steps in one call
-- (and so one round trip and one commit): the rows of workdo.apply, then the claimed steps
-- (kind `claimed`) with the columns of workdo.claimed.
create function workdo.apply_and_claim(
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
           null::text, 'started'::text, null::text, c.attempts, c.lane, c.max_attempts,
           c.priority, c.lease_token, c.lease_expires_at, c.properties, c.context,
           c.trace_context
      from workdo.claim(p_template, p_step, p_lane, p_limit, p_owner, p_lease_secs) c;
end
$$;
