-- Why: starting workflows in bulk spent 60% of the workflows INSERT in two foreign-key checks per
-- row (EXPLAIN ANALYZE, 2,000 workflows: 20.5 ms with them, 8.4 ms without): each row queued two
-- after-row triggers, each a lookup under a KEY SHARE lock on the object's and the template
-- version's row. The same reasoning as for steps' key in 0004: workflows are only ever inserted by
-- the store (`insert_workflows`), in the transaction that inserts their object or holds it
-- `for update`, with the template version it has just read; so the per-row check guards nothing
-- the code does not. What the keys also gave is kept by statement-level triggers:
--   * deleting an object deletes its workflows (and so, through workflows_delete_steps, their
--     steps), as `on delete cascade` did;
--   * a template version that workflows still run cannot be deleted, as the key's default
--     `no action` refused (nothing in workdo deletes template versions; this keeps SQL from it).
-- The parent key stays: it is null for all but machine children, and its `on delete set null`
-- is behaviour, not a check. The triggers' functions are the engine's (40_workflows.sql,
-- 30_templates.sql); they are created here too because a migration runs before the engine.

alter table workdo.workflows drop constraint workflows_object_id_fkey;
alter table workdo.workflows drop constraint workflows_template_id_fkey;

create function workdo.delete_workflows_of_deleted_objects() returns trigger
language plpgsql as $$
begin
    delete from workdo.workflows where object_id = any(array(select id from deleted));
    return null;
end
$$;

create trigger objects_delete_workflows
    after delete on workdo.objects
    referencing old table as deleted
    for each statement execute function workdo.delete_workflows_of_deleted_objects();

create function workdo.refuse_deleting_templates_in_use() returns trigger
language plpgsql as $$
declare
    used record;
begin
    select t.id, t.name into used
      from deleted t
     where exists (select 1 from workdo.workflows w where w.template_id = t.id)
     limit 1;
    if found then
        raise exception using errcode = '23503',
            message = format('template %s (version id %s) still has workflows', used.name, used.id);
    end if;
    return null;
end
$$;

create trigger templates_refuse_delete_in_use
    after delete on workdo.templates
    referencing old table as deleted
    for each statement execute function workdo.refuse_deleting_templates_in_use();
