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
# A variant is the claim followed by one completion statement made of these fragments (its data-
# modifying parts run whatever the final select reads).
scripts=$(mktemp -d)
trap 'rm -rf "$scripts"' EXIT
cp y.sql "$scripts/y.sql"
variant() {
    local name=$1; shift
    { cat claim.sql complete-queue.sql; for part in "$@"; do cat "complete-$part.sql"; done
      echo "select count(*) from d;"; } > "$scripts/$name.sql"
}
variant full step-update workflow events
variant no-step-row step-read workflow events
variant no-events step-update workflow
variant queue-only
for round in $(seq "$ROUNDS"); do
    for variant in y full no-step-row no-events queue-only; do
        psql -qX -d "$db" -f fill.sql >/dev/null 2>&1
        tps=$(pgbench -n -c 2 -j 2 -t 500 -f "$scripts/$variant.sql" "$db" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        # Every job of the run was claimed and completed (a fast wrong answer fails).
        if [ "$variant" = y ]; then unfinished="select count(*) from y where status <> 'done'"
        else unfinished="select count(*) from q"; fi
        left=$(psql -qXAt -d "$db" -c "$unfinished")
        [ "$left" = 0 ] || { echo "run.sh: $variant left $left jobs unfinished" >&2; exit 1; }
        awk -v v="$variant" -v r="$round" -v t="$tps" 'BEGIN { printf "%-11s round %s: %8.0f rows/s\n", v, r, t * 100 }'
    done
done
psql -qX -d postgres -c "drop database $db"
