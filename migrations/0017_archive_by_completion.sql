-- Archiving takes finished workflows oldest first, a batch at a time: with millions of rows a
-- sort of every finished workflow per batch stalled it. This partial index holds only finished
-- workflows, in the order archiving takes them. (Their events are found through
-- `events_object` by the workflow's object, so the hot path's inserts into `events` gain no
-- index: migration 0004 dropped `events_workflow` for their sake.)
create index workflows_finished on workdo.workflows (completed_at, id) where status = 'completed';
