-- The narrow ready queue (engine 26). A step's wide row in workdo.steps is written when its
-- workflow starts, when it becomes ready, and when it finishes; what changes while it is ready,
-- claimed and leased lives here, in a row a step gets when it becomes ready and loses when its
-- completion (or any other change of status) commits.
--
-- Why: a step wrote four versions of its wide row (waiting, ready, started, completed), none of
-- them HOT, because status and lease sat in the claim index's key and predicates; each version
-- reached the primary key and (workflow_id, name), and the table sat at about 4x its live size.
-- Here a claim is an update of a narrow row whose indexed columns it does not change (the claim
-- index has no predicate on the lease), so it is HOT; the wide row goes from `ready` to its end
-- in one version.
--
-- Invariants (ARCHITECTURE.md, "The narrow ready queue"):
--   * a step is in workdo.ready_queue exactly when its wide row is `ready` and active;
--   * a leased row (lease_token not null) is a step that is `started`: its status is read as
--     `started`, its attempts and started_at as the queue row's (workdo.step_rows);
--   * an unleased row's attempts equal its wide row's;
--   * commits lock a step's queue row before its wide row, each in id order.
create table workdo.ready_queue (
    step_id          bigint      primary key,
    workflow_id      bigint      not null,
    object_id        text        not null,
    template         text        not null,
    version          integer     not null,
    name             text        not null,
    queue            text,
    lane             text        not null,
    priority         integer     not null,
    run_at           timestamptz not null,
    attempts         workdo.count    not null,
    max_attempts     workdo.positive not null,
    lease_owner      text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    started_at       timestamptz,
    check ((lease_token is null) = (lease_expires_at is null))
) with (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02,
      autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);

-- The claim's order; no predicate on the lease, so a claim (which sets only unindexed columns)
-- is a HOT update. A claim skips the leased rows at the head of its step's queue.
create index ready_queue_claim on workdo.ready_queue (template, name, priority desc, run_at, step_id);
create index ready_queue_claim_queue on workdo.ready_queue (queue, priority desc, run_at, step_id)
    where queue is not null;

-- The steps ready or started under a lease move in.
insert into workdo.ready_queue
    (step_id, workflow_id, object_id, template, version, name, queue, lane, priority, run_at,
     attempts, max_attempts, lease_owner, lease_token, lease_expires_at, started_at)
select id, workflow_id, object_id, template, version, name, queue, lane, priority, run_at,
       attempts, max_attempts, lease_owner, lease_token, lease_expires_at,
       case when status = 'started' then started_at end
  from workdo.steps
 where active and (status = 'ready' or (status = 'started' and lease_token is not null));
update workdo.steps
   set status = 'ready', lease_owner = null, lease_token = null, lease_expires_at = null
 where status = 'started' and lease_token is not null;
-- The counts of ready and started steps are taken afresh at the next fold (engine/70_counts.sql).
insert into workdo.step_count_deltas (template, name, status, n, first_id)
values ('', '', 'recount', 0, 0);

drop index workdo.steps_claim;
drop index workdo.steps_claim_queue;
drop index workdo.steps_leased;
-- The queue reads and the page find ready steps through steps_open now (it held waiting,
-- scheduled, retrying and the rest a robot may set): a ready wide row is written once, and a
-- step a robot marks started without a lease is rare.
drop index workdo.steps_open;
create index steps_open on workdo.steps (template, name, status)
    where active and status not in ('completed', 'skipped');

-- A step as readers know it: the wide row with what its queue row holds while it is ready or
-- started. The join is dropped by the planner when a query uses none of the queue's columns.
create view workdo.step_rows as
select s.id, s.workflow_id, s.object_id, s.template, s.version, s.lane, s.active, s.name,
       case when r.lease_token is not null then 'started' else s.status end as status,
       s.prereqs, s.pending, s.priority, s.run_at,
       coalesce(r.attempts, s.attempts) as attempts,
       s.max_attempts, s.lifecycle, s.note, s.error_message, s.error_text, s.elapsed,
       r.lease_owner, r.lease_token, r.lease_expires_at,
       s.created_at, s.updated_at,
       case when r.lease_token is not null then r.started_at else s.started_at end as started_at,
       s.finished_at, s.queue, s.generated,
       -- the wide row's own status, `ready` for a leased step: a condition on it can use
       -- steps_open where one on `status` cannot
       s.status as wide_status
  from workdo.steps s
  left join workdo.ready_queue r on r.step_id = s.id;
