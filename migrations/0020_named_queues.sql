-- Queues on object conditions (seed 000: "objects whose embargo has expired waiting at
-- release"). Properties are matched by containment through a GIN index, so a filtered queue
-- finds its objects by index instead of reading every queued object's properties; and a queue
-- can be named, defined once and used by the CLI, the JSON API and the workflow-service route.
create index objects_properties on workdo.objects using gin (properties jsonb_path_ops);

create table workdo.queues (
    name       text        primary key check (name ~ '^[A-Za-z0-9_.-]{1,100}$'),
    template   text        not null,
    step       text        not null,
    completed  text[]      not null default '{}',
    properties jsonb       not null default '{}' check (jsonb_typeof(properties) = 'object'),
    lane       text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);
