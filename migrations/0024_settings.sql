-- Settings every workdo process reads from the database, so that `serve`, `up` and `worker`
-- agree. The first: whether ready robot steps are handed off (`handoff` = 'sidekiq'), which
-- decides whether the workflow service's routes call them `queued` or `waiting` (issue 48).
create table workdo.settings (
    name       text        primary key,
    value      text        not null,
    updated_at timestamptz not null default now()
);
