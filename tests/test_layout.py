"""The package's shape: small modules, imports pointing down the layers of pyproject.toml,
agents grouped by role with each role's core free of I/O, clocks, randomness and threads."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "edge_runtime"
MAX_MODULE_LINES = 600
AGENTS = PACKAGE / "agents"
ROLES = ("common", "leaf", "aggregator", "fedpower")
CORE_FORBIDDEN = {"asyncio", "aiomqtt", "time", "secrets", "threading", "structlog"}
"""What a core module never imports: the shell's I/O, the clock, its own randomness, threads
and logging (time and a seeded random source come in as arguments; events go out)."""


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_agents_are_grouped_by_role_each_a_core_and_a_shell() -> None:
    assert sorted(p.name for p in AGENTS.glob("*.py")) == ["__init__.py"]  # no flat modules
    for role in ROLES:
        assert (AGENTS / role / "core" / "__init__.py").is_file(), role
        assert (AGENTS / role / "shell" / "__init__.py").is_file(), role
    assert sorted(p.name for p in AGENTS.iterdir() if p.is_dir() and p.name != "__pycache__") == (
        sorted(ROLES)
    )


def test_no_core_module_imports_io_clocks_randomness_threads_or_logging() -> None:
    cores = sorted(AGENTS.glob("*/core/*.py"))
    assert len(cores) >= 15
    found = {
        str(path.relative_to(PACKAGE.parent)): sorted(_imported_roots(path) & CORE_FORBIDDEN)
        for path in cores
    }
    assert {name: bad for name, bad in found.items() if bad} == {}


def test_the_core_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The check itself can fail: a module importing the clock is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom asyncio import sleep\nfrom . import policy\n")
    assert _imported_roots(bad) & CORE_FORBIDDEN == {"time", "asyncio"}


def test_no_module_of_the_package_is_over_600_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_imports_only_point_down_the_layers() -> None:
    """import-linter's layers contract (`[tool.importlinter]` in pyproject.toml)."""
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert command is not None, "import-linter is not installed: pip install -e '.[test]'"
    result = subprocess.run(
        [command, "--no-cache"],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
    assert "Contracts: 3 kept, 0 broken" in result.stdout
