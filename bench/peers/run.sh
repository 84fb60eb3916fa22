#!/usr/bin/env bash
# The peer DAG: the bench's 8-step DAG on workdo (`workdo bench --only dag`, its in-process
# figure), Graphile Worker (as it ships, and with its local queue of 500), DBOS and Absurd, on one
# Postgres server, interleaved round by round; each peer checks that every step ran exactly once.
#
#   bench/peers/run.sh DATABASE_URL [ROUNDS] [PEER_WORKFLOWS] [CONCURRENCY]
#
# DATABASE_URL names the server (each harness makes databases of its own on it). WORKDO is the
# workdo binary (default: target/release/workdo). The peers' packages are pinned in package.json
# and requirements.txt and installed here on first use (npm ci; a venv in bench/peers/.venv), never
# by a test. Prints each run's JSON line, then the medians.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
url=${1:?usage: run.sh DATABASE_URL [ROUNDS] [PEER_WORKFLOWS] [CONCURRENCY]}
rounds=${2:-3}
n=${3:-1000}
conc=${4:-10}
workdo=${WORKDO:-$here/../../target/release/workdo}
[ -x "$workdo" ] || { echo "no workdo binary at $workdo: cargo build --release, or set WORKDO" >&2; exit 2; }
[ -d "$here/node_modules" ] || (cd "$here" && npm ci --no-audit --no-fund >/dev/null)
[ -x "$here/.venv/bin/python" ] || python3 -m venv "$here/.venv"
"$here/.venv/bin/python" -c "import dbos, absurd_sdk" 2>/dev/null ||
  "$here/.venv/bin/pip" install -q -r "$here/requirements.txt"
base=${url%/*}
out=$(mktemp)
for r in $(seq "$rounds"); do
  DATABASE_URL=$url "$workdo" --json bench --only dag --runs 1 2>/dev/null |
    python3 -c 'import json,sys
for row in json.load(sys.stdin):
    if row["name"] == "DAG (9 steps), in-process functions: steps":
        print(json.dumps({"peer": "workdo (in-process functions)", "steps_per_sec": round(row["median"]), "exactly_once": True}))' | tee -a "$out"
  (cd "$here" && node graphile.mjs "$base/peer_graphile" "$n" "$conc") | tee -a "$out"
  (cd "$here" && node graphile.mjs "$base/peer_graphile" "$n" "$conc" --local-queue) | tee -a "$out"
  "$here/.venv/bin/python" "$here/dbos_dag.py" "$url" "$n" "$conc" 2>/dev/null | tail -1 | tee -a "$out"
  "$here/.venv/bin/python" "$here/absurd_dag.py" "$url" "$n" "$conc" | tee -a "$out"
done
python3 - "$out" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    row = json.loads(line)
    if not row.get("exactly_once"):
        sys.exit(f"{row['peer']}: the exactly-once check failed: {row}")
    runs.setdefault(row["peer"], []).append(row["steps_per_sec"])
ours = statistics.median(runs.pop("workdo (in-process functions)"))
print(f"\nmedians of {len(next(iter(runs.values())))} rounds, steps/s:")
print(f"  workdo (in-process functions): {ours:.0f}")
for peer, v in runs.items():
    m = statistics.median(v)
    print(f"  {peer}: {m:.0f}  (workdo ÷ it: {ours / m:.1f}x; runs {v})")
EOF
rm -f "$out"
