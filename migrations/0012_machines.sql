-- Why: workflows as described state machines (seed 002). A machine job is a workflow row
-- (same objects, event log, API) whose `machine` holds its state and state variables; a job's
-- transitions are serialised by a row lock on it. Signals wait in an inbox (`signals`) until a
-- transition takes them: self-stimulated signals, alarms that fired, function results and
-- `workdo.signal` from SQL are rows committed with whatever produced them, so a crash between a
-- transition and its follow-up loses nothing and runs nothing twice. Alarms are rows claimed
-- with SKIP LOCKED, like schedules. Children record their parent. A token may be scoped to one
-- job and some of its signals. Machine mail goes through the alert outbox.

alter table workdo.workflows add column machine jsonb
    check (machine is null or jsonb_typeof(machine) = 'object');
alter table workdo.workflows add column parent_id bigint
    references workdo.workflows (id) on delete set null;
create index workflows_parent on workdo.workflows (parent_id) where parent_id is not null;

create table workdo.signals (
    id           bigint generated always as identity primary key,
    workflow_id  bigint      not null references workdo.workflows (id) on delete cascade,
    signal       text        not null,
    data         jsonb       not null default '{}',
    actor        text        not null,
    created_at   timestamptz not null default now(),
    processed_at timestamptz,
    -- what became of it: the state it led to, or why it was refused or rolled back
    outcome      text
);
create index signals_pending on workdo.signals (workflow_id, id) where processed_at is null;

create table workdo.alarms (
    id           bigint generated always as identity primary key,
    workflow_id  bigint      not null references workdo.workflows (id) on delete cascade,
    -- the state it was set in: leaving it cancels the alarm
    state        text        not null,
    signal       text        not null,
    due_at       timestamptz not null,
    created_at   timestamptz not null default now(),
    fired_at     timestamptz,
    cancelled_at timestamptz
);
create index alarms_due on workdo.alarms (due_at) where fired_at is null and cancelled_at is null;
create index alarms_of on workdo.alarms (workflow_id) where fired_at is null and cancelled_at is null;

alter table workdo.tokens add column workflow_id bigint
    references workdo.workflows (id) on delete cascade;
alter table workdo.tokens add column signals text[];

alter table workdo.alert_outbox drop constraint alert_outbox_kind_check;
alter table workdo.alert_outbox add constraint alert_outbox_kind_check
    check (kind in ('step_error', 'stuck', 'mail'));
