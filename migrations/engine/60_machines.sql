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
