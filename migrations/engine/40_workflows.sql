-- The current SQL engine: every function in schema `workdo`, in one place. These files are
-- applied after the versioned migrations, in file-name order, in one transaction, whenever
-- their combined SHA-256 differs from the one recorded in `workdo.engine` (store/db.rs). A
-- function changes here, in place; a versioned migration only drops a signature that changes
-- (Postgres cannot rename a parameter with CREATE OR REPLACE). Reasons with their numbers
-- are in ARCHITECTURE.md ("Decisions") and in the migration that first measured them.

-- A deleted workflow's steps go with it (statement-level trigger): there is no foreign key
-- from steps to workflows, whose per-row check was 30% of starting workflows in bulk. The ids
-- as an array, so the steps are found through their (workflow_id, name) index: a join with
-- the transition table was planned as a hash join over every step (458 ms per 1,000
-- workflows deleted with 5 M steps, 4 ms this way; engine version 17).
CREATE OR REPLACE FUNCTION workdo.delete_steps_of_deleted_workflows()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    delete from workdo.steps where workflow_id = any(array(select id from deleted));
    return null;
end
$function$;
