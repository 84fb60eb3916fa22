-- The narrow-queue layout's claim: lease 100 rows of the narrow queue table and read the inputs a
-- function is given (object properties, workflow context). Every variant starts with it; run.sh
-- appends the variant's completion, assembled from the complete-*.sql fragments.
with c as (select step_id from q where template = 'bench1' and name = 'noop' and lease_token is null
            order by priority desc, run_at, step_id limit 100 for update skip locked),
u as (update q set lease_token = gen_random_uuid(), lease_owner = 'w', lease_expires_at = now() + interval '300 s',
             attempts = q.attempts + 1 from c where q.step_id = c.step_id
      returning q.step_id, q.lease_token, q.object_id, q.workflow_id),
x as (select u.step_id, u.lease_token, (select o.properties from objects o where o.id = u.object_id) p,
             (select w.context from workflows w where w.id = u.workflow_id) ctx from u)
select array_agg(step_id)::text as ids, array_agg(lease_token)::text as leases from x \gset
