"""The one result schema: what a benchmark stores so that its report renders again unmeasured.

A result file is JSON with the keys `KEYS`: ``name`` (in `registry.BENCHMARKS`), ``parameters``
(what the command was asked), ``rows`` (measured rows by table), ``medians`` (headline numbers,
for scripts) and ``environment`` (where and when). Rows are dataclasses when measured and JSON
objects when stored (`to_json`); `revive` turns them back. Non-finite floats are stored as
``"nan"``, ``"inf"``, ``"-inf"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import platform
import subprocess
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KEYS", "cpu_model", "environment", "read_result", "revive", "to_json", "write_result"]

#: The keys of every result file, in order.
KEYS = ("name", "parameters", "rows", "medians", "environment")


def to_json(obj: Any, derived: Sequence[str] = ()) -> Any:
    """``obj`` as JSON values: dataclasses as objects of their fields (and of the properties in
    ``derived`` they have, for scripts), tuples and sets as lists, numpy scalars as numbers,
    non-finite floats as strings."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: to_json(getattr(obj, f.name), derived) for f in dataclasses.fields(obj)}
        for prop in derived:
            if hasattr(type(obj), prop):
                out[prop] = to_json(getattr(obj, prop), derived)
        return out
    if isinstance(obj, Mapping):
        return {str(k): to_json(v, derived) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v, derived) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted(to_json(v, derived) for v in obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if hasattr(obj, "item") and not isinstance(obj, str):  # numpy scalar
        return obj.item()
    return obj


def revive(tp: Any, value: Any) -> Any:
    """``value`` as `to_json` stored it, back as type ``tp``: dataclasses field by field (other
    keys skipped, missing fields defaulted), containers item by item, floats from numbers or
    strings (None in a float field: NaN)."""
    if value is None:
        return math.nan if tp is float else None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return revive(kinds[0], value) if len(kinds) == 1 else value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        fields = [f.name for f in dataclasses.fields(tp) if f.name in value]
        return tp(**{name: revive(hints[name], value[name]) for name in fields})
    if origin in (list, set, frozenset):
        return origin(revive(args[0], v) for v in value)
    if origin is tuple:
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return tuple(revive(a, v) for a, v in zip(items, value, strict=True))
    if origin is dict:
        return {revive(args[0], k): revive(args[1], v) for k, v in value.items()}
    return tp(value) if tp in (float, int) else value


def cpu_model() -> str:
    """The CPU's ``model name`` in ``/proc/cpuinfo``, else `platform.processor` (may be "")."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def environment() -> dict[str, str]:
    """UTC time, Python, machine, CPUs, load and commit (``+``: ``edge_runtime/`` changed)."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--", "edge_runtime"):
        commit += "+"
    return {
        "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": str(os.cpu_count()),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "commit": commit,
    }


def write_result(
    path: Path, name: str, parameters: Mapping[str, Any], rows: Mapping[str, Any],
    medians: Mapping[str, float], env: Mapping[str, Any] | None = None, derived: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    """Write a result file to ``path`` (folders created) and return its content; ``env``
    defaults to `environment` now; ``derived`` as in `to_json`."""
    env = environment() if env is None else env
    doc = {"name": name, "parameters": to_json(parameters), "rows": to_json(rows, derived),
           "medians": to_json(medians), "environment": to_json(env)}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def read_result(path: Path, name: str | None = None) -> dict[str, Any]:
    """The result file at ``path``, non-finite floats restored; ValueError if it lacks a key of
    `KEYS` or holds another benchmark's results than ``name``'s."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    if missing := [k for k in KEYS if k not in doc]:
        raise ValueError(f"{path} is not a result file: no {', '.join(missing)}")
    if name is not None and doc["name"] != name:
        raise ValueError(f"{path} holds the results of {doc['name']!r}, not of {name!r}")
    return _floats(doc)


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _floats(value: Any) -> Any:
    """``value`` with the strings of non-finite floats turned back into floats."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return value
