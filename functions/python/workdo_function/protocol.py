"""The function protocol, ``workdo/1``: the event a function gets and the result it answers.

Mirrors ``functions/sdk/src/protocol.rs`` (the protocol's definition) field for field.
"""

from __future__ import annotations

import datetime as _dt
import math
import threading
import time
from contextlib import contextmanager
from collections.abc import Mapping

# Type names are for checkers only: importing `typing` costs a process per call several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

    JSON = Any
    StartSpec = Union[str, Mapping[str, JSON]]
    
PROTOCOL = "workdo/1"

#: The limits the runtime enforces on a result (``runtime/src/invoke/mod.rs``), in UTF-8 bytes.
MAX_RESULT_BYTES = 1024 * 1024
MAX_NOTE_BYTES = 64 * 1024
MAX_MESSAGE_BYTES = 4 * 1024
MAX_TEXT_BYTES = 64 * 1024
#: The furthest a function may defer its step: 10 years.
MAX_DEFER_SECONDS = 10.0 * 365.0 * 86400.0



class Event:
    """One step of one object's workflow to perform: what the runtime sends a function.

    Every field of the protocol is an attribute; the event as it came is ``raw`` (fields a newer
    runtime adds are there). Missing fields get empty defaults, so a test can build an event from
    a few fields: ``Event({"object": "druid:bb123cd4567", "properties": {"title": "Walden"}})``.
    """

    __slots__ = (
        "raw",
        "protocol",
        "step_id",
        "workflow_id",
        "object",
        "template",
        "step",
        "version",
        "lane",
        "attempt",
        "max_attempts",
        "properties",
        "documents",
        "context",
        "traceparent",
        "deadline",
        "call",
        "fragment",
    )

    def __init__(self, raw: Mapping[str, JSON]) -> None:
        if not isinstance(raw, Mapping):
            raise TypeError(f"an event is a JSON object, not {type(raw).__name__}")
        self.raw: Dict[str, JSON] = dict(raw)
        self.protocol: str = _text(raw, "protocol", PROTOCOL)
        self.step_id: int = _int(raw, "step_id")
        self.workflow_id: int = _int(raw, "workflow_id")
        #: The object worked on, e.g. ``druid:bb123cd4567``.
        self.object: str = _text(raw, "object", "")
        self.template: str = _text(raw, "template", "")
        #: The step's name.
        self.step: str = _text(raw, "step", "")
        #: Object version the workflow belongs to.
        self.version: int = _int(raw, "version")
        self.lane: str = _text(raw, "lane", "default")
        #: This attempt's number, from 1.
        self.attempt: int = _int(raw, "attempt", 1)
        self.max_attempts: int = _int(raw, "max_attempts", 1)
        #: The object's properties.
        self.properties: Dict[str, JSON] = _map(raw, "properties")
        #: The object documents the step asked for (``documents:`` in the template).
        self.documents: Dict[str, str] = _map(raw, "documents")
        #: The workflow's context (state variables).
        self.context: Dict[str, JSON] = _map(raw, "context")
        #: W3C trace context of the step's span.
        self.traceparent: Optional[str] = _opt_text(raw, "traceparent")
        #: When the runtime stops waiting (RFC 3339).
        self.deadline: str = _text(raw, "deadline", "")
        #: Warm functions: this call's id; the SDK copies it into the answer.
        self.call: Optional[str] = _opt_text(raw, "call")
        #: A generated step's matched node (dynamic dispatch), or None.
        self.fragment: Optional[str] = _opt_text(raw, "fragment")

    @property
    def bare_object(self) -> str:
        """The object id without its ``druid:`` prefix (``bb123cd4567``)."""
        return self.object[len("druid:") :] if self.object.startswith("druid:") else self.object

    def seconds_left(self) -> Optional[float]:
        """Seconds until ``deadline`` (negative once passed), or None without a readable one."""
        try:
            at = _dt.datetime.fromisoformat(self.deadline.replace("Z", "+00:00"))
        except ValueError:
            return None
        if at.tzinfo is None:
            return None
        return (at - _dt.datetime.now(_dt.timezone.utc)).total_seconds()

    def __repr__(self) -> str:
        return f"Event(object={self.object!r}, step={self.step!r}, attempt={self.attempt}, call={self.call!r})"


def _text(raw: Mapping[str, JSON], key: str, default: str) -> str:
    v = raw.get(key, default)
    if v is None:
        return default
    if not isinstance(v, str):
        raise TypeError(f"the event's {key!r} is {type(v).__name__}, not a string")
    return v


def _opt_text(raw: Mapping[str, JSON], key: str) -> Optional[str]:
    v = raw.get(key)
    if v is not None and not isinstance(v, str):
        raise TypeError(f"the event's {key!r} is {type(v).__name__}, not a string")
    return v


def _int(raw: Mapping[str, JSON], key: str, default: int = 0) -> int:
    v = raw.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"the event's {key!r} is {type(v).__name__}, not an integer")
    return v


def _map(raw: Mapping[str, JSON], key: str) -> Dict[str, JSON]:
    v = raw.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise TypeError(f"the event's {key!r} is {type(v).__name__}, not an object")
    return v


class Outcome:
    """What a function answers. ``status`` is ``completed``, ``skipped``, ``error``, ``defer`` or an
    intermediate status the template declares for the step; the other fields apply as noted in
    ``functions/README.md``. Build one with :func:`completed`, :func:`failed`, :func:`defer`,
    :func:`skipped` or :func:`intermediate`.
    """

    __slots__ = (
        "status",
        "note",
        "lifecycle",
        "properties",
        "documents",
        "context",
        "start",
        "signal",
        "message",
        "text",
        "retryable",
        "until",
        "seconds",
        "elapsed",
        "spans",
        "extra",
    )

    def __init__(self, status: str, **fields: Any) -> None:
        if not isinstance(status, str) or not status:
            raise ValueError(f"a result's status is a non-empty string, not {status!r}")
        self.status = status
        self.note: Optional[str] = None
        self.lifecycle: Optional[str] = None
        #: ``completed``: merged into the object's properties (None removes a key).
        self.properties: Dict[str, JSON] = {}
        #: ``completed``: named documents replaced.
        self.documents: Dict[str, str] = {}
        #: ``completed``: keys merged into the workflow context.
        self.context: Optional[Dict[str, JSON]] = None
        #: ``completed``: workflows to start on this object.
        self.start: List[Dict[str, JSON]] = []
        #: ``completed``, for a state machine's ``call`` action: the signal sent back.
        self.signal: Optional[str] = None
        #: ``error``: short message, long text, whether a retry may help.
        self.message: Optional[str] = None
        self.text: Optional[str] = None
        self.retryable: Optional[bool] = None
        #: ``defer``: not before this RFC 3339 time, or this many seconds from now.
        self.until: Optional[str] = None
        self.seconds: Optional[float] = None
        #: Seconds the work took, if the function measured it better than the runtime can.
        self.elapsed: Optional[float] = None
        #: The function's own trace spans (see :func:`span`).
        self.spans: List[Dict[str, JSON]] = []
        #: Fields of a newer protocol, written as they are.
        self.extra: Dict[str, JSON] = {}
        for k, v in fields.items():
            if k not in self.__slots__:
                raise TypeError(f"a result has no field {k!r}")
            setattr(self, k, v)

    def to_dict(self) -> Dict[str, JSON]:
        """The result as the protocol's JSON object (fields that are not set are left out)."""
        d: Dict[str, JSON] = {"status": self.status}
        for k in ("note", "lifecycle"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        obj: Dict[str, JSON] = {}
        if self.properties:
            obj["properties"] = dict(self.properties)
        if self.documents:
            obj["documents"] = dict(self.documents)
        if obj:
            d["object"] = obj
        if self.context is not None:
            d["context"] = dict(self.context)
        if self.start:
            d["start"] = list(self.start)
        for k in ("signal", "message", "text", "retryable", "until", "seconds", "elapsed"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.spans:
            d["spans"] = list(self.spans)
        d.update(self.extra)
        return d

    def __repr__(self) -> str:
        return f"Outcome({self.to_dict()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and self.to_dict() == other.to_dict()



def _starts(start: Optional[Sequence[StartSpec]]) -> List[Dict[str, JSON]]:
    out: List[Dict[str, JSON]] = []
    if start is None:
        return out
    if isinstance(start, (str, Mapping)):
        start = [start]
    for s in start:
        if isinstance(s, str):
            out.append({"template": s})
        elif isinstance(s, Mapping) and isinstance(s.get("template"), str):
            out.append(dict(s))
        else:
            raise ValueError(f"a workflow to start is a template name or a dict with 'template', not {s!r}")
    return out


def completed(
    note: Optional[str] = None,
    properties: Optional[Mapping[str, JSON]] = None,
    documents: Optional[Mapping[str, str]] = None,
    start: Optional[Sequence[StartSpec]] = None,
    context: Optional[Mapping[str, JSON]] = None,
    lifecycle: Optional[str] = None,
    signal: Optional[str] = None,
) -> Outcome:
    """The step is done. ``properties`` are merged into the object's (None removes a key),
    ``documents`` replace the object's, ``context`` is merged into the workflow's, ``start`` names
    workflows to start on the object (a template name, or a dict with ``template`` and optional
    ``context``, ``priority``, ``lane``, ``start_at``)."""
    o = Outcome("completed", note=note, lifecycle=lifecycle, signal=signal)
    o.properties = dict(properties or {})
    o.documents = dict(documents or {})
    o.context = dict(context) if context is not None else None
    o.start = _starts(start)
    return o


def failed(message: str, retry: bool = True, text: Optional[str] = None, note: Optional[str] = None) -> Outcome:
    """The step failed (status ``error``). With ``retry=True`` (the default) it is retried after a
    back-off until the step's attempts are used; ``retry=False`` sends it straight to ``error``."""
    return Outcome("error", message=str(message), retryable=bool(retry), text=text, note=note)


#: The protocol's own name for :func:`failed`.
error = failed


def defer(
    seconds: Optional[float] = None,
    until: Union[str, _dt.datetime, None] = None,
    note: Optional[str] = None,
) -> Outcome:
    """Not ready yet: try again in ``seconds`` or at ``until`` (an aware datetime or an RFC 3339
    string), without using up an attempt."""
    if (seconds is None) == (until is None):
        raise ValueError("defer takes seconds= or until=, one of them")
    o = Outcome("defer", note=note)
    if seconds is not None:
        s = float(seconds)
        if not math.isfinite(s) or not 0.0 <= s <= MAX_DEFER_SECONDS:
            raise ValueError(f"defer seconds must be from 0 to 10 years, not {seconds!r}")
        o.seconds = s
    elif isinstance(until, _dt.datetime):
        if until.tzinfo is None:
            raise ValueError("defer until= needs an aware datetime (with tzinfo), not a naive one")
        o.until = until.isoformat()
    else:
        o.until = str(until)
    return o


def skipped(note: Optional[str] = None) -> Outcome:
    """Nothing to do; counts as finished."""
    return Outcome("skipped", note=note)


def intermediate(status: str, note: Optional[str] = None) -> Outcome:
    """An intermediate status the template declares for the step (``statuses: [IN PROCESS]``)."""
    return Outcome(status, note=note)


class Failure(Exception):
    """Raise it to fail the step with this message (no traceback): ``raise Failure("no title",
    retry=False)``. Any other exception fails the step too, with its traceback."""

    def __init__(self, message: str, retry: bool = True, text: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = str(message)
        self.retry = retry
        self.text = text

    def outcome(self) -> Outcome:
        return failed(self.message, retry=self.retry, text=self.text)


_spans = threading.local()


def _take_spans() -> List[Dict[str, JSON]]:
    out: List[Dict[str, JSON]] = getattr(_spans, "list", [])
    _spans.list = []
    return out


@contextmanager
def span(name: str, **attributes: str) -> Iterator[None]:
    """Record the block as a span of this call: the runtime shows it in the step's trace."""
    start = time.time_ns()
    try:
        yield
    finally:
        end = time.time_ns()
        rec: Dict[str, JSON] = {"name": name, "start_unix_nano": start, "end_unix_nano": end}
        if attributes:
            rec["attributes"] = {k: str(v) for k, v in attributes.items()}
        if not hasattr(_spans, "list"):
            _spans.list = []
        _spans.list.append(rec)
