-- Why: people hear about steps that exhaust their attempts, and calendar work runs on time, once.
-- Alerts go through an outbox written in the same transaction that puts a step in `error`, so
-- none is lost; a sender claims rows with SKIP LOCKED, so none is sent twice by two runtimes.
-- Throttling folds a burst into one mail per template step per interval plus a digest.
-- Schedules are rows claimed with SKIP LOCKED whose next fire time advances in the same
-- transaction that starts their workflows: each tick fires once, however many runtimes run.

create table workdo.alert_outbox (
    id          bigint generated always as identity primary key,
    created_at  timestamptz not null default now(),
    -- step_error: a step reached its attempt limit; stuck: the monitor's list
    kind        text        not null check (kind in ('step_error', 'stuck')),
    template    text,
    step        text,
    object_id   text,
    workflow_id bigint,
    -- the template's recipients; empty means the global default
    recipients  text[]      not null default '{}',
    payload     jsonb       not null,
    -- pending → sent, or pending → folded → digested (throttled into a digest)
    status      text        not null default 'pending'
                check (status in ('pending', 'sent', 'folded', 'digested')),
    attempts    integer     not null default 0,
    next_attempt_at timestamptz not null default now(),
    last_error  text,
    sent_at     timestamptz
);
create index alert_outbox_pending on workdo.alert_outbox (next_attempt_at) where status = 'pending';
create index alert_outbox_folded on workdo.alert_outbox (template, step) where status = 'folded';

-- When a mail last went out per template step (throttle), and per monitor.
create table workdo.alert_throttle (
    key          text        primary key,
    last_sent_at timestamptz not null
);

create table workdo.schedules (
    name          text        primary key check (length(name) between 1 and 200),
    cron          text        not null,
    timezone      text        not null default 'UTC',
    template      text        not null,
    -- which objects: {"ids": [...]} or {"property": "embargo_until", "before": "now"}
    -- or {"property": "k", "equals": v}
    objects       jsonb       not null,
    restart       boolean     not null default false,
    enabled       boolean     not null default true,
    next_fire_at  timestamptz not null,
    last_fired_at timestamptz,
    origin        text,
    updated_at    timestamptz not null default now()
);
create index schedules_due on workdo.schedules (next_fire_at) where enabled;

-- Events that concern no single object (a schedule firing) have no object id.
alter table workdo.events alter column object_id drop not null;
