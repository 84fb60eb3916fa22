-- Why: the live tables must stay small (the top complaint about Postgres queues is bloat).
-- `workdo archive` moves finished workflows — each with its steps and events, as one JSON
-- record — here, in batches that lock only what they move; `--purge` deletes them instead.
create table workdo.archive (
    workflow_id  bigint      primary key,
    object_id    text        not null,
    template     text        not null,
    completed_at timestamptz,
    archived_at  timestamptz not null default now(),
    record       jsonb       not null
);
create index archive_object on workdo.archive (object_id);
