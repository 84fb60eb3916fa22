#!/usr/bin/env bash
# The step table over time (issue 52): five rounds of 200,000 one-step workflows started, run by
# `workdo up` (builtin noop) and archived; the step table's size after each round's run and after
# its archive, against one round's live rows written compactly; the share of HOT updates of
# `steps` (and of `ready_queue`, with the narrow queue's patch).
#   bench/ready-queue/scale.sh WORKDO_BINARY postgres://user@host:port/maintenance_db [ROUNDS] [N]
# Creates and drops the database `workdo_scale`. Needs psql on PATH.
set -euo pipefail
bin=$1; admin=$2; rounds=${3:-5}; n=${4:-200000}
db=workdo_scale
url="${admin%/*}/$db"
psql -qX "$admin" -c "drop database if exists $db" -c "create database $db" >/dev/null
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
printf 'name: scaleWF\nsteps:\n  - { name: work, batch-limit: 100, function: { builtin: noop, concurrency: 200 } }\n' > "$work/t.yaml"
export DATABASE_URL=$url
"$bin" templates load "$work/t.yaml" >/dev/null
live=0
for round in $(seq "$rounds"); do
    seq -f "scale:$round:%07g" 1 "$n" > "$work/objects"
    "$bin" start scaleWF --from "$work/objects" >/dev/null
    "$bin" up --listen 127.0.0.1:0 >"$work/up.log" 2>&1 & up=$!
    t0=$(date +%s.%N)
    until [ "$(psql -qXAt "$url" -c "select count(*) from workdo.workflows where status <> 'completed'")" = 0 ]; do sleep 0.5; done
    t1=$(date +%s.%N)
    kill "$up"; wait "$up" || true
    ran=$(psql -qXAt "$url" -c "select pg_relation_size('workdo.steps')")
    if [ "$round" = 1 ]; then
        # One round's live rows, written compactly: the yardstick for the table's size.
        live=$(psql -qXAt "$url" -c "create temporary table one as select * from workdo.steps;
                                      select pg_relation_size('one')")
    fi
    "$bin" archive --finished-before 0s --purge >/dev/null
    size=$(psql -qXAt "$url" -c "select pg_relation_size('workdo.steps')")
    awk -v r="$round" -v n="$n" -v a="$t0" -v b="$t1" -v s="$size" -v p="$ran" -v l="$live" \
        'BEGIN { printf "round %s: %d steps in %.1f s (%.0f steps/s); steps table after the run %.1f MB = %.2fx one round live (%.1f MB), after the archive %.1f MB = %.2fx\n", r, n, b - a, n / (b - a), p / 1048576, p / l, l / 1048576, s / 1048576, s / l }'
done
psql -qXAt "$url" -F ' ' -c "select relname, n_tup_upd, n_tup_hot_upd,
       round(100.0 * n_tup_hot_upd / nullif(n_tup_upd, 0), 1) || '% HOT'
  from pg_stat_user_tables where schemaname = 'workdo' and relname in ('steps', 'ready_queue')
 order by relname"
psql -qX "$admin" -c "drop database $db" >/dev/null
