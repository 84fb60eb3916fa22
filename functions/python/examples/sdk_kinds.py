#!/usr/bin/env python3
"""A step function that answers what the object asks for, to test the SDK end to end.

Object property ``want``: ``completed`` (the default), ``failed`` (retryable), ``failed_final``
(not retryable), ``defer`` (``defer_seconds``, default 3600), ``skipped``, ``raise`` (an
exception), ``print`` (prints to stdout, which must not reach the protocol, then completes).
``sleep_ms`` sleeps first. Thread-safe: pipelined events run four at a time.

Runs from the source tree without installing the package: ``python3 functions/python/examples/sdk_kinds.py``.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from workdo_function import completed, defer, failed, skipped, step  # noqa: E402


def boom(what):
    raise ValueError(f"asked to raise for {what}")


@step(thread_safe=True, workers=4)
def run(event):
    props = event.properties
    ms = props.get("sleep_ms")
    if ms:
        time.sleep(float(ms) / 1000.0)
    want = props.get("want", "completed")
    if want == "failed":
        return failed(f"failed as asked on attempt {event.attempt}")
    if want == "failed_final":
        return failed("failed for good as asked", retry=False)
    if want == "defer":
        return defer(seconds=float(props.get("defer_seconds", 3600)), note="not ready, as asked")
    if want == "skipped":
        return skipped(note="skipped as asked")
    if want == "raise":
        boom(event.object)
    if want == "print":
        print("print() from the function, on stdout as far as it knows")
        sys.stdout.flush()
        os.write(1, b"raw write to fd 1\n")
        subprocess.run(["echo", "a subprocess's stdout"], check=True)
    return completed(
        note=f"answered {want} for {event.object}",
        properties={"answered_for": event.object, "attempt": event.attempt},
    )
