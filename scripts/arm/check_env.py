"""Run by scripts/test-arm.sh in the emulated venv: the machine, and whether what is installed
satisfies pyproject.toml's dependencies, as ``pip install`` of the wheel on the Pi would demand
(on a 32-bit Pi a Debian numpy outside the range would make pip fetch another, from source).

Prints one line (arch, Python, each dependency's version and where it comes from); exit 1 when
a dependency is missing or outside its declared range.
"""

from __future__ import annotations

import importlib.metadata as metadata
import platform
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def origin(dist: metadata.Distribution) -> str:
    """``debian`` for Debian's dist-packages, ``venv`` for the venv's site-packages."""
    where = str(dist.locate_file(""))
    if where.startswith(sysconfig.get_paths()["purelib"]):
        return "venv"
    return "debian" if "dist-packages" in where else where


def main() -> int:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    parts, bad = [], []
    for line in project["dependencies"]:
        req = Requirement(line)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            bad.append(f"{req.name} is not installed")
            continue
        parts.append(f"{req.name} {dist.version} ({origin(dist)})")
        if not req.specifier.contains(dist.version, prereleases=True):
            bad.append(f"{req.name} {dist.version} is outside {line!r} of pyproject.toml")
    print(
        f"check-env: {platform.machine()}, Python {platform.python_version()} "
        f"(sys.executable {sys.executable}): " + ", ".join(parts)
    )
    for problem in bad:
        print(f"check-env: FAILED: {problem}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
