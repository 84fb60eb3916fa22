-- The current SQL engine: every function in schema `workdo`, in one place. These files are
-- applied after the versioned migrations, in file-name order, in one transaction, whenever
-- their combined SHA-256 differs from the one recorded in `workdo.engine` (store/db.rs). A
-- function changes here, in place; a versioned migration only drops a signature that changes
-- (Postgres cannot rename a parameter with CREATE OR REPLACE). Reasons with their numbers
-- are in ARCHITECTURE.md ("Decisions") and in the migration that first measured them.

-- workdo.prioritize: the documented way to inject priority from SQL
-- (`select workdo.prioritize(5, object_id => 'druid:…')`); returns the steps changed.
CREATE OR REPLACE FUNCTION workdo.prioritize(new_priority integer, object_id text DEFAULT NULL::text, template text DEFAULT NULL::text, step text DEFAULT NULL::text)
 RETURNS integer
 LANGUAGE sql
AS $function$
    with changed as (
        update workdo.steps s
           set priority = new_priority, updated_at = now()
         where s.active
           and s.status not in ('completed', 'skipped')
           and (prioritize.object_id is null or s.object_id = workdo.object_id(prioritize.object_id))
           and (prioritize.template is null or s.template = prioritize.template)
           and (prioritize.step is null or s.name = prioritize.step)
        returning s.*
    ), logged as (
        insert into workdo.events (object_id, workflow_id, template, version, step, kind, status, actor, detail)
        select c.object_id, c.workflow_id, c.template, c.version, c.name, 'prioritized', c.status,
               current_user, jsonb_build_object('priority', new_priority)
          from changed c
    )
    select count(*)::integer from changed
$function$;
