-- The wide step rows only read, for the workflow and the events (the events as the only history).
, s as (select s.id, s.workflow_id, s.object_id, s.template, s.version, s.name, 'completed'::text as status,
               s.attempts + 1 as attempts
          from d join steps s on s.id = d.step_id)
