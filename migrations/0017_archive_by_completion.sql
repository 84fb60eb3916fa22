-- Archiving takes finished workflows oldest first, a batch at a time: with millions of rows a
-- sort of every finished workflow per batch stalled it. This partial index holds only finished
-- workflows, in the order archiving takes them. (Their events are found through
-- `events_object` by the workflow's object, so the hot path's inserts into `events` gain no
-- index: migration 0004 dropped `events_workflow` for their sake.)
create index workflows_finished on workdo.workflows (completed_at, id) where status = 'completed';

-- Deleting (archiving) a workflow cascades to its machine signals and alarms; their indexes were
-- partial (pending only), so each cascade scanned the whole table. Signals and alarms are
-- written per signal and per alarm, not per step: an index each costs the hot path nothing.
create index signals_of on workdo.signals (workflow_id);
create index alarms_all_of on workdo.alarms (workflow_id);
create index tokens_of on workdo.tokens (workflow_id) where workflow_id is not null;
