-- 100,000 single-step workflows, ready; 100,000 yardstick rows.
truncate y, objects, workflows, steps, q, events;
insert into y (priority) select g % 3 from generate_series(1, 100000) g;
insert into objects (id) select 'druid:' || lpad(g::text, 7, '0') from generate_series(1, 100000) g;
insert into workflows (id, object_id, unfinished) select g, 'druid:' || lpad(g::text, 7, '0'), 1 from generate_series(1, 100000) g;
insert into steps (id, workflow_id, object_id, template, version, lane, name, status, max_attempts)
  select g, g, 'druid:' || lpad(g::text, 7, '0'), 'bench1', 1, 'default', 'noop', 'ready', 3 from generate_series(1, 100000) g;
insert into q (step_id, workflow_id, object_id, template, name, priority)
  select g, g, 'druid:' || lpad(g::text, 7, '0'), 'bench1', 'noop', g % 3 from generate_series(1, 100000) g;
vacuum analyze;
checkpoint;
