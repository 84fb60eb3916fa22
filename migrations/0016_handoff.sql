-- The hand-off to Sidekiq robots (`workdo up --sidekiq-redis URL`): as the workflow service
-- does, a step that becomes ready and that no workdo function runs is pushed, as a Sidekiq job,
-- to the queue its robot reads. `handoff_steps` names the template steps handed off (written by
-- the runtime that pushes, from the loaded templates); `handoff_outbox` holds one row per
-- readiness of such a step, inserted by a trigger in the transaction that makes it ready, so a
-- crash neither loses a push nor makes two for one readiness (beyond Redis's own at-least-once:
-- a push whose commit is lost is sent again).
create table workdo.handoff_steps (
    template text not null,
    step     text not null,
    primary key (template, step)
);

create table workdo.handoff_outbox (
    id              bigint generated always as identity primary key,
    step_id         bigint      not null,
    -- when the step became ready: with step_id, one row per readiness
    ready_at        timestamptz not null,
    object_id       text        not null,
    template        text        not null,
    step            text        not null,
    lane            text        not null,
    created_at      timestamptz not null default now(),
    pushed_at       timestamptz,
    queue           text,
    jid             text,
    attempts        integer     not null default 0,
    next_attempt_at timestamptz not null default now(),
    last_error      text,
    unique (step_id, ready_at)
);
create index handoff_outbox_due on workdo.handoff_outbox (next_attempt_at) where pushed_at is null;
