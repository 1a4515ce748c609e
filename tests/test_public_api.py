"""The public surface: what a user imports, listed by each package's ``__all__``, and nothing else.

A user of edge_runtime imports the command line (`edge_runtime.cli.main`), the numerics
(`edge_runtime.fpca`, and FedPower's beside them in `edge_runtime.fedpower`), the wire codec
(`edge_runtime.wire`), the global model (`edge_runtime.model.load_model`) and topology
loading (`edge_runtime.topology`); the top-level package gathers the entry points of each.
Every other package is internal to the runtime, so its ``__all__`` is empty.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from helpers import garbage_collected_first

_garbage_collected_first = pytest.fixture(autouse=True)(garbage_collected_first)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edge_runtime"

SURFACE: dict[str, set[str]] = {
    "edge_runtime": {
        "EdgeRuntimeError",
        "FPCAEdge",
        "Subspace",
        "SubspaceMessage",
        "Topology",
        "TopologyError",
        "WireError",
        "decode_subspace",
        "encode_subspace",
        "load_model",
        "load_topology",
        "main",
        "merge_subspaces",
        "parse_topology",
    },
    "edge_runtime.cli": {"main"},
    "edge_runtime.fpca": {
        "AnomalyScorer",
        "FPCAEdge",
        "FaultDetector",
        "FaultVerdict",
        "MergeTree",
        "Subspace",
        "error_ratio",
        "merge_many",
        "merge_subspaces",
        "offline_subspace",
        "principal_angles",
        "projection_error",
        "q_limit",
        "t2_limit",
        "total_energy",
    },
    "edge_runtime.fedpower": {
        "MECHANISM",
        "FedPowerBudget",
        "FedPowerResult",
        "FedPowerServer",
        "LocalGram",
        "RoundRecord",
        "RoundStart",
        "Schedule",
        "aggregate",
        "fedpower_noise_std",
        "local_iterations",
        "orthonormalise",
        "power_step_sensitivity",
        "procrustes_rotation",
        "rdp_epsilon",
        "run_fedpower",
    },
    "edge_runtime.wire": {
        "REASONS",
        "SCHEMA_VERSIONS",
        "ConfirmMessage",
        "PrivacyParams",
        "PrivacyStatus",
        "SensorReadings",
        "StatusDetail",
        "SubspaceMessage",
        "WireError",
        "decode_confirm",
        "decode_readings",
        "decode_status",
        "decode_subspace",
        "encode_confirm",
        "encode_readings",
        "encode_status",
        "encode_subspace",
    },
    "edge_runtime.topology": {
        "NodeConfig",
        "Topology",
        "TopologyError",
        "load_topology",
        "parse_topology",
    },
}
"""Each user-facing package and exactly the names its ``__all__`` lists."""

MODEL_NAMES = {"load_model"}
"""What a user imports from `edge_runtime.model` (a module, not a package)."""


def _package_names() -> list[str]:
    names = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        parts = init.parent.relative_to(ROOT).parts
        names.append(".".join(parts))
    return names


def _static_all(package: str) -> list[str] | None:
    """The ``__all__`` an ``__init__.py`` assigns, read without importing it (None: none)."""
    init = ROOT.joinpath(*package.split("."), "__init__.py")
    found = None
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(node.value, ast.List | ast.Tuple), package
            found = [ast.literal_eval(element) for element in node.value.elts]
    return found


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_a_user_facing_package_lists_exactly_its_user_surface(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(SURFACE[package])
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:  # names loaded on first use resolve
        assert getattr(module, name) is not None, (package, name)
        assert name in dir(module)


def test_every_other_package_is_internal_with_an_empty_all() -> None:
    packages = _package_names()
    assert len(packages) > 20
    assert set(SURFACE) <= set(packages)
    exporting = {
        package: names
        for package in packages
        if package not in SURFACE
        for names in [_static_all(package)]
        if names
    }
    assert exporting == {}


def test_the_top_level_names_are_those_of_their_packages() -> None:
    import edge_runtime
    from edge_runtime import cli, errors, fpca, model, topology, wire

    homes = (cli, errors, fpca, model, topology, wire)
    for name in edge_runtime.__all__:
        owners = [home for home in homes if name in getattr(home, "__all__", ())]
        assert owners, name
        assert all(getattr(edge_runtime, name) is getattr(home, name) for home in owners), name
    assert set(model.__all__) >= MODEL_NAMES


def test_the_console_script_is_the_public_main() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["edge-runtime"] == "edge_runtime.cli:main"
    import edge_runtime
    from edge_runtime.cli import main

    assert edge_runtime.main is main


def test_importing_the_top_level_package_loads_nothing_else() -> None:
    code = (
        "import sys, edge_runtime\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('edge_runtime'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "edge_runtime,edge_runtime.lazy"


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    import edge_runtime

    with pytest.raises(AttributeError, match="no attribute 'LeafAgent'"):
        _ = edge_runtime.LeafAgent
