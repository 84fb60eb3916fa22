-- Why: a claim gathered the queue's head into an array and handed it to workdo.lease: a second
-- PL/pgSQL call, an `= any(…)` match, and a sort back into claim order by array position.
-- Counted with bench/callgrind/run.sh at a claim of one step (a worker with one free slot, a
-- worker at batch 1): 842k instructions per claim. The claim is now one UPDATE whose WHERE
-- takes the head (locked with SKIP LOCKED, as before) and whose result comes back in claim
-- order; priority and run_at do not change when a step is leased, so that order is the
-- queue's own.
--
-- The UPDATE sets what workdo.lease sets; workdo.lease stays for task injection, which leases
-- steps the caller chose (store::step_claim_objects).

create or replace function workdo.claim(
    p_template text, p_step text, p_lane text, p_limit bigint, p_owner text, p_lease_secs float8
) returns setof workdo.claimed
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
         where s.id = any(array(
                   select c.id from workdo.steps c
                    where c.template = p_template and c.name = p_step and c.status = 'ready'
                      and c.active and (p_lane is null or c.lane = p_lane)
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
$$;
