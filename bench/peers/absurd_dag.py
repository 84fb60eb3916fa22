"""The bench's 8-step DAG on Absurd (absurd-sdk 0.5.1 and absurdctl 0.5.1, PyPI), on the same server
as `workdo bench`.

Each workflow is one Absurd task whose steps (ctx.step, each checkpointed in Postgres) run in an
order the DAG's prerequisites allow; each step records its run (primary key (wf, step): a second
run of a step fails its task). The tasks are spawned first, then one worker with a concurrency
claims and runs them, as the bench starts its workflows before it times them. The exactly-once
check at the end: 8·N runs recorded and no task failed.

    .venv/bin/python absurd_dag.py DATABASE_URL WORKFLOWS [CONCURRENCY]

prints one JSON line: {"peer":"absurd",...,"steps_per_sec":…}. It makes database peer_absurd on
DATABASE_URL's server anew, with Absurd's schema (`absurdctl init`) and a queue.
"""

import os
import subprocess
import sys
import threading
import time

import psycopg
from absurd_sdk import Absurd

from dag_common import STEPS, arguments, report, with_database


def main() -> int:
    args = arguments("absurd_dag.py")
    if args is None:
        return 2
    url, n, concurrency = args
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as c:
        c.execute("drop database if exists peer_absurd with (force)")
        c.execute("create database peer_absurd")
    db = with_database(url, "peer_absurd")
    ctl = os.path.join(os.path.dirname(sys.executable), "absurdctl")
    env = dict(os.environ, ABSURD_DATABASE_URL=db)
    for args in (["init"], ["create-queue", "dag"]):
        subprocess.run([ctl, *args], env=env, check=True, capture_output=True)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("create table runs (wf int, step text, primary key (wf, step))")

    runs = psycopg.connect(db, autocommit=True)
    lock = threading.Lock()

    def record(wf: int, step: str) -> bool:
        with lock:
            runs.execute("insert into runs values (%s, %s)", (wf, step))
        return True

    app = Absurd(db, queue_name="dag")

    @app.register_task("dag")
    def dag(params, ctx):
        wf = params["wf"]
        for step in STEPS:
            ctx.step(step, lambda step=step: record(wf, step))
        return wf

    for i in range(1, n + 1):
        app.spawn("dag", {"wf": i}, max_attempts=1)
    began = time.monotonic()
    worker = threading.Thread(
        target=app.start_worker, kwargs={"concurrency": concurrency, "poll_interval": 0.05}
    )
    worker.start()
    done = 0
    with psycopg.connect(db, autocommit=True) as c:
        while done < 8 * n:
            time.sleep(0.02)
            done = c.execute("select count(*) from runs").fetchone()[0]
        secs = time.monotonic() - began
        app.stop_worker()
        worker.join()
        failed = c.execute(
            "select count(*) from absurd.t_dag where state not in ('completed')"
        ).fetchone()[0]
    ok = done == 8 * n and failed == 0
    return report("absurd", n, done, concurrency, secs, ok, tasks_not_completed=failed)


if __name__ == "__main__":
    sys.exit(main())
