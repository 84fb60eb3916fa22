"""A PEP 517 build backend for this one pure-Python package, standard library only.

Why not setuptools: `pip install` must work offline in a fresh venv, and there it cannot. A venv
of Python 3.12 or later has no setuptools at all, and one of 3.9 to 3.11 has a setuptools older
than 70.1, which cannot build a wheel without the separate `wheel` package that no fresh venv
has. This backend needs nothing, so `pip install --no-index functions/python` works offline,
with or without build isolation.

It builds the wheel (the package `workdo_function` and its metadata) and an sdist, reading the
metadata from `pyproject.toml`'s `[project]` table. It understands the part of TOML that table
uses here: `key = "string"` and `key = ["string", ...]` (tomllib reads it on Python 3.11+).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "workdo_function"
# What an sdist holds besides the package: enough to build the wheel again.
SDIST_FILES = ["pyproject.toml", "README.md", "_build/workdo_build.py"]


def _project() -> Dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return _project_table(data.decode("utf-8"))
    return dict(tomllib.loads(data.decode("utf-8"))["project"])


def _project_table(text: str) -> Dict[str, Any]:
    """The `[project]` table of `text`, for the subset of TOML described above."""
    out: Dict[str, Any] = {}
    in_project = False
    pending: Optional[Tuple[str, str]] = None
    for line in text.splitlines():
        stripped = line.strip()
        if pending is not None:
            key, acc = pending
            acc += " " + stripped
            if "]" in _strip_comment(stripped):
                out[key] = re.findall(r'"((?:[^"\\]|\\.)*)"', acc)
                pending = None
            else:
                pending = (key, acc)
            continue
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            in_project = stripped == "[project]"
            continue
        if not in_project:
            continue
        m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*(.*)$', stripped)
        if not m:
            continue
        key, value = m.group(1), _strip_comment(m.group(2)).strip()
        if value.startswith('"'):
            out[key] = re.match(r'^"((?:[^"\\]|\\.)*)"', value).group(1)  # type: ignore[union-attr]
        elif value.startswith("["):
            if "]" in value:
                out[key] = re.findall(r'"((?:[^"\\]|\\.)*)"', value)
            else:
                pending = (key, value)
    return out


def _strip_comment(s: str) -> str:
    in_str = False
    for i, c in enumerate(s):
        if c == '"':
            in_str = not in_str
        elif c == "#" and not in_str:
            return s[:i]
    return s


def _names() -> Tuple[str, str, str]:
    p = _project()
    name, version = p["name"], p["version"]
    return name, version, re.sub(r"[-_.]+", "_", name).lower()


def _metadata() -> str:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
    ]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for c in p.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    for d in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str) and os.path.exists(os.path.join(ROOT, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _package_files() -> List[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith((".py", ".typed")):
                out.append(os.path.relpath(os.path.join(dirpath, fn), ROOT).replace(os.sep, "/"))
    return out


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _dist_info(dist: str, version: str) -> Dict[str, bytes]:
    return {
        f"{dist}-{version}.dist-info/METADATA": _metadata().encode("utf-8"),
        f"{dist}-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: workdo_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ).encode(),
        f"{dist}-{version}.dist-info/top_level.txt": f"{PACKAGE}\n".encode(),
    }


# PEP 517 hooks.


def get_requires_for_build_wheel(config_settings: Any = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    _, version, dist = _names()
    for arcname, data in _dist_info(dist, version).items():
        path = os.path.join(metadata_directory, *arcname.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return f"{dist}-{version}.dist-info"


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Optional[str] = None) -> str:
    _, version, dist = _names()
    filename = f"{dist}-{version}-py3-none-any.whl"
    files: Dict[str, bytes] = {}
    for rel in _package_files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            files[rel] = f.read()
    files.update(_dist_info(dist, version))
    record_name = f"{dist}-{version}.dist-info/RECORD"
    record = "\n".join([_record_line(a, d) for a, d in files.items()] + [f"{record_name},,", ""])
    files[record_name] = record.encode()
    stamp = time.localtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files.items():
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    _, version, dist = _names()
    base = f"{dist}-{version}"
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in SDIST_FILES + _package_files():
            if os.path.exists(os.path.join(ROOT, rel)):
                t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        data = _metadata().encode("utf-8")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        info.mode = 0o644
        t.addfile(info, io.BytesIO(data))
    return filename
