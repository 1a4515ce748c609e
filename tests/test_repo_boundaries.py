"""The repository's top-level boundaries: ``tests/`` and ``benchmarks/`` never import each other.

Both import the runtime (``edge_runtime``) and the shared deployment harness (``acceptance``),
which imports neither of them. Checked on the source, by its syntax tree: an ``import`` of the
other directory's package, an import of a module that lives only in ``tests/`` (pytest puts
``tests/`` on ``sys.path``, so a bare ``import helpers`` would reach it), or a ``sys.path``
edit that names the other directory.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import garbage_collected_first

_garbage_collected_first = pytest.fixture(autouse=True)(garbage_collected_first)

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
BENCHMARKS = ROOT / "benchmarks"
ACCEPTANCE = ROOT / "acceptance"
TEST_MODULES = frozenset(p.stem for p in TESTS.glob("*.py")) | {"tests"}
"""Names that resolve to ``tests/`` only: its package name and its top-level modules."""


def _python_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in ``path`` (nested ones included)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def _sys_path_edits(path: Path) -> list[str]:
    """Source text of every ``sys.path.insert/append/extend(...)`` call in ``path``."""
    text = path.read_text(encoding="utf-8")
    edits = []
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"insert", "append", "extend"}
            and ast.unparse(node.func.value) == "sys.path"
        ):
            edits.append(ast.get_source_segment(text, node) or "")
    return edits


def _offenders(directory: Path, forbidden: frozenset[str], other: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in _python_files(directory):
        bad = sorted(_imports(path) & forbidden)
        bad += [edit for edit in _sys_path_edits(path) if other in edit]
        if bad:
            found[str(path.relative_to(directory.parent))] = bad
    return found


def test_the_directories_checked_hold_python_files() -> None:
    assert len(_python_files(TESTS)) > 50
    assert len(_python_files(BENCHMARKS)) > 20
    assert (ACCEPTANCE / "__init__.py").is_file()
    assert (ACCEPTANCE / "scenario.py").is_file() and (ACCEPTANCE / "faults.py").is_file()


def test_no_file_under_tests_imports_benchmarks() -> None:
    assert _offenders(TESTS, frozenset({"benchmarks"}), "benchmarks") == {}


def test_no_file_under_benchmarks_imports_tests() -> None:
    assert _offenders(BENCHMARKS, TEST_MODULES, "tests") == {}


def test_the_shared_harness_imports_neither_tests_nor_benchmarks() -> None:
    forbidden = TEST_MODULES | {"benchmarks"}
    assert _offenders(ACCEPTANCE, forbidden, "tests") == {}
    assert _offenders(ACCEPTANCE, forbidden, "benchmarks") == {}


def test_the_check_sees_an_import_and_a_sys_path_edit(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text(
        "import sys\nsys.path.insert(0, 'tests')\n\ndef f():\n    from benchmarks.run import main\n"
    )
    assert _imports(tmp_path / "x.py") == {"sys", "benchmarks"}
    assert _offenders(tmp_path, frozenset({"benchmarks"}), "tests") == {
        f"{tmp_path.name}/x.py": ["benchmarks", "sys.path.insert(0, 'tests')"]
    }
