-- The yardstick of `workdo bench`: claim 100 ready rows (partial index, priority then run_at), then mark them done.
with c as (select id from y where status = 'ready' order by priority desc, run_at, id limit 100 for update skip locked),
u as (update y set status = 'running' from c where y.id = c.id returning y.id)
select array_agg(id)::text as ids from u \gset
update y set status = 'done' where id = any(':ids'::bigint[]);
