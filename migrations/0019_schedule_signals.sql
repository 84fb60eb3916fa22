-- A schedule may send a signal to the jobs of a machine (in a given state) instead of starting
-- workflows (seed 002's timed nudges; `signal:` and `jobs:` in a schedules file). `template` is
-- then the machine whose jobs are signalled, and `objects` '{}' unless it narrows them.
alter table workdo.schedules
    add column signal text,
    add column state  text;
