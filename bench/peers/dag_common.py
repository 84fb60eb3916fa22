"""What the peer harnesses share: the bench's DAG in an order its prerequisites allow, and a
database's URL on the server the harness was given."""

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
