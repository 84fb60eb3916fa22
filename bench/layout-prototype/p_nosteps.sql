-- As p.sql, without updating the wide step row (the events as the only history).
with c as (select step_id from q where template = 'bench1' and name = 'noop' and lease_token is null
            order by priority desc, run_at, step_id limit 100 for update skip locked),
u as (update q set lease_token = gen_random_uuid(), lease_owner = 'w', lease_expires_at = now() + interval '300 s',
             attempts = q.attempts + 1 from c where q.step_id = c.step_id
      returning q.step_id, q.lease_token, q.object_id, q.workflow_id),
x as (select u.step_id, u.lease_token, (select o.properties from objects o where o.id = u.object_id) p,
             (select w.context from workflows w where w.id = u.workflow_id) ctx from u)
select array_agg(step_id)::text as ids, array_agg(lease_token)::text as leases from x \gset
with i as (select * from unnest(':ids'::bigint[], ':leases'::uuid[]) as i(id, lease)),
d as (delete from q using i where q.step_id = i.id and q.lease_token = i.lease returning q.step_id),
s as (select s.id, s.workflow_id, s.object_id, s.template, s.version, s.name, 'completed'::text as status, s.attempts + 1 as attempts
        from d join steps s on s.id = d.step_id),
w as (update workflows w set unfinished = w.unfinished - 1,
             status = case when w.unfinished - 1 = 0 then 'completed' else 'active' end,
             completed_at = case when w.unfinished - 1 = 0 then now() end
        from s where w.id = s.workflow_id returning w.id, w.object_id, w.status),
e as (insert into events (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
      select object_id, workflow_id, template, version, name, 'completed', status, attempts, 'w', '{"from": "started"}'::jsonb from s
      union all
      select object_id, id, 'bench1', 1, null, 'workflow_completed', status, null, 'w', null from w where status = 'completed')
select count(*) from s;
