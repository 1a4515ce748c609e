"""What a leaf agent imports (issue 24, item 3): pinned without timing.

The budgets themselves (import time, RSS, CPU per reading) are measured by
``python -m benchmarks.pi_budget``; here only what cannot flake: ``edge-runtime agent``'s
modules do not import scipy, matplotlib or the modules of the other commands, so the import
budget cannot silently regress.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LEAF_MODULES = ["edge_runtime.cli", "edge_runtime.cli.dispatch", "edge_runtime.cli.run"]
"""What ``edge-runtime agent`` imports before it runs."""

HEAVY = ["scipy", "matplotlib", "sklearn", "pandas"]
OTHER_COMMANDS = [
    "edge_runtime.runner",
    "edge_runtime.replay",
    "edge_runtime.plots",
    "edge_runtime.workers",
    "edge_runtime.cli.watch",
    "edge_runtime.cli.fleet",
    "edge_runtime.cli.configs",
    "edge_runtime.cli.output",
    "edge_runtime.dashboard",
]


def imported_after(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    return set(json.loads(out.stdout))


@pytest.fixture(scope="module")
def leaf_imports() -> set[str]:
    return imported_after(LEAF_MODULES)


@pytest.mark.parametrize("package", HEAVY)
def test_the_agent_command_does_not_import(leaf_imports: set[str], package: str) -> None:
    assert not {m for m in leaf_imports if m == package or m.startswith(package + ".")}


@pytest.mark.parametrize("module", OTHER_COMMANDS)
def test_the_agent_command_does_not_import_the_other_commands(
    leaf_imports: set[str], module: str
) -> None:
    assert module not in leaf_imports


def test_the_agents_package_does_not_import_scipy() -> None:
    loaded = imported_after(["edge_runtime.agents", "edge_runtime.sources", "edge_runtime.wire"])
    assert not {m for m in loaded if m == "scipy" or m.startswith("scipy.")}


def test_every_command_still_resolves_to_its_handler() -> None:
    import importlib

    from edge_runtime.cli.dispatch import COMMANDS
    from edge_runtime.cli.parser import build_parser

    parser = build_parser()
    choices = next(a.choices for a in parser._subparsers._group_actions)  # type: ignore[union-attr]
    assert set(COMMANDS) == set(choices)
    for name, handler in COMMANDS.items():
        module = importlib.import_module(handler.__doc__.split("`")[1].rsplit(".", 1)[0])
        assert getattr(module, handler.__name__).__name__ == handler.__name__, name
