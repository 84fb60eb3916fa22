-- Completion, first part (every variant): delete the leased rows from the queue.
with i as (select * from unnest(':ids'::bigint[], ':leases'::uuid[]) as i(id, lease)),
d as (delete from q using i where q.step_id = i.id and q.lease_token = i.lease returning q.step_id)
