-- The workflow's unfinished-steps counter counted down (each workflow has one step here).
, w as (update workflows w set unfinished = w.unfinished - 1,
               status = case when w.unfinished - 1 = 0 then 'completed' else 'active' end,
               completed_at = case when w.unfinished - 1 = 0 then now() end
          from s where w.id = s.workflow_id returning w.id, w.object_id, w.status)
