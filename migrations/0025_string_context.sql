-- The workflow service stores a context that is a JSON string as it is, and gives it back as
-- JSON text (create_workflow_spec.rb, "with non hash context"): a workflow's context is a JSON
-- object, or a string given through the service's routes (issue 48). The domain (of
-- `workflows.context` and of the claim's `claimed.context`) is renamed for what it now holds.
alter domain workdo.json_object rename to json_context;
alter domain workdo.json_context drop constraint json_object_check;
alter domain workdo.json_context
    add constraint json_context_check check (jsonb_typeof(value) in ('object', 'string'));
