-- The current SQL engine: every function in schema `workdo`, in one place. These files are
-- applied after the versioned migrations, in file-name order, in one transaction, whenever
-- their combined SHA-256 differs from the one recorded in `workdo.engine` (store/db.rs). A
-- function changes here, in place; a versioned migration only drops a signature that changes
-- (Postgres cannot rename a parameter with CREATE OR REPLACE). Reasons with their numbers
-- are in ARCHITECTURE.md ("Decisions") and in the migration that first measured them.

-- The claims' signatures before `p_async` (engine 20) go in this same transaction as their
-- replacements are created, so no worker ever finds no claim function; binaries that call them
-- without `p_async` get the default, a synchronous claim.
DROP FUNCTION IF EXISTS workdo.claim(text, text, text, bigint, text, double precision);
DROP FUNCTION IF EXISTS workdo.claim_queue(text, text, bigint, text, double precision);

-- workdo.claim: the head of a queue (template, step, optionally one lane) unless the step is
-- paused (workdo.paused_steps, 0021), leased in one
-- UPDATE whose WHERE takes the head with SKIP LOCKED, returned in claim order (priority desc,
-- ready since, id), with the inputs a function gets. One statement instead of gathering ids
-- and calling workdo.lease: -14% instructions per batch-1 claim (migrations/0008). Planned
-- once per session (force_generic_plan): as a prepared statement it was re-planned on every
-- call, planning costing as much as executing.
CREATE OR REPLACE FUNCTION workdo.claim(p_template text, p_step text, p_lane text, p_limit bigint, p_owner text, p_lease_secs double precision, p_async boolean DEFAULT false)
 RETURNS SETOF workdo.claimed
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
begin
    -- p_async (`--async-claims`): the claim's transaction commits without waiting for the
    -- flush: a claim lost in a crash returns its step to the queue, and the completion's
    -- synchronous commit flushes the claim before it (ARCHITECTURE.md). It sets the whole
    -- transaction's commit, so pass it only for a claim that is a statement of its own (the
    -- runtime's claims are); never inside a transaction that writes anything else.
    if p_async then
        perform set_config('synchronous_commit', 'off', true);
    end if;
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
         where s.id = any(array(
                   select c.id from workdo.steps c
                    where c.template = p_template and c.name = p_step and c.status = 'ready'
                      and c.active and (p_lane is null or c.lane = p_lane)
                      and not exists (select 1 from workdo.paused_steps p
                                       where p.template = p_template and p.step = p_step)
                    order by c.priority desc, c.run_at, c.id
                    limit p_limit
                      for update skip locked))
        returning s.id, s.workflow_id, s.object_id, s.template, s.name, s.version, s.lane,
                  s.attempts, s.max_attempts, s.priority, s.lease_token, s.lease_expires_at,
                  (select o.properties from workdo.objects o where o.id = s.object_id) as properties,
                  (select w from workdo.workflows w where w.id = s.workflow_id) as wf,
                  s.run_at
    )
    select l.id, l.workflow_id, l.object_id, l.template, l.name, l.version, l.lane, l.attempts,
           l.max_attempts, l.priority, l.lease_token, l.lease_expires_at, l.properties,
           (l.wf).context, (l.wf).trace_context
      from leased l order by l.priority desc, l.run_at, l.id;
end
$function$;

-- workdo.ready_key: what a NOTIFY on workdo_ready names for a step that became ready: its
-- worker's key, `template:step`; for a generated step (`generator/bricklet#n/step`, 0011) the
-- bricklet step it runs, `template:bricklet/step`, which one worker claims for every instance.
CREATE OR REPLACE FUNCTION workdo.ready_key(p_template text, p_name text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
    select p_template || ':' ||
           case when strpos(p_name, '/') = 0 then p_name
                else regexp_replace(p_name, '^[^/]+/([^#/]+)#[0-9]+/', '\1/') end
$function$;

-- workdo.claim_queue: workdo.claim for generated steps, which are claimed by the bricklet step
-- they run (`queue`) rather than by their per-workflow names (migrations/0011).
CREATE OR REPLACE FUNCTION workdo.claim_queue(p_queue text, p_lane text, p_limit bigint, p_owner text, p_lease_secs double precision, p_async boolean DEFAULT false)
 RETURNS SETOF workdo.claimed
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
begin
    if p_async then
        perform set_config('synchronous_commit', 'off', true);
    end if;
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
         where s.id = any(array(
                   select c.id from workdo.steps c
                    where c.queue = p_queue and c.status = 'ready'
                      and c.active and (p_lane is null or c.lane = p_lane)
                      and not exists (select 1 from workdo.paused_steps p
                                       where p.template || ':' || p.step = p_queue)
                    order by c.priority desc, c.run_at, c.id
                    limit p_limit
                      for update skip locked))
        returning s.id, s.workflow_id, s.object_id, s.template, s.name, s.version, s.lane,
                  s.attempts, s.max_attempts, s.priority, s.lease_token, s.lease_expires_at,
                  (select o.properties from workdo.objects o where o.id = s.object_id) as properties,
                  (select w from workdo.workflows w where w.id = s.workflow_id) as wf,
                  s.run_at
    )
    select l.id, l.workflow_id, l.object_id, l.template, l.name, l.version, l.lane, l.attempts,
           l.max_attempts, l.priority, l.lease_token, l.lease_expires_at, l.properties,
           (l.wf).context, (l.wf).trace_context
      from leased l order by l.priority desc, l.run_at, l.id;
end
$function$;

-- workdo.lease: steps the caller chose become `started` under a lease (task injection,
-- `workdo run`); sets what workdo.claim sets.
CREATE OR REPLACE FUNCTION workdo.lease(p_ids bigint[], p_owner text, p_lease_secs double precision)
 RETURNS SETOF workdo.claimed
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$;
