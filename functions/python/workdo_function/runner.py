"""Running a function: exec mode (one event, one result) and warm mode (a line per event and
per answer, each answer carrying its event's ``call`` back), as ``functions/README.md`` says."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Mapping

# Type names are for checkers only: importing `typing` costs a process per call several ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, Callable, Dict, NoReturn, Optional, Tuple, TypeVar, Union

from .protocol import (
    MAX_MESSAGE_BYTES,
    MAX_NOTE_BYTES,
    MAX_RESULT_BYTES,
    MAX_TEXT_BYTES,
    Event,
    Failure,
    Outcome,
    _take_spans,
    completed,
)

if TYPE_CHECKING:
    Result = Union[Outcome, Mapping[str, Any], None]
    Handler = Callable[[Event], Result]
    F = TypeVar("F", bound=Handler)

#: Pipelined calls run at once by a thread-safe function that does not say how many.
DEFAULT_WORKERS = 4
#: Frames of a traceback kept in an error's message (the whole traceback goes in ``text``).
MESSAGE_FRAMES = 5
#: Exit status of a warm process that read a line it cannot answer (see ``_serve_warm``).
EXIT_BAD_INPUT = 2

_SDK_DIR = os.path.dirname(os.path.realpath(__file__)) + os.sep


def step(
    fn: Optional[F] = None, *, thread_safe: bool = False, workers: Optional[int] = None
) -> Any:
    """Declare ``fn`` the step function of its script.

    ``@step`` or ``@step(thread_safe=True, workers=8)``. In the script run as ``__main__`` it
    serves the protocol at once and never returns, so put it last, after everything the function
    uses (or decorate nothing and call :func:`run` at the bottom). Imported, it only returns the
    function unchanged, to call in tests.
    """

    def declare(f: F) -> F:
        f.__workdo_step__ = {"thread_safe": thread_safe, "workers": workers}  # type: ignore[attr-defined]
        if getattr(f, "__module__", None) == "__main__":
            run(f, thread_safe=thread_safe, workers=workers)
        return f

    if fn is None:
        return declare
    return declare(fn)


def run(fn: Handler, *, thread_safe: Optional[bool] = None, workers: Optional[int] = None) -> NoReturn:
    """Serve ``fn`` in the mode the runtime asks (``WORKDO_MODE``: ``warm``, else exec) and exit.

    From here on the process's stdout belongs to the protocol: ``print()``, and anything else
    writing to file descriptor 1 (C extensions, subprocesses), goes to stderr, and stdin reads
    ``/dev/null``, so a subprocess cannot swallow the next event.
    """
    declared = getattr(fn, "__workdo_step__", {})
    if thread_safe is None:
        thread_safe = bool(declared.get("thread_safe", False))
    if workers is None:
        workers = declared.get("workers")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive integer, not {workers!r}")
    try:
        inp, out = _take_stdio()
    except OSError as e:
        sys.stderr.write(f"workdo_function: cannot take stdin/stdout for the protocol: {e}\n")
        sys.exit(EXIT_BAD_INPUT)
    if os.environ.get("WORKDO_MODE") == "warm":
        n = (workers or DEFAULT_WORKERS) if thread_safe else 1
        sys.exit(_serve_warm(fn, inp, out, n))
    _serve_exec(fn, inp, out)
    sys.exit(0)


def answer(fn: Handler, event: Union[Mapping[str, Any], Event]) -> Dict[str, Any]:
    """What the SDK answers for ``event``: the result as a JSON-ready dict, ``call`` copied back.
    Never raises: whatever goes wrong is an ``error`` result. For tests, and for other loops."""
    raw = event.raw if isinstance(event, Event) else event
    call = raw.get("call") if isinstance(raw, Mapping) else None
    call = call if isinstance(call, str) else None
    try:
        ev = event if isinstance(event, Event) else Event(raw)
    except (TypeError, ValueError) as e:
        d = {"status": "error", "message": f"the event is not valid for workdo/1: {e}", "retryable": False}
        return _with_call(d, call)
    _take_spans()
    try:
        result: Any = fn(ev)
    except Failure as f:
        result = f.outcome()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - any error of the function is its step's error
        result = exception_outcome(e)
    d = _as_dict(result)
    spans = _take_spans()
    if spans:
        d.setdefault("spans", [])
        if isinstance(d["spans"], list):
            d["spans"] = d["spans"] + spans
    return _with_call(d, ev.call)


def _with_call(d: Dict[str, Any], call: Optional[str]) -> Dict[str, Any]:
    d.pop("call", None)
    if call is not None:
        d["call"] = call
    return d


def _as_dict(result: Any) -> Dict[str, Any]:
    if result is None:
        return completed().to_dict()
    if isinstance(result, Outcome):
        return result.to_dict()
    if isinstance(result, Mapping):
        d = dict(result)
        if not isinstance(d.get("status"), str):
            return {
                "status": "error",
                "message": f"the function returned a dict without a string 'status': {_short(repr(d), 300)}",
                "retryable": False,
            }
        return d
    return {
        "status": "error",
        "message": f"the function returned {type(result).__name__}, not a result "
        "(completed(), failed(), defer(), skipped(), a dict or None)",
        "retryable": False,
    }


def exception_outcome(e: BaseException) -> Outcome:
    """An ``error`` result for an exception: its type, message and last frames in ``message``
    (within 4 KiB), the whole traceback in ``text`` (within 64 KiB, its end kept)."""
    name = type(e).__qualname__
    module = type(e).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    try:
        said = str(e)
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the answer
        said = "<the exception cannot be shown>"
    if isinstance(e, SystemExit):
        said = f"the function called sys.exit({e.code!r})"
    head = _short(f"{name}: {said}" if said else name, MAX_MESSAGE_BYTES // 2)
    import traceback  # only when something failed

    tb = e.__traceback__
    # The frames of the SDK's own call of the function are left out; the function's are kept.
    while tb is not None and _in_sdk(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    frames = traceback.extract_tb(tb)
    shown = frames[-MESSAGE_FRAMES:]
    listed = ""
    if shown:
        of = f", last {len(shown)} of {len(frames)} frames" if len(shown) < len(frames) else ""
        listed = f"\nTraceback (most recent call last{of}):\n" + "".join(traceback.format_list(shown)).rstrip("\n")
    message = head + listed
    if len(message.encode("utf-8", "replace")) > MAX_MESSAGE_BYTES:
        message = _short(message, MAX_MESSAGE_BYTES)
    try:
        text = "".join(traceback.format_exception(type(e), e, tb))
    except Exception:  # noqa: BLE001
        text = message
    return Outcome("error", message=message, text=_tail(text, MAX_TEXT_BYTES), retryable=True)


def _in_sdk(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_SDK_DIR)


def _short(s: str, limit: int) -> str:
    """``s`` within ``limit`` UTF-8 bytes: its head and a note of how much was cut."""
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return s
    marker = f" … [{len(b)} bytes, cut]"
    keep = limit - len(marker.encode("utf-8"))
    return b[:keep].decode("utf-8", "ignore") + marker


def _tail(s: str, limit: int) -> str:
    """``s`` within ``limit`` UTF-8 bytes: a note of how much was cut and its end."""
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return s
    marker = f"[{len(b)} bytes, the start cut] …\n"
    keep = limit - len(marker.encode("utf-8"))
    return marker + b[len(b) - keep :].decode("utf-8", "ignore")


def _nul_in(v: Any) -> bool:
    if isinstance(v, str):
        return "\x00" in v
    if isinstance(v, Mapping):
        return any(_nul_in(k) or _nul_in(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return any(_nul_in(x) for x in v)
    return False


def encode(d: Dict[str, Any]) -> bytes:
    """The answer line for result ``d`` (without its newline), made safe to send.

    ``note``, ``message`` and ``text`` are cut to the runtime's limits and a NUL in them is
    written ``\\0``; a NUL elsewhere, a value JSON cannot carry (NaN, an object of no JSON type,
    text that is not Unicode) or a result over 1 MiB becomes an ``error`` result saying so, for
    the same call. So an answer never breaks the protocol (which would cost the warm process and
    every call in flight on it).
    """
    call = d.get("call") if isinstance(d.get("call"), str) else None
    d = dict(d)
    for field, limit in (("note", MAX_NOTE_BYTES), ("message", MAX_MESSAGE_BYTES), ("text", MAX_TEXT_BYTES)):
        v = d.get(field)
        if isinstance(v, str):
            d[field] = _short(v.replace("\x00", "\\0"), limit)
    for field in ("status", "lifecycle", "until", "signal", "object", "context", "start"):
        if _nul_in(d.get(field)):
            return _problem(
                f"the function answered a result whose field {field!r} contains a NUL character (U+0000), "
                "which workdo cannot store",
                call,
            )
    try:
        line = json.dumps(d, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as e:
        return _problem(f"the function's result cannot be written as JSON: {e}", call)
    if len(line) + 1 > MAX_RESULT_BYTES:
        return _problem(
            f"the function answered a result of {len(line) + 1} bytes, over the limit of {MAX_RESULT_BYTES}",
            call,
        )
    return line


def _problem(message: str, call: Optional[str]) -> bytes:
    d: Dict[str, Any] = {"status": "error", "message": _short(message, MAX_MESSAGE_BYTES), "retryable": False}
    if call is not None:
        d["call"] = call
    return json.dumps(d, ensure_ascii=True).encode("ascii")


def _take_stdio() -> Tuple[IO[bytes], IO[bytes]]:
    """Keep the real stdin and stdout for the protocol; point fd 1 at stderr and fd 0 at
    /dev/null for everything else (print, C extensions, subprocesses)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    proto_in = os.dup(0)
    proto_out = os.dup(1)  # os.dup's copies are not inherited by subprocesses
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    return os.fdopen(proto_in, "rb"), os.fdopen(proto_out, "wb")


class _Writer:
    """Answers written whole, one at a time, each flushed."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.lock = threading.Lock()

    def write(self, line: bytes) -> None:
        with self.lock:
            try:
                self.out.write(line + b"\n")
                self.out.flush()
            except (BrokenPipeError, OSError, ValueError):
                # The runtime is gone (it closed our stdout): nobody is left to answer.
                os._exit(0)


def _reply(fn: Handler, event: Dict[str, Any], writer: _Writer) -> None:
    try:
        line = encode(answer(fn, event))
    except BaseException as e:  # noqa: BLE001 - the answer must go out whatever happens
        call = event.get("call") if isinstance(event.get("call"), str) else None
        line = _problem(f"workdo_function could not answer: {type(e).__name__}: {e}", call)
    writer.write(line)


def _serve_exec(fn: Handler, inp: IO[bytes], out: IO[bytes]) -> None:
    data = inp.read()
    try:
        event = json.loads(data)
    except ValueError as e:
        event = None
        line = _problem(f"the event is not valid JSON for workdo/1: {e}", None)
    else:
        if isinstance(event, dict):
            line = encode(answer(fn, event))
        else:
            line = _problem(f"the event is a JSON {type(event).__name__}, not an object", None)
    _Writer(out).write(line)
    out.close()


def _serve_warm(fn: Handler, inp: IO[bytes], out: IO[bytes], workers: int) -> int:
    """Answer every event line, each answer carrying the event's ``call``; with ``workers`` > 1,
    up to that many at once, answering in the order they finish. Returns the exit status.

    A line that is not a JSON object with a string ``call`` cannot be answered: an answer without
    its call is a protocol error that gets the process killed anyway, and guessing a call could
    answer another object's. So the process stops reading, answers the calls it has in hand,
    says on stderr what it read (the runtime keeps stderr as the failed calls' text) and exits
    with status 2; the runtime replaces it and retries the calls it had sent.
    """
    writer = _Writer(out)
    pool = None
    if workers > 1:
        # Imported here: a function that runs one call at a time (and every exec call) does not
        # pay for it at start, which is most of a step's time for a process per call.
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="workdo")
    status = 0
    try:
        for line in iter(inp.readline, b""):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as e:
                event, why = None, f"it is not JSON ({e})"
            else:
                why = ""
                if not isinstance(event, dict):
                    why = f"it is a JSON {type(event).__name__}, not an object"
                elif not isinstance(event.get("call"), str):
                    why = "it has no string \"call\" to answer"
            if why:
                sys.stderr.write(
                    f"workdo_function: cannot answer an input line ({why}): {_short(repr(line), 500)}; "
                    "finishing the calls in hand and exiting\n"
                )
                status = EXIT_BAD_INPUT
                break
            if pool is not None:
                pool.submit(_reply, fn, event, writer)
            else:
                _reply(fn, event, writer)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
    return status
