"""What the peer harnesses share: their arguments, the bench's DAG in an order its prerequisites
allow, a database's URL on the server the harness was given, and the line each prints."""

import json
import sys
from urllib.parse import urlsplit, urlunsplit

STEPS = [
    "descriptive-metadata",
    "google-convert",
    "google-download",
    "process-content",
    "shelve",
    "publish",
    "sdr-ingest-transfer",
    "cleanup",
]


def with_database(url: str, name: str) -> str:
    """`url` naming database `name` (a `postgres://` scheme becomes SQLAlchemy's `postgresql://`)."""
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    return urlunsplit((scheme, parts.netloc, "/" + name, parts.query, ""))


def arguments(script: str) -> tuple[str, int, int] | None:
    """DATABASE_URL, WORKFLOWS (2,000) and CONCURRENCY (10) from the command line, or None after
    printing the usage of `script`."""
    if len(sys.argv) < 2:
        print(f"usage: {script} DATABASE_URL WORKFLOWS [CONCURRENCY]", file=sys.stderr)
        return None
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    return sys.argv[1], n, concurrency


def report(peer: str, workflows: int, steps: int, concurrency: int, secs: float, ok: bool,
           **more) -> int:
    """Print the run's JSON line (what run.sh reads) and return the harness's exit status."""
    row = {
        "peer": peer,
        "workflows": workflows,
        "steps": steps,
        "concurrency": concurrency,
        "secs": round(secs, 3),
        "steps_per_sec": round(steps / secs),
        "exactly_once": ok,
    }
    print(json.dumps({**row, **more}))
    return 0 if ok else 1
