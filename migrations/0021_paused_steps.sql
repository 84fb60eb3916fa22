-- Pausing a queue (`workdo pause TEMPLATE:STEP`, the admin page's Pause): while a row is here,
-- workdo.claim and workdo.claim_queue take none of that step's ready steps, so every worker of
-- it, in every process, stops claiming at once; steps keep becoming ready and wait. `step` is a
-- template step, or for generated steps their bricklet step (`bricklet/step`, the key a
-- generated step's worker claims by). What is running goes on to its end.
create table workdo.paused_steps (
    template  text        not null,
    step      text        not null,
    paused_at timestamptz not null default now(),
    paused_by text        not null,
    reason    text,
    primary key (template, step)
);
