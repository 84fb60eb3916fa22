-- The status a step had before the last statement that counted its change (engine 23). An
-- UPDATE's RETURNING shows only the new row, and a statement that did not lock its rows first
-- (the dependants' count-down) may find a row changed since its snapshot: the statements that
-- change a step's status set `status_before = s.status` (the row they changed, as it was) and
-- count their own deltas from it, instead of a trigger copying every old and new row for them
-- (migrations/engine/70_counts.sql). Meaningful only inside that statement; a nullable column
-- without a default costs no rewrite.
alter table workdo.steps add column status_before text;
