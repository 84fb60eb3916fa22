"""Tests of the Python SDK: the helpers, and real processes of sample functions in exec and warm
mode. Standard library only:

    python3 -m unittest discover -s functions/python/tests -v
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # functions/python
sys.path.insert(0, ROOT)

import workdo_function as wf  # noqa: E402

KINDS = os.path.join(ROOT, "examples", "sdk_kinds.py")
PUBLISH = os.path.join(ROOT, "publish.py")


def event(obj: str = "druid:bb123cd4567", call: Optional[str] = None, **props: Any) -> Dict[str, Any]:
    e: Dict[str, Any] = {
        "protocol": "workdo/1",
        "step_id": 4711,
        "workflow_id": 815,
        "object": obj,
        "template": "sdkWF",
        "step": "run",
        "version": 1,
        "lane": "default",
        "attempt": 2,
        "max_attempts": 5,
        "properties": props,
        "documents": {"descMetadata": "<mods/>"},
        "context": {"batch": "2026-11"},
        "deadline": "2099-11-22T04:31:07.120Z",
        "novel_field": [1, 2],
    }
    if call is not None:
        e["call"] = call
    return e


def run_exec(script: str, ev: Any, env: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any], str, int]:
    """One exec call: the result, stderr, exit status. Fails unless stdout is exactly one line."""
    data = ev if isinstance(ev, (bytes, str)) else json.dumps(ev)
    if isinstance(data, str):
        data = data.encode()
    p = subprocess.run(
        [sys.executable, script],
        input=data,
        capture_output=True,
        timeout=60,
        env={**os.environ, "WORKDO_MODE": "exec", **(env or {})},
    )
    lines = p.stdout.decode().splitlines()
    assert len(lines) == 1, f"stdout is not one result line: {p.stdout!r} (stderr {p.stderr!r})"
    return json.loads(lines[0]), p.stderr.decode(), p.returncode


def run_warm(
    script: str, lines: List[Any], env: Optional[Dict[str, str]] = None
) -> Tuple[List[Dict[str, Any]], str, int, float]:
    """A warm process fed all `lines` at once (as a pipelining runtime would), then its stdin
    closed: its answers in the order written, stderr, exit status, seconds taken."""
    data = b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines)
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, script],
        input=data,
        capture_output=True,
        timeout=60,
        env={**os.environ, "WORKDO_MODE": "warm", **(env or {})},
    )
    took = time.monotonic() - t0
    answers = [json.loads(line) for line in p.stdout.decode().splitlines()]
    return answers, p.stderr.decode(), p.returncode, took


class Helpers(unittest.TestCase):
    def test_results_have_the_protocols_shape(self) -> None:
        self.assertEqual(
            wf.completed(
                note="ok",
                properties={"pages": 12, "old": None},
                documents={"descMetadata": "<mods/>"},
                context={"k": "v"},
                start=["accessionWF", {"template": "nextWF", "priority": 5}],
                lifecycle="described",
            ).to_dict(),
            {
                "status": "completed",
                "note": "ok",
                "lifecycle": "described",
                "object": {"properties": {"pages": 12, "old": None}, "documents": {"descMetadata": "<mods/>"}},
                "context": {"k": "v"},
                "start": [{"template": "accessionWF"}, {"template": "nextWF", "priority": 5}],
            },
        )
        self.assertEqual(wf.completed().to_dict(), {"status": "completed"})
        self.assertEqual(
            wf.failed("catalogue down").to_dict(),
            {"status": "error", "message": "catalogue down", "retryable": True},
        )
        self.assertEqual(
            wf.failed("bad record", retry=False, text="trace").to_dict(),
            {"status": "error", "message": "bad record", "text": "trace", "retryable": False},
        )
        self.assertEqual(wf.defer(seconds=600, note="scan").to_dict(), {"status": "defer", "note": "scan", "seconds": 600.0})
        self.assertEqual(
            wf.defer(until="2026-12-01T09:00:00Z").to_dict(), {"status": "defer", "until": "2026-12-01T09:00:00Z"}
        )
        import datetime as dt

        self.assertEqual(
            wf.defer(until=dt.datetime(2026, 12, 1, 9, tzinfo=dt.timezone.utc)).to_dict()["until"],
            "2026-12-01T09:00:00+00:00",
        )
        for bad in ({}, {"seconds": 1, "until": "x"}, {"seconds": -1}, {"seconds": float("nan")}, {"until": dt.datetime(2026, 1, 1)}):
            with self.assertRaises(ValueError, msg=bad):
                wf.defer(**bad)  # type: ignore[arg-type]
        self.assertEqual(wf.skipped(note="none").to_dict(), {"status": "skipped", "note": "none"})
        self.assertEqual(wf.intermediate("IN PROCESS", note="sent").to_dict(), {"status": "IN PROCESS", "note": "sent"})

    def test_the_event_carries_every_field_and_keeps_unknown_ones(self) -> None:
        e = wf.Event(event(call="c-1", title="Walden"))
        self.assertEqual(
            (e.protocol, e.step_id, e.workflow_id, e.object, e.template, e.step, e.version, e.lane),
            ("workdo/1", 4711, 815, "druid:bb123cd4567", "sdkWF", "run", 1, "default"),
        )
        self.assertEqual((e.attempt, e.max_attempts, e.call, e.traceparent, e.fragment), (2, 5, "c-1", None, None))
        self.assertEqual(e.properties, {"title": "Walden"})
        self.assertEqual(e.documents, {"descMetadata": "<mods/>"})
        self.assertEqual(e.context, {"batch": "2026-11"})
        self.assertEqual(e.raw["novel_field"], [1, 2])
        self.assertEqual(e.bare_object, "bb123cd4567")
        self.assertGreater(e.seconds_left() or 0, 0)
        # A few fields are enough to call a function in a test.
        self.assertEqual(wf.Event({"object": "obj:x"}).properties, {})

    def test_answer_copies_call_and_turns_everything_into_a_result(self) -> None:
        def none(e: wf.Event) -> None:
            return None

        self.assertEqual(wf.answer(none, event(call="c1")), {"status": "completed", "call": "c1"})
        self.assertEqual(wf.answer(none, event()), {"status": "completed"})
        # A dict is a result as it is, except that call is always the event's.
        self.assertEqual(
            wf.answer(lambda e: {"status": "IN PROCESS", "call": "forged"}, event(call="c2")),
            {"status": "IN PROCESS", "call": "c2"},
        )
        bad = wf.answer(lambda e: 42, event(call="c3"))
        self.assertEqual((bad["status"], bad["call"], bad["retryable"]), ("error", "c3", False))
        self.assertIn("returned int", bad["message"])

        def fails(e: wf.Event) -> None:
            raise wf.Failure("no title", retry=False)

        self.assertEqual(
            wf.answer(fails, event(call="c4")),
            {"status": "error", "message": "no title", "retryable": False, "call": "c4"},
        )
        # An event of the wrong shape is answered, for its call.
        broken = event(call="c5")
        broken["attempt"] = "two"
        r = wf.answer(none, broken)
        self.assertEqual((r["status"], r["call"], r["retryable"]), ("error", "c5", False))
        self.assertIn("attempt", r["message"])

        def exits(e: wf.Event) -> None:
            sys.exit(3)

        self.assertIn("sys.exit(3)", wf.answer(exits, event())["message"])

        def traced(e: wf.Event) -> wf.Outcome:
            with wf.span("download", pages="12"):
                pass
            return wf.completed()

        spans = wf.answer(traced, event())["spans"]
        self.assertEqual([(s["name"], s["attributes"]) for s in spans], [("download", {"pages": "12"})])

    def test_an_exception_is_a_bounded_error_with_its_traceback(self) -> None:
        def deep(n: int) -> None:
            if n == 0:
                raise KeyError("x" * 10000)
            deep(n - 1)

        r = wf.answer(lambda e: deep(20), event(call="c"))
        self.assertEqual((r["status"], r["retryable"], r["call"]), ("error", True, "c"))
        self.assertTrue(r["message"].startswith("KeyError: 'xxx"), r["message"][:50])
        self.assertLessEqual(len(r["message"].encode()), wf.MAX_MESSAGE_BYTES)
        self.assertIn("Traceback (most recent call last, last 5 of", r["message"])
        self.assertIn("in deep", r["message"])
        self.assertNotIn("runner.py", r["message"], "the SDK's own frames are left out")
        self.assertIn("KeyError", r["text"])
        self.assertLessEqual(len(r["text"].encode()), wf.MAX_TEXT_BYTES)

    def test_encode_keeps_every_answer_within_the_protocol(self) -> None:
        line = wf.encode({"status": "error", "message": "é" * 5000 + "\x00", "note": "n\x00", "call": "c"})
        d = json.loads(line)
        self.assertLessEqual(len(d["message"].encode()), wf.MAX_MESSAGE_BYTES)
        self.assertEqual(d["note"], "n\\0")
        for bad, what in [
            ({"status": "completed", "object": {"properties": {"k": "a\x00b"}}}, "NUL"),
            ({"status": "completed", "object": {"properties": {"k": float("nan")}}}, "JSON"),
            ({"status": "completed", "object": {"properties": {"k": {1, 2}}}}, "JSON"),
            ({"status": "completed", "object": {"documents": {"big": "x" * wf.MAX_RESULT_BYTES}}}, "over the limit"),
        ]:
            d = json.loads(wf.encode({**bad, "call": "c9"}))
            self.assertEqual((d["status"], d["call"], d["retryable"]), ("error", "c9", False), bad)
            self.assertIn(what, d["message"])
        self.assertNotIn(b"\n", wf.encode({"status": "completed", "note": "two\nlines"}))


class Exec(unittest.TestCase):
    def test_each_kind_of_result(self) -> None:
        cases = {
            "completed": {
                "status": "completed",
                "note": "answered completed for druid:bb123cd4567",
                "object": {"properties": {"answered_for": "druid:bb123cd4567", "attempt": 2}},
            },
            "failed": {"status": "error", "message": "failed as asked on attempt 2", "retryable": True},
            "failed_final": {"status": "error", "message": "failed for good as asked", "retryable": False},
            "defer": {"status": "defer", "note": "not ready, as asked", "seconds": 3600.0},
            "skipped": {"status": "skipped", "note": "skipped as asked"},
        }
        for want, expected in cases.items():
            with self.subTest(want=want):
                r, _, rc = run_exec(KINDS, event(want=want))
                self.assertEqual(r, expected)
                self.assertEqual(rc, 0)
        r, _, _ = run_exec(KINDS, event(want="defer", defer_seconds=0.3))
        self.assertEqual(r["seconds"], 0.3)

    def test_an_exception_is_an_error_result(self) -> None:
        r, _, rc = run_exec(KINDS, event(want="raise"))
        self.assertEqual(rc, 0)
        self.assertEqual((r["status"], r["retryable"]), ("error", True))
        self.assertTrue(r["message"].startswith("ValueError: asked to raise for druid:bb123cd4567\nTraceback"), r["message"])
        self.assertIn("in boom", r["message"])
        self.assertIn('raise ValueError(f"asked to raise for {what}")', r["text"])
        self.assertNotIn("call", r)

    def test_print_goes_to_stderr(self) -> None:
        r, err, _ = run_exec(KINDS, event(want="print"))
        self.assertEqual(r["status"], "completed")
        for said in ("print() from the function", "raw write to fd 1", "a subprocess's stdout"):
            self.assertIn(said, err)

    def test_input_that_is_not_an_event(self) -> None:
        for data in (b"{not json", b"[1, 2]", b""):
            with self.subTest(data=data):
                r, _, rc = run_exec(KINDS, data)
                self.assertEqual((r["status"], r["retryable"], rc), ("error", False, 0))

    def test_publish_on_the_sdk(self) -> None:
        ws = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, ws)
        r, _, _ = run_exec(PUBLISH, event(title="Walden & Co", author="Thoreau"), {"WORKDO_WORKSPACE": ws})
        self.assertEqual(r, {"status": "completed", "note": "published purl/bb123cd4567.xml"})
        with open(os.path.join(ws, "purl", "bb123cd4567.xml"), encoding="utf-8") as f:
            xml = f.read()
        self.assertIn("<title>Walden &amp; Co</title>", xml)
        self.assertIn("<author>Thoreau</author>", xml)
        env = {k: v for k, v in os.environ.items() if k != "WORKDO_WORKSPACE"}
        p = subprocess.run([sys.executable, PUBLISH], input=json.dumps(event()).encode(), capture_output=True, env=env, timeout=60)
        self.assertEqual(
            json.loads(p.stdout), {"status": "error", "message": "WORKDO_WORKSPACE is not set", "retryable": False}
        )
        r, _, _ = run_exec(PUBLISH, event(obj="druid:../etc"), {"WORKDO_WORKSPACE": ws})
        self.assertEqual((r["status"], r["retryable"]), ("error", False))


class Warm(unittest.TestCase):
    def test_every_line_is_answered_with_its_call(self) -> None:
        wants = ["completed", "failed", "failed_final", "defer", "skipped", "raise", "print", "completed"]
        lines = [event(obj=f"obj:w{i}", call=f"call-{i}", want=w) for i, w in enumerate(wants)]
        answers, err, rc, _ = run_warm(KINDS, lines)
        self.assertEqual(rc, 0, err)
        by_call = {a["call"]: a for a in answers}
        self.assertEqual(len(answers), len(wants))
        self.assertEqual(sorted(by_call), sorted(f"call-{i}" for i in range(len(wants))))
        for i, w in enumerate(wants):
            a = by_call[f"call-{i}"]
            status = {"failed": "error", "failed_final": "error", "raise": "error", "print": "completed"}.get(w, w)
            self.assertEqual(a["status"], status, a)
            if status == "completed":
                self.assertEqual(a["object"]["properties"], {"answered_for": f"obj:w{i}", "attempt": 2})
        self.assertIn("print() from the function", err)
        self.assertEqual(by_call["call-3"]["seconds"], 3600.0)

    def test_a_thread_safe_function_answers_pipelined_calls_out_of_order(self) -> None:
        # Earlier events sleep longer: with four workers the last written is answered first.
        sleeps = [800, 600, 400, 200]
        lines = [event(obj=f"obj:p{i}", call=f"p{i}", sleep_ms=ms) for i, ms in enumerate(sleeps)]
        answers, err, rc, took = run_warm(KINDS, lines)
        self.assertEqual(rc, 0, err)
        self.assertEqual([a["call"] for a in answers], ["p3", "p2", "p1", "p0"])
        for a in answers:
            self.assertEqual(a["object"]["properties"]["answered_for"], "obj:" + a["call"])
        self.assertLess(took, sum(sleeps) / 1000.0, "the calls ran one after another")

    def test_a_function_not_declared_thread_safe_answers_in_order(self) -> None:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        script = os.path.join(d, "serial.py")
        with open(script, "w") as f:
            f.write(
                textwrap.dedent(
                    f"""\
                    import sys, time
                    sys.path.insert(0, {ROOT!r})
                    from workdo_function import step, completed

                    @step
                    def run(event):
                        time.sleep(event.properties["sleep_ms"] / 1000)
                        return completed(note=event.object)
                    """
                )
            )
        lines = [event(obj=f"obj:s{i}", call=f"s{i}", sleep_ms=ms) for i, ms in enumerate([300, 100, 0])]
        answers, err, rc, _ = run_warm(script, lines)
        self.assertEqual(rc, 0, err)
        self.assertEqual([(a["call"], a["note"]) for a in answers], [("s0", "obj:s0"), ("s1", "obj:s1"), ("s2", "obj:s2")])

    def test_an_event_of_the_wrong_shape_is_answered_and_the_process_goes_on(self) -> None:
        broken = event(call="bad-1")
        broken["properties"] = "not an object"
        answers, err, rc, _ = run_warm(KINDS, [broken, event(call="ok-2")])
        self.assertEqual(rc, 0, err)
        self.assertEqual([(a["call"], a["status"]) for a in answers], [("bad-1", "error"), ("ok-2", "completed")])
        self.assertFalse(answers[0]["retryable"])

    def test_a_line_naming_no_call_ends_the_process_after_the_calls_in_hand(self) -> None:
        # The runtime always sends a call; a line without one cannot be answered (an answer
        # without call is a protocol error), so the process answers what it has and exits 2.
        lines: List[Any] = [event(call="a", sleep_ms=300), b"this is not json", event(call="never")]
        answers, err, rc, _ = run_warm(KINDS, lines)
        self.assertEqual(rc, 2)
        self.assertEqual([a["call"] for a in answers], ["a"])
        self.assertIn("cannot answer an input line", err)
        answers, err, rc, _ = run_warm(KINDS, [event()])
        self.assertEqual((answers, rc), ([], 2))
        self.assertIn('no string "call"', err)

    def test_blank_lines_are_ignored(self) -> None:
        answers, err, rc, _ = run_warm(KINDS, [b"", b"   ", event(call="x")])
        self.assertEqual((rc, [a["call"] for a in answers]), (0, ["x"]), err)


class Install(unittest.TestCase):
    def test_the_package_installs_offline_into_a_fresh_venv(self) -> None:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        venv = os.path.join(d, "v")
        if subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True).returncode != 0:
            self.skipTest("no venv module")
        py = os.path.join(venv, "bin", "python")
        # No index, no network: the build backend is the package's own, standard library only.
        p = subprocess.run(
            [py, "-m", "pip", "install", "-q", "--no-index", ROOT],
            capture_output=True,
            timeout=300,
        )
        self.assertEqual(p.returncode, 0, p.stderr.decode()[-2000:])
        p = subprocess.run(
            [py, "-c", "import workdo_function, os; print(workdo_function.__version__, os.path.dirname(workdo_function.__file__))"],
            capture_output=True,
            cwd=d,
        )
        self.assertEqual(p.returncode, 0, p.stderr)
        version, where = p.stdout.decode().split()
        self.assertEqual(version, wf.__version__)
        self.assertTrue(where.startswith(venv), where)
        self.assertTrue(os.path.exists(os.path.join(where, "py.typed")))


if __name__ == "__main__":
    unittest.main()
