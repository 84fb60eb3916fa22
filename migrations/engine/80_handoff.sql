-- The hand-off outbox's trigger function: a step of a handed-off template step that becomes
-- ready gets one outbox row, in the same transaction.
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

-- The triggers that call it are created by the runtime that hands off (`handoff_steps_set`, in
-- the transaction that names the steps), not here: where no runtime hands off, steps becoming
-- ready pay for no trigger on the completion path.
