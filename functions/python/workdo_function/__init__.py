"""Write a workdo step function in Python.

    from workdo_function import step, completed

    @step
    def run(event):
        return completed(note="ok", properties={"seen": event.object})

The same script is an ``exec`` function (one event on stdin, one result on stdout) and a
``warm`` one (``WORKDO_MODE=warm``: one event per line, one result per line, each carrying its
event's ``call`` back). The protocol is in ``functions/README.md``; the types mirror
``functions/sdk/src/protocol.rs``.
"""

from .protocol import (
    MAX_MESSAGE_BYTES,
    MAX_NOTE_BYTES,
    MAX_RESULT_BYTES,
    MAX_TEXT_BYTES,
    PROTOCOL,
    Event,
    Failure,
    Outcome,
    completed,
    defer,
    error,
    failed,
    intermediate,
    skipped,
    span,
)
from .runner import answer, encode, exception_outcome, run, step

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL",
    "MAX_RESULT_BYTES",
    "MAX_NOTE_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_TEXT_BYTES",
    "Event",
    "Outcome",
    "Failure",
    "completed",
    "failed",
    "error",
    "defer",
    "skipped",
    "intermediate",
    "span",
    "step",
    "run",
    "answer",
    "encode",
    "exception_outcome",
]
