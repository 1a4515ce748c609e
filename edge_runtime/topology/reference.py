"""The key reference of ``topologies/README.md``, generated from `TOPOLOGY_KEYS`.

The README's key tables sit between ``<!-- keys:NAME -->`` and ``<!-- /keys:NAME -->``
lines; `render` rewrites each from the declarations (`SECTIONS` says which keys go where),
and leaves every other line alone. ``python -m edge_runtime.topology.reference [PATH]``
rewrites the file (default ``topologies/README.md`` of the checkout), ``--check`` only says
whether it is current (exit 1 if not); a test keeps it current.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from edge_runtime.declaration import Key, markdown_table
from edge_runtime.topology.keys import TOPOLOGY_KEYS

__all__ = ["SECTIONS", "main", "render", "section_keys"]

SECTIONS: dict[str, str] = {
    "document": "Top level: the document's own keys and tables (FedPower's apart)",
    "defaults": "``[defaults]`` and per-node settings (scoring apart)",
    "score": "anomaly scoring of a leaf's readings",
    "node": "``[[nodes]]`` only",
    "data": "``[data]``",
    "fedpower": "FedPower's top-level keys",
}
"""The README's key tables by marker name."""

_BLOCK = re.compile(r"(<!-- keys:(?P<name>\w+) -->\n)(?P<body>.*?)(<!-- /keys:(?P=name) -->)", re.S)


def section_keys(name: str) -> tuple[Key, ...]:
    """The keys of README table ``name`` (one of `SECTIONS`), in declaration order.

    Raises
    ------
    KeyError
        If ``name`` is not a section.
    """
    if name not in SECTIONS:
        raise KeyError(f"no key table {name!r}; expected one of {', '.join(SECTIONS)}")

    def belongs(key: Key) -> bool:
        if name == "fedpower":
            return key.group == "fedpower"
        if name == "score":
            return key.group == "score"
        if name == "document":
            return key.scope == "document" and key.group != "fedpower"
        if name == "defaults":
            return key.scope == "defaults" and key.group != "score"
        return key.scope == name

    return tuple(key for key in TOPOLOGY_KEYS if belongs(key))


def render(text: str) -> str:
    """``text`` with every ``<!-- keys:NAME -->`` block replaced by its generated table.

    Raises
    ------
    KeyError
        If a block names no section.
    """
    return _BLOCK.sub(
        lambda m: m.group(1) + markdown_table(section_keys(m["name"])) + m.group(4), text
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or with ``--check``, check) the README's key tables; 0, or 1 if stale."""
    parser = argparse.ArgumentParser(prog="python -m edge_runtime.topology.reference")
    default = Path(__file__).resolve().parents[2] / "topologies" / "README.md"
    parser.add_argument("path", nargs="?", type=Path, default=default)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = parser.parse_args(argv)
    text = args.path.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            print(f"{args.path}: key reference is stale; run {parser.prog}", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
