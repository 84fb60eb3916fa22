#!/usr/bin/env bash
# What a narrow-queue layout would reach against the yardstick (BENCHMARKS.md, "What the
# layout change would reach"). pgbench, 2 clients, claims of 100, 100,000 jobs per run; each
# variant is run after a fresh fill, alternating, ROUNDS times. Needs psql and pgbench on PATH
# (or PGBIN) and a server to create the database `workdo_layout_prototype` on:
#   PGHOST=127.0.0.1 PGPORT=5432 PGUSER=postgres bench/layout-prototype/run.sh
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
cd "$(dirname "$0")"
PGBIN="${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)}"
PATH="$PGBIN:$PATH"
for tool in psql pgbench; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found: install PostgreSQL (apt-get install postgresql) or set PGBIN" >&2; exit 1; }
done
ROUNDS="${ROUNDS:-2}"
db=workdo_layout_prototype
psql -qX -d postgres -c "drop database if exists $db" -c "create database $db"
psql -qX -d "$db" -f schema.sql
for round in $(seq "$ROUNDS"); do
    for variant in y p p_nosteps p_noevents p_queueonly; do
        psql -qX -d "$db" -f fill.sql >/dev/null 2>&1
        tps=$(pgbench -n -c 2 -j 2 -t 500 -f "$variant.sql" "$db" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        awk -v v="$variant" -v r="$round" -v t="$tps" 'BEGIN { printf "%-12s round %s: %8.0f rows/s\n", v, r, t * 100 }'
    done
done
psql -qX -d postgres -c "drop database $db"
