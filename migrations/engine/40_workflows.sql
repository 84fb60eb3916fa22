-- The current SQL engine: every function in schema `workdo`, in one place. These files are
-- applied after the versioned migrations, in file-name order, in one transaction, whenever
-- their combined SHA-256 differs from the one recorded in `workdo.engine` (store/db.rs). A
-- function changes here, in place; a versioned migration only drops a signature that changes
-- (Postgres cannot rename a parameter with CREATE OR REPLACE). Reasons with their numbers
-- are in ARCHITECTURE.md ("Decisions") and in the migration that first measured them.

-- A deleted workflow's steps go with it (statement-level trigger): there is no foreign key
-- from steps to workflows, whose per-row check was 30% of starting workflows in bulk.
CREATE OR REPLACE FUNCTION workdo.delete_steps_of_deleted_workflows()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    delete from workdo.steps s using deleted d where s.workflow_id = d.id;
    return null;
end
$function$;
