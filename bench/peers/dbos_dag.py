"""The bench's 8-step DAG on DBOS Transact (dbos 3.4, PyPI), on the same server as `workdo bench`.

Each workflow runs the DAG's steps in an order its prerequisites allow (descriptive-metadata,
google-convert, google-download, process-content, shelve, publish, sdr-ingest-transfer,
cleanup), each step a DBOS step that records its run (primary key (wf, step): a second
run of a step fails its workflow). The workflows are enqueued on one queue with a worker
concurrency, as many at once as the bench's. The exactly-once check at the end: 8·N runs
recorded and every workflow succeeded.

    .venv/bin/python dbos_dag.py DATABASE_URL WORKFLOWS [CONCURRENCY]

prints one JSON line: {"peer":"dbos",...,"steps_per_sec":…}. DATABASE_URL names a server; the
harness uses two databases on it, peer_dbos (the runs) and peer_dbos_sys (DBOS's own), made anew.
"""

import sys
import time

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig

from dag_common import STEPS, arguments, report, with_database


def main() -> int:
    args = arguments("dbos_dag.py")
    if args is None:
        return 2
    url, n, concurrency = args
    admin = sa.create_engine(with_database(url, "postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        for db in ("peer_dbos", "peer_dbos_sys"):
            c.execute(sa.text(f"drop database if exists {db} with (force)"))
            c.execute(sa.text(f"create database {db}"))
    app_url = with_database(url, "peer_dbos")
    app = sa.create_engine(app_url, pool_size=concurrency + 2)
    with app.begin() as c:
        c.execute(sa.text("create table runs (wf int, step text, primary key (wf, step))"))

    config: DBOSConfig = {
        "name": "peer-dag",
        "system_database_url": with_database(url, "peer_dbos_sys"),
    }
    DBOS(config=config)

    # DBOS 3 has no application database: a step writes through a pool of its own, and DBOS
    # checkpoints its end in its system database (a second commit).
    @DBOS.step()
    def run_step(wf: int, step: str) -> None:
        with app.begin() as c:
            c.execute(sa.text("insert into runs values (:wf, :step)"), {"wf": wf, "step": step})

    @DBOS.workflow()
    def dag(wf: int) -> int:
        for step in STEPS:
            run_step(wf, step)
        return wf

    DBOS.launch()
    # Polled every 50 ms (its default is 1 s).
    queue = DBOS.register_queue("dag", worker_concurrency=concurrency, polling_interval_sec=0.05)
    began = time.monotonic()
    handles = [queue.enqueue(dag, i) for i in range(1, n + 1)]
    finished = sum(1 for h in handles if h.get_result() is not None)
    secs = time.monotonic() - began
    with app.connect() as c:
        runs = c.execute(sa.text("select count(*) from runs")).scalar_one()
    DBOS.destroy()
    ok = finished == n and runs == 8 * n
    return report("dbos", n, runs, concurrency, secs, ok)


if __name__ == "__main__":
    sys.exit(main())
