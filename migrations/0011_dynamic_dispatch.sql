-- Why: dynamic dispatch (seed 001). A generator step composes a subnet of steps at run time:
-- those steps belong to one workflow, not to its template, so
--   * their prerequisite edges live per workflow (`workflow_edges`), beside the template's
--     (`edges`), and workdo.apply counts dependants down through both;
--   * they are claimed by the bricklet step they run (`queue`, e.g. `lectureWF:b4/extract`),
--     since their names are unique per workflow (`feature-extraction/b4#2/extract`): one
--     worker serves every instance, through workdo.claim_queue and its own partial index;
--   * each says where it came from (`generated`: generator, bricklet, instance);
--   * a workflow keeps what its observers found and each generator's activation set
--     (`dispatch`), changed transactionally with the observer's completion.

create table workdo.workflow_edges (
    workflow_id bigint not null references workdo.workflows (id) on delete cascade,
    step        text   not null,
    dependant   text   not null,
    primary key (workflow_id, step, dependant)
);

alter table workdo.steps add column queue text;
alter table workdo.steps add column generated jsonb;

create index steps_claim_queue on workdo.steps (queue, priority desc, run_at, id)
    where status = 'ready' and active and queue is not null;

alter table workdo.workflows add column dispatch jsonb not null default '{}'
    check (jsonb_typeof(dispatch) = 'object');

-- Bricklet files are stored as template versions of kind 'bricklet' (versioned by SHA-256 the
-- same way); a name is a template or a bricklet, never both.
alter table workdo.templates drop constraint templates_kind_check;
alter table workdo.templates add constraint templates_kind_check
    check (kind in ('steps', 'machine', 'bricklet'));
