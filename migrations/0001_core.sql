-- Why: the core engine. Workflow state lives with the object (WorkDo): one row per workflow of an
-- object version, one row per step of that workflow. Readiness is materialised, not derived: each
-- step keeps `pending`, the number of its prerequisites not yet completed or skipped, so finishing a
-- step touches only its dependants (found through the (workflow_id, name) index and `prereqs`) and
-- the claim is an index scan over the partial index of ready rows, whatever the table's depth.
-- Dynamically inserted steps (dispatch) and state-machine workflows only add rows of the same shape.

create schema if not exists workdo;

-- Every version of every template ever loaded. A workflow points at the exact version it started
-- with; `is_current` marks the version new workflows get.
create table workdo.templates (
    id         bigint generated always as identity primary key,
    name       text        not null,
    sha256     text        not null check (sha256 ~ '^[0-9a-f]{64}$'),
    kind       text        not null check (kind in ('steps', 'machine')),
    format     text        not null check (format in ('yaml', 'xml')),
    origin     text,
    source     text        not null,
    spec       jsonb       not null,
    loaded_at  timestamptz not null default now(),
    is_current boolean     not null default true,
    unique (name, sha256)
);
create unique index templates_one_current on workdo.templates (name) where is_current;

-- The things worked on. `version` is the object's current version; workflows of older versions
-- are inactive and invisible to queues.
create table workdo.objects (
    id         text        primary key check (length(id) between 1 and 200),
    version    integer     not null default 1 check (version >= 1),
    properties jsonb       not null default '{}' check (jsonb_typeof(properties) = 'object'),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

-- Named documents of an object, such as descriptive metadata XML.
create table workdo.documents (
    object_id  text        not null references workdo.objects (id) on delete cascade,
    name       text        not null check (length(name) between 1 and 200),
    content    text        not null,
    updated_at timestamptz not null default now(),
    primary key (object_id, name)
);

create table workdo.workflows (
    id           bigint generated always as identity primary key,
    object_id    text        not null references workdo.objects (id) on delete cascade,
    template     text        not null,
    template_id  bigint      not null references workdo.templates (id),
    version      integer     not null check (version >= 1),
    status       text        not null default 'active' check (status in ('active', 'completed')),
    active       boolean     not null default true,
    priority     integer     not null default 0,
    lane         text        not null default 'default',
    start_at     timestamptz not null default now(),
    context      jsonb       not null default '{}' check (jsonb_typeof(context) = 'object'),
    -- steps not yet completed or skipped; 0 means the workflow is completed
    unfinished   integer     not null check (unfinished >= 0),
    trace_context text,
    created_at   timestamptz not null default now(),
    completed_at timestamptz,
    unique (object_id, template, version),
    check ((status = 'completed') = (completed_at is not null))
);

create table workdo.steps (
    id               bigint generated always as identity primary key,
    workflow_id      bigint      not null references workdo.workflows (id) on delete cascade,
    -- copied from the workflow so the claim and the queue queries need no join
    object_id        text        not null,
    template         text        not null,
    version          integer     not null,
    lane             text        not null,
    active           boolean     not null default true,
    name             text        not null,
    status           text        not null check (status ~ '^[A-Za-z][A-Za-z0-9 _.-]{0,63}$'),
    prereqs          text[]      not null default '{}',
    -- prerequisites not yet completed or skipped
    pending          integer     not null default 0 check (pending >= 0),
    priority         integer     not null default 0,
    -- ready: since when (FIFO order); scheduled/retrying: when it becomes ready
    run_at           timestamptz not null default now(),
    attempts         integer     not null default 0 check (attempts >= 0),
    max_attempts     integer     not null check (max_attempts >= 1),
    lifecycle        text,
    note             text,
    error_message    text,
    error_text       text,
    elapsed          double precision,
    lease_owner      text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    created_at       timestamptz not null default now(),
    updated_at       timestamptz not null default now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    unique (workflow_id, name),
    check ((status in ('completed', 'skipped')) = (finished_at is not null)),
    check ((lease_token is null) or status = 'started')
);

-- The claim path: ready rows of one template step, highest priority first, then longest ready.
create index steps_claim on workdo.steps (template, name, priority desc, run_at, id)
    where status = 'ready' and active;
-- Future-dated and backing-off steps, promoted to ready when due.
create index steps_due on workdo.steps (run_at) where status in ('scheduled', 'retrying');
-- Leases to sweep.
create index steps_leased on workdo.steps (lease_expires_at) where lease_token is not null;
-- Per-object views and WorkDo-style queue queries (waiting at X with Y completed).
create index steps_object on workdo.steps (object_id, template, name);
create index steps_template_status on workdo.steps (template, name, status) where active;

-- Lifecycle milestones per object version (registered, inprocess, released, archived, accessioned…).
create table workdo.milestones (
    id          bigint generated always as identity primary key,
    object_id   text        not null,
    version     integer     not null,
    name        text        not null,
    workflow_id bigint,
    at          timestamptz not null default now()
);
create index milestones_object on workdo.milestones (object_id, at);

-- Append-only audit log of everything that happened.
create table workdo.events (
    id          bigint generated always as identity primary key,
    at          timestamptz not null default now(),
    object_id   text        not null,
    workflow_id bigint,
    template    text,
    version     integer,
    step        text,
    kind        text        not null,
    status      text,
    attempt     integer,
    actor       text,
    detail      jsonb
);
create index events_object on workdo.events (object_id, id);
create index events_workflow on workdo.events (workflow_id, id) where workflow_id is not null;

-- Priority injection in plain SQL: raise (or lower) what the next claim picks. Applies to the
-- unfinished active steps matching every non-null filter; returns how many steps changed.
--   select workdo.prioritize(100, object_id => 'druid:bb123cd4567');
--   select workdo.prioritize(50, template => 'accessionWF', step => 'shelve');
create function workdo.prioritize(
    new_priority integer,
    object_id    text default null,
    template     text default null,
    step         text default null
) returns integer
language sql as $$
    with changed as (
        update workdo.steps s
           set priority = new_priority, updated_at = now()
         where s.active
           and s.status not in ('completed', 'skipped')
           and (prioritize.object_id is null or s.object_id = prioritize.object_id)
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
$$;
