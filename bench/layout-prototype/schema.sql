-- Tables of the prototype: the yardstick (y), and the narrow queue (q) next to wide step rows shaped
-- like workdo.steps, with workflows, objects and events shaped like the engine's.
create table y (id bigint generated always as identity primary key, priority int not null default 0,
  run_at timestamptz not null default now(), status text not null default 'ready');
create index y_ready on y (priority desc, run_at, id) where status = 'ready';
create table objects (id text primary key, properties jsonb not null default '{}');
create table workflows (id bigint primary key, object_id text not null, unfinished int not null,
  status text not null default 'active', completed_at timestamptz, context jsonb not null default '{}',
  trace_context text) with (fillfactor = 50);
create table steps (
    id bigint primary key, workflow_id bigint not null, object_id text not null, template text not null,
    version int not null, lane text not null, active boolean not null default true, name text not null,
    status text not null check (status ~ '^[A-Za-z][A-Za-z0-9 _.-]{0,63}$'),
    prereqs text[] not null default '{}', pending int not null default 0 check (pending >= 0),
    priority int not null default 0, run_at timestamptz not null default now(),
    attempts int not null default 0, max_attempts int not null default 3, lifecycle text, note text,
    error_message text, error_text text, elapsed float8,
    created_at timestamptz not null default now(), updated_at timestamptz not null default now(),
    started_at timestamptz, finished_at timestamptz, unique (workflow_id, name)) with (fillfactor = 80);
create index steps_open on steps (template, name, status) where active and status not in ('ready', 'started', 'completed', 'skipped');
create index steps_due on steps (run_at) where status in ('scheduled', 'retrying');
create table q (step_id bigint primary key, workflow_id bigint not null, object_id text not null,
  template text not null, name text not null, priority int not null default 0,
  run_at timestamptz not null default now(), lease_token uuid, lease_owner text,
  lease_expires_at timestamptz, attempts int not null default 0);
create index q_claim on q (template, name, priority desc, run_at, step_id) where lease_token is null;
create table events (id bigint generated always as identity primary key, at timestamptz not null default now(),
  object_id text not null, workflow_id bigint, template text, version int, step text, kind text not null,
  status text, attempt int, actor text, detail jsonb);
create index events_object on events (object_id, id);
