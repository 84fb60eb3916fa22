#!/usr/bin/env bash
# Instructions per step of workdo's batch-1 hot path, counted by callgrind in a single-user
# Postgres (BENCHMARKS.md, item 20). Instruction counts repeat run after run whatever else the
# shared machine is doing, so a change of a few percent shows, where timings on this host
# swing by 2x from one day to the next. Needs valgrind, the PostgreSQL server binaries (PATH,
# PGBIN or /usr/lib/postgresql/*/bin) and a workdo binary:
#   bench/callgrind/run.sh [target/release/workdo]        # STEPS=1500 by default
# Prints instructions per step for the claim alone and for claim + completion, each over
# STEPS single-step workflows, one statement (and one commit) per step. To count a variant:
# SETUP=file.sql is run in the bench database before counting (e.g. a changed function), and
# CLAIM='select count(*) from … c' replaces the claim (its rows named c, with id and
# lease_token, feed the completion).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
workdo="$(realpath "${1:-$here/../../target/release/workdo}")"
steps="${STEPS:-1500}"
PGBIN="${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)}"
PATH="$PGBIN:$PATH"
for tool in psql postgres valgrind; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool not found: install PostgreSQL and valgrind (apt-get install postgresql valgrind) or set PGBIN" >&2; exit 1; }
done
[ -x "$workdo" ] || { echo "run.sh: no workdo binary at $workdo (cargo build --release)" >&2; exit 1; }
# Postgres will not run as root.
as_pg=()
work=$(mktemp -d)
if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); chown postgres "$work"; fi
trap '"$workdo" --data-dir "$work/cluster" db stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# A private cluster with workdo's schema and the bench's one-step template (a quick bench run
# makes both), then 2 x STEPS ready single-step workflows, vacuumed.
"$workdo" --data-dir "$work/cluster" bench --only queue --quick --runs 1 >/dev/null
url="$("$workdo" --data-dir "$work/cluster" db url)"
PGOPTIONS="-c client_min_messages=warning" psql -qX -v ON_ERROR_STOP=1 "${url%/*}/workdo_bench" -v n="$((steps * 2))" -f "$here/fill.sql" >/dev/null
if [ -n "${SETUP:-}" ]; then
    PGOPTIONS="-c client_min_messages=warning" psql -qX -v ON_ERROR_STOP=1 "${url%/*}/workdo_bench" -f "$SETUP" >/dev/null
fi
"$workdo" --data-dir "$work/cluster" db stop >/dev/null

claim="${CLAIM:-select count(*) from workdo.claim('benchOneWF', 'work', null, 1, 'cg', 300) c}"
complete="$claim, lateral workdo.apply(array[c.id], array['completed'], array[null]::text[], array[null]::text[], array[null]::text[], array[null]::text[], array[null]::float8[], array[null]::timestamptz[], array[0], array[false], array[c.lease_token], array['completed'], array[null]::jsonb[], 'cg') a"
for variant in claim complete; do
    cp -a "$work/cluster/pgdata" "$work/$variant"
    sql="$claim"; [ "$variant" = complete ] && sql="$complete"
    for _ in $(seq "$steps"); do echo "$sql"; done > "$work/$variant.sql"
    ( "${as_pg[@]}" valgrind --tool=callgrind --callgrind-out-file="$work/$variant.out" \
        postgres --single -D "$work/$variant" -c jit=off workdo_bench \
        < "$work/$variant.sql" > "$work/$variant.log" 2>&1 ) &
done
wait
for variant in claim complete; do
    # Each statement printed one row: the claim 1, claim + completion 2 (the step, its workflow).
    want=1; [ "$variant" = complete ] && want=2
    got=$(grep -c "count = \"$want\"" "$work/$variant.log" || true)
    [ "$got" = "$steps" ] || { echo "run.sh: $variant: $got of $steps statements did their work" >&2; tail -5 "$work/$variant.log" >&2; exit 1; }
    total=$(sed -n 's/.*I *refs: *\([0-9,]*\).*/\1/p' "$work/$variant.log" | tr -d ,)
    awk -v v="$variant" -v t="$total" -v n="$steps" 'BEGIN { printf "%-9s %6.0fk instructions per step (%d steps)\n", v, t / n / 1000, n }'
done
