"""Requirement lines from pyproject.toml for scripts/arm/sysroot.sh, one per line.

    python3 scripts/arm/requirements.py runtime [--without numpy,scipy,msgpack]
    python3 scripts/arm/requirements.py test

``runtime``: ``[project].dependencies`` (what ``pip install`` of the wheel installs), less the
names given (those a 32-bit Pi takes from Debian's packages). ``test``: the entries of the
``test`` extra that the emulated run needs (pure Python; no ruff, cryptography, aiohttp).
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
#: The test tools the emulated modules import (tests/conftest.py, the selected modules).
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "mpmath", "pyserial")


def name_of(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement string."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise SystemExit(f"requirements: cannot read {requirement!r} in {PYPROJECT}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("which", choices=("runtime", "test"))
    parser.add_argument("--without", default="", help="comma-separated names to leave out")
    opts = parser.parse_args()
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    if opts.which == "runtime":
        without = {name_of(n) for n in opts.without.split(",") if n.strip()}
        chosen = [r for r in project["dependencies"] if name_of(r) not in without]
    else:
        extra = {name_of(r): r for r in project["optional-dependencies"]["test"]}
        chosen = [extra.get(tool, tool) for tool in TEST_TOOLS]
    print("\n".join(chosen))


if __name__ == "__main__":
    main()
