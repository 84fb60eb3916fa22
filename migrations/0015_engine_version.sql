-- The engine carries a version besides its hash, and the oldest engine version whose binaries
-- still work with it: a binary never applies an engine older than the one recorded (a rolling
-- upgrade's old worker must not swap the new engine back); it runs when the recorded engine
-- says it is compatible, and otherwise exits naming both versions.
alter table workdo.engine
    add column if not exists version integer not null default 0,
    add column if not exists compatible_from integer not null default 0;

-- An alert mail that can never be delivered (the server rejects it for good, or it has been
-- tried MAX_ALERT_ATTEMPTS times) ends `failed`, with its last error, instead of being retried
-- for ever.
alter table workdo.alert_outbox drop constraint alert_outbox_status_check;
alter table workdo.alert_outbox add constraint alert_outbox_status_check
    check (status in ('pending', 'sent', 'folded', 'digested', 'failed'));

-- Idempotency keys: a request (API or CLI) that carries one is applied once; a repeat within
-- 24 hours gets the first answer back and changes nothing. `scope` keeps one caller's keys
-- from another's (a hash of the API token, or `cli`); `fingerprint` what the request was, so
-- a key reused for another request is refused. `status` is null while the first request runs.
create table workdo.idempotency (
    scope       text        not null,
    key         text        not null check (length(key) between 1 and 255),
    fingerprint text        not null,
    status      integer,
    content_type text,
    body        bytea,
    created_at  timestamptz not null default now(),
    primary key (scope, key)
);
create index idempotency_created on workdo.idempotency (created_at);
