#!/usr/bin/env python3
"""The `publish` step function, in Python, on the SDK (``workdo_function``, beside this file).

Works as an exec function (one event on stdin, one result on stdout) and as a warm function
(WORKDO_MODE=warm: one event per line in, one result per line out, the SDK copying each event's
``call`` back). Writes the object's public XML to WORKSPACE/purl/<druid>.xml.
"""
import os
import sys
from xml.sax.saxutils import escape

# Runs as a script from the source tree, without `pip install functions/python`.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workdo_function import completed, failed, step  # noqa: E402


@step
def publish(event):
    root = os.environ.get("WORKDO_WORKSPACE")
    if not root:
        return failed("WORKDO_WORKSPACE is not set", retry=False)
    druid = event.bare_object
    if not druid or "/" in druid or ".." in druid:
        return failed(f"bad object id {event.object!r}", retry=False)
    props = event.properties
    purl = os.path.join(root, "purl")
    os.makedirs(purl, exist_ok=True)
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<publicObject id="{escape(event.object)}">\n'
        f'  <title>{escape(str(props.get("title", "")))}</title>\n'
        f'  <author>{escape(str(props.get("author", "")))}</author>\n'
        "</publicObject>\n"
    )
    with open(os.path.join(purl, druid + ".xml"), "w", encoding="utf-8") as f:
        f.write(xml)
    return completed(note=f"published purl/{druid}.xml")
