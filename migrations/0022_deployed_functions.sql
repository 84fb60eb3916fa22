-- Deployed functions (`workdo functions deploy NAME PATH`): a step function stored in Postgres,
-- content-addressed by SHA-256, so any worker with nothing but DATABASE_URL runs it, and each
-- workflow runs the versions that were current when it started, whatever is deployed later.

-- The bytes, once per content: a file as it is, a folder as a tar archive. Deploying the same
-- bytes under another name or again stores nothing new.
create table workdo.function_artifacts (
    sha256     text        primary key check (sha256 ~ '^[0-9a-f]{64}$'),
    archive    boolean     not null,
    size       bigint      not null check (size >= 0),
    bytes      bytea       not null,
    created_at timestamptz not null default now()
);

-- Each deployment of a name is a version, 1, 2, …; `entry` is the file an archive runs.
create table workdo.functions (
    name        text        not null check (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'),
    version     integer     not null check (version >= 1),
    sha256      text        not null references workdo.function_artifacts (sha256),
    entry       text,
    note        text,
    deployed_by text        not null,
    deployed_at timestamptz not null default now(),
    primary key (name, version)
);

-- Which version of a name new workflows pin: moved by a deploy and by a rollback.
create table workdo.function_current (
    name    text    primary key,
    version integer not null,
    foreign key (name, version) references workdo.functions (name, version)
);

-- What each workflow pinned when it started (a row only for the deployed functions its template
-- names), moved only by `retry --current-functions`. No foreign key to workflows: one would add
-- a lookup here to every workflow the archive deletes, pinned or not; the archive and
-- `workflows delete` delete a workflow's pins themselves, and pins are only ever read joined
-- to an unfinished workflow, so a left-over row holds nothing.
create table workdo.workflow_functions (
    workflow_id bigint  not null,
    name        text    not null,
    version     integer not null,
    primary key (workflow_id, name),
    foreign key (name, version) references workdo.functions (name, version)
);
create index workflow_functions_version on workdo.workflow_functions (name, version);

-- Which template versions still have unfinished workflows: a runtime runs each such version's
-- own function definitions for its steps (a workflow is locked to the description it started
-- with), and asks this once per worker set change, not per claim.
create index workflows_active_version on workdo.workflows (template_id) where status = 'active';
