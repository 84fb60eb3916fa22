-- The two events the engine writes: the step completed, the workflow completed.
, e as (insert into events (object_id, workflow_id, template, version, step, kind, status, attempt, actor, detail)
        select object_id, workflow_id, template, version, name, 'completed', status, attempts, 'w',
               '{"from": "started"}'::jsonb from s
        union all
        select object_id, id, 'bench1', 1, null, 'workflow_completed', status, null, 'w', null
          from w where status = 'completed')
