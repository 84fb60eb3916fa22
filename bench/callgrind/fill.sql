-- :n ready single-step workflows of benchOneWF, one per object, vacuumed (no dead index entries
-- at the head of the claim index).
truncate workdo.steps, workdo.workflows, workdo.events, workdo.milestones, workdo.objects,
         workdo.alert_outbox cascade;
with o as (insert into workdo.objects (id) select 'cg:' || g from generate_series(1, :n) g returning id),
     w as (insert into workdo.workflows (object_id, template, template_id, version, unfinished)
           select o.id, 'benchOneWF', t.id, 1, 1 from o,
                  (select id from workdo.templates where name = 'benchOneWF' and is_current) t
           returning id, object_id)
insert into workdo.steps (workflow_id, object_id, template, version, lane, name, status, max_attempts, pending, run_at)
select w.id, w.object_id, 'benchOneWF', 1, 'default', 'work', 'ready', 3, 0, now() from w;
vacuum analyze workdo.steps;
vacuum analyze workdo.workflows;
