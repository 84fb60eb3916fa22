-- A child that ends tells its parent (`child_done`, seed 002's hierarchy): the function is the
-- engine's (migrations/engine/60_machines.sql), created here first so the trigger can name it.

CREATE OR REPLACE FUNCTION workdo.child_done()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    insert into workdo.signals (workflow_id, signal, data, actor)
    select p.id, 'child_done',
           jsonb_build_object('child', new.id, 'template', new.template, 'object', new.object_id,
                              'status', new.status, 'state', new.machine ->> 'state',
                              'cancelled', coalesce((new.machine ->> 'cancelled')::boolean, false)),
           'child:' || new.id
      from workdo.workflows p
     where p.id = new.parent_id and p.status <> 'completed' and p.machine is not null;
    if found then
        perform pg_notify('workdo_signal', new.parent_id::text);
    end if;
    return null;
end
$function$;

-- A child ends (its status becomes completed), or is made a child once it has ended (a fork
-- sets parent_id after starting a workflow that may complete at once), or is inserted ended.
create trigger workflows_child_done after update of status, parent_id on workdo.workflows
    for each row when (new.status = 'completed' and new.parent_id is not null
                       and (old.status is distinct from 'completed'
                            or old.parent_id is distinct from new.parent_id))
    execute function workdo.child_done();
create trigger workflows_child_done_inserted after insert on workdo.workflows
    for each row when (new.status = 'completed' and new.parent_id is not null)
    execute function workdo.child_done();
