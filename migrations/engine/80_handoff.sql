-- The hand-off outbox's trigger: a step of a handed-off template step that becomes ready gets
-- one outbox row, in the same transaction. The WHEN clauses keep every other update of `steps`
-- out of the function; `handoff_steps` is small and usually empty.
create or replace function workdo.handoff_enqueue() returns trigger
language plpgsql as $$
begin
    insert into workdo.handoff_outbox (step_id, ready_at, object_id, template, step, lane)
    select new.id, new.updated_at, new.object_id, new.template, new.name, new.lane
     where new.active
       and exists (select 1 from workdo.handoff_steps h
                    where h.template = new.template and h.step = new.name)
    on conflict (step_id, ready_at) do nothing;
    return null;
end;
$$;

create or replace trigger steps_handoff_update
    after update of status on workdo.steps
    for each row when (new.status = 'ready' and old.status is distinct from 'ready')
    execute function workdo.handoff_enqueue();

create or replace trigger steps_handoff_insert
    after insert on workdo.steps
    for each row when (new.status = 'ready')
    execute function workdo.handoff_enqueue();
