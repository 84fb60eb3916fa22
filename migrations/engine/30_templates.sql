-- The current SQL engine: every function in schema `workdo`, in one place. These files are
-- applied after the versioned migrations, in file-name order, in one transaction, whenever
-- their combined SHA-256 differs from the one recorded in `workdo.engine` (store/db.rs). A
-- function changes here, in place; a versioned migration only drops a signature that changes
-- (Postgres cannot rename a parameter with CREATE OR REPLACE). Reasons with their numbers
-- are in ARCHITECTURE.md ("Decisions") and in the migration that first measured them.

-- A template's edges (prerequisite, dependant), filled by trigger whenever a template version
-- is saved: a finished step finds its dependants by one (workflow_id, name) probe each
-- instead of reading every step of its workflow (migrations/0005).
CREATE OR REPLACE FUNCTION workdo.template_edges_of(p_spec jsonb)
 RETURNS TABLE(step text, dependant text)
 LANGUAGE sql
 IMMUTABLE
AS $function$
    select distinct p.prereq, s ->> 'name'
      from jsonb_array_elements(
               case when jsonb_typeof(p_spec -> 'steps') = 'array' then p_spec -> 'steps'
                    else '[]'::jsonb end) s
     cross join lateral jsonb_array_elements_text(
               case when jsonb_typeof(s -> 'prereqs') = 'array' then s -> 'prereqs'
                    else '[]'::jsonb end) p(prereq)
$function$;

CREATE OR REPLACE FUNCTION workdo.template_edges()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
begin
    insert into workdo.edges (template_id, step, dependant)
    select t.id, e.step, e.dependant
      from new_templates t cross join lateral workdo.template_edges_of(t.spec) e;
    return null;
end
$function$;
