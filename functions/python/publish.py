#!/usr/bin/env python3
"""The `publish` step function, in Python: proof that the protocol is language-neutral.

Works as an exec function (one event on stdin, one result on stdout) and as a warm function
(WORKDO_MODE=warm: one event per line in, one result per line out). Writes the object's public
XML to WORKSPACE/purl/<druid>.xml.
"""
import json
import os
import sys
from xml.sax.saxutils import escape


def publish(event):
    root = os.environ.get("WORKDO_WORKSPACE")
    if not root:
        return {"status": "error", "message": "WORKDO_WORKSPACE is not set", "retryable": False}
    druid = event["object"].removeprefix("druid:")
    if not druid or "/" in druid or ".." in druid:
        return {"status": "error", "message": f"bad object id {event['object']!r}", "retryable": False}
    props = event.get("properties", {})
    purl = os.path.join(root, "purl")
    os.makedirs(purl, exist_ok=True)
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<publicObject id="{escape(event["object"])}">\n'
        f'  <title>{escape(str(props.get("title", "")))}</title>\n'
        f'  <author>{escape(str(props.get("author", "")))}</author>\n'
        "</publicObject>\n"
    )
    with open(os.path.join(purl, druid + ".xml"), "w", encoding="utf-8") as f:
        f.write(xml)
    return {"status": "completed", "note": f"published purl/{druid}.xml"}


def answer(line):
    try:
        event = json.loads(line)
    except Exception as e:  # not an event: report it, keep the process alive
        return {"status": "error", "message": f"publish failed: {e}"}
    try:
        result = publish(event)
    except Exception as e:  # a bug: report it, keep the process alive
        result = {"status": "error", "message": f"publish failed: {e}"}
    # A warm call's answer carries the event's call id back: answers are matched by it.
    if "call" in event:
        result["call"] = event["call"]
    return result


if os.environ.get("WORKDO_MODE") == "warm":
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(answer(line)), flush=True)
else:
    print(json.dumps(answer(sys.stdin.read())))
