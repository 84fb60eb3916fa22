-- The wide step rows marked completed.
, s as (update steps s set status = 'completed', finished_at = now(), updated_at = now(), started_at = now(),
               attempts = s.attempts + 1, elapsed = 0.001 from d where s.id = d.step_id
        returning s.id, s.workflow_id, s.object_id, s.template, s.version, s.name, s.status, s.attempts)
