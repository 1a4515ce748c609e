"""What a leaf agent imports (issue 24, item 3): pinned without timing.

The budgets themselves (import time, RSS, CPU per reading) are measured by
``python -m benchmarks.pi_budget``; here only what cannot flake: ``edge-runtime agent``'s
modules, and what creating a leaf's agent imports, do not include scipy, matplotlib, the
modules of the other commands, nor those of the other roles (aggregator, FedPower), the
FedPower server, the monitor, the ACL and bridge generators, the local broker, the
datasets, the merges, FedPower's accounting and messages, the local sources' modules or
difflib; and numpy's BLAS starts with one thread without ``threadpoolctl``. So the import
and RSS budgets cannot silently regress.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TOPOLOGY = Path(__file__).resolve().parents[1] / "topologies" / "minimal.toml"

LEAF_MODULES = [
    "edge_runtime.cli",
    "edge_runtime.cli.dispatch",
    "edge_runtime.cli.parser",
    "edge_runtime.cli.run",
]
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
    "edge_runtime.cli.deploy",
]
NOT_FOR_A_LEAF = [
    "edge_runtime.agents.aggregator",
    "edge_runtime.agents.fedpower",
    "edge_runtime.fedpower.server",
    "edge_runtime.fedpower.simulation",
    "edge_runtime.fedpower.schedule",
    "edge_runtime.fedpower.aggregation",
    "edge_runtime.monitor",
    "edge_runtime.acl",
    "edge_runtime.bridge",
    "edge_runtime.broker.mosquitto",
    "edge_runtime.broker.dynsec",
    "edge_runtime.broker.config",
    "edge_runtime.datasets",
    "edge_runtime.limits",
    "threadpoolctl",
    # issue 24, RSS: what only merges, FedPower, local sources or a bad topology need
    "edge_runtime.fpca.merge",
    "edge_runtime.fpca.merge_tree",
    "edge_runtime.fedpower.accounting",
    "edge_runtime.wire.fedpower",
    "edge_runtime.sources.command",
    "edge_runtime.sources.file",
    "edge_runtime.sources.serialport",
    "edge_runtime.sources.cursor",
    "difflib",
    # ... nor scoring, Home Assistant discovery or local sources it is not configured for
    "edge_runtime.agents.leaf.core.scoring",
    "edge_runtime.agents.leaf.core.fault_scoring",
    "edge_runtime.fpca.scoring",
    "edge_runtime.fpca.faults",
    "edge_runtime.homeassistant",
    "edge_runtime.sources.base",
    "edge_runtime.sources.spec",
    "edge_runtime.sources.factory",
]
"""Packages and modules (with their submodules) a leaf of an FPCA topology does not load."""

CREATE_LEAF = (
    "from edge_runtime.agents import create_agent\n"
    "from edge_runtime.settings import AgentSettings\n"
    "from edge_runtime.topology import load_topology\n"
    f"topology = load_topology({str(TOPOLOGY)!r})\n"
    "create_agent(topology, 'leaf-1', AgentSettings(), n_features=48)\n"
)
"""What `edge_runtime.cli.run.cmd_agent` does for a leaf before it connects."""


def imported_after(modules: list[str], then: str = "") -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"{then}"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    return set(json.loads(out.stdout))


@pytest.fixture(scope="module")
def leaf_imports() -> set[str]:
    return imported_after(LEAF_MODULES)


@pytest.fixture(scope="module")
def leaf_agent_imports() -> set[str]:
    return imported_after(LEAF_MODULES, CREATE_LEAF)


def loaded(imports: set[str], package: str) -> set[str]:
    return {m for m in imports if m == package or m.startswith(package + ".")}


@pytest.mark.parametrize("package", HEAVY)
def test_the_agent_command_does_not_import(leaf_imports: set[str], package: str) -> None:
    assert not {m for m in leaf_imports if m == package or m.startswith(package + ".")}


@pytest.mark.parametrize("module", OTHER_COMMANDS)
def test_the_agent_command_does_not_import_the_other_commands(
    leaf_imports: set[str], module: str
) -> None:
    assert module not in leaf_imports


@pytest.mark.parametrize("module", NOT_FOR_A_LEAF)
def test_a_leaf_agent_does_not_import_what_only_other_roles_and_commands_need(
    leaf_agent_imports: set[str], module: str
) -> None:
    assert not loaded(leaf_agent_imports, module)


def test_creating_a_leaf_imports_the_leaf_role(leaf_agent_imports: set[str]) -> None:
    assert "edge_runtime.agents.leaf.shell.agent" in leaf_agent_imports


def test_loading_a_topology_without_local_sources_imports_no_source_module() -> None:
    loaded = imported_after(
        ["edge_runtime.topology"],
        f"from edge_runtime.topology import load_topology\nload_topology({str(TOPOLOGY)!r})\n",
    )
    assert not loaded & {
        "edge_runtime.sources.spec",
        "edge_runtime.sources.lines",
        "edge_runtime.sources.base",
        "edge_runtime.fedpower.accounting",
        "difflib",
    }


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


def test_copied_constants_equal_their_originals() -> None:
    from edge_runtime import homeassistant, monitor, replay
    from edge_runtime.cli import parser
    from edge_runtime.datasets import split
    from edge_runtime.topology import keys

    assert parser.DEFAULT_BATCH_SIZE == replay.DEFAULT_BATCH_SIZE
    assert parser.STALE_AFTER_S == monitor.STALE_AFTER_S
    assert parser.DEFAULT_DISCOVERY_PREFIX == homeassistant.DEFAULT_DISCOVERY_PREFIX
    assert keys.SPLITS == split.SPLITS


@pytest.mark.parametrize(
    "package",
    [
        "edge_runtime.broker",
        "edge_runtime.fedpower",
        "edge_runtime.fpca",
        "edge_runtime.sources",
    ],
)
def test_every_public_name_of_a_lazy_package_resolves(package: str) -> None:
    code = (
        "import importlib, json\n"
        f"p = importlib.import_module({package!r})\n"
        "lazy = set(p._MODULE_OF)\n"
        "names = p.__all__ or sorted(lazy)\n"
        "print(json.dumps({'all': p.__all__, 'lazy': sorted(lazy), 'dir': dir(p),\n"
        "    'missing': [n for n in names if getattr(p, n, None) is None]}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    got = json.loads(out.stdout)
    assert not got["missing"]
    assert set(got["lazy"]) <= set(got["all"]) or got["all"] == []  # [] : an internal package
    assert set(got["all"]) | set(got["lazy"]) <= set(got["dir"])


def test_main_loads_numpy_with_one_blas_thread_and_leaves_the_environment_alone() -> None:
    code = (
        "import json, os, sys\n"
        "from edge_runtime.cli import main\n"
        "try:\n"
        "    main(['agent', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = 'threadpoolctl' in sys.modules\n"
        "from threadpoolctl import threadpool_info\n"
        "blas = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "env = {k: os.environ.get(k) for k in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS')}\n"
        "print(json.dumps({'loaded': loaded, 'blas': blas, 'env': env}))\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        env=env | {"OMP_NUM_THREADS": "3"},
    )
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["loaded"] is False
    assert got["blas"] and set(got["blas"]) == {1}
    assert got["env"] == {"OPENBLAS_NUM_THREADS": None, "OMP_NUM_THREADS": "3"}


def test_the_unit_runs_the_agent_optimised() -> None:
    """The unit's environment, which `benchmarks.pi_budget` also runs the agent with (its own
    test checks that side)."""
    from acceptance.scenario import unit_python_environment

    assert unit_python_environment() == {"PYTHONOPTIMIZE": "2"}
