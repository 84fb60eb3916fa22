-- workdo.signal: deliver a signal to a machine job from SQL (a trigger, a psql session). It
-- waits in the job's inbox and is taken by the runtime in order, in a transaction of its own
-- under the job's row lock, exactly as signals from the CLI and the API are; the returned id
-- names its row in workdo.signals, whose `outcome` says what became of it.
CREATE OR REPLACE FUNCTION workdo.signal(p_workflow_id bigint, p_signal text, p_data jsonb DEFAULT '{}'::jsonb, p_actor text DEFAULT NULL::text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
declare
    new_id bigint;
begin
    if not exists (select 1 from workdo.workflows where id = p_workflow_id and machine is not null) then
        raise exception using errcode = '22023',
            message = format('workflow %s is not a machine job', p_workflow_id);
    end if;
    insert into workdo.signals (workflow_id, signal, data, actor)
    values (p_workflow_id, p_signal, coalesce(p_data, '{}'::jsonb),
            coalesce(p_actor, 'sql:' || current_user))
    returning id into new_id;
    perform pg_notify('workdo_signal', p_workflow_id::text);
    return new_id;
end
$function$;
-- workdo.child_done: a child workflow that ends (a step workflow completed, a machine job in a
-- final state or cancelled) tells its parent with the signal `child_done` (data: child,
-- template, object, status, state, cancelled), unless the parent has ended too. A trigger, so
-- that every way a workflow ends — a worker's completion, the update call, skip-all, a machine's
-- transition — is covered in the transaction that ends it.
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
