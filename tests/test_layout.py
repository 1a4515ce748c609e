"""The package's shape: one concept per module, imports pointing down the layers of
pyproject.toml, agents grouped by role with each role's core free of I/O, clocks, randomness
and threads; and the structure, counted: classes built from several in-package bases,
imports of another module's private names, issue numbers in the package's prose.

A module's length is only reported (`LONG_MODULE_LINES`, a warning): it is a hint to look at
whether the module still holds one concept, never a reason to split a class into mixins.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import garbage_collected_first

_garbage_collected_first = pytest.fixture(autouse=True)(garbage_collected_first)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edge_runtime"
TESTS = ROOT / "tests"
LONG_MODULE_LINES = 600
"""Modules longer than this are reported by a warning, never failed."""
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


class StructureWarning(UserWarning):
    """A structural hint, not a failure: a long module, or an allowlist entry now unneeded."""


def _warn(message: str) -> None:
    warnings.warn(message, StructureWarning, stacklevel=2)


# ------------------------------------------------------------------------ one concept a module
@pytest.mark.filterwarnings("default::UserWarning")
def test_every_module_opens_with_a_docstring_saying_what_it_holds() -> None:
    """One concept per module: each says what it holds in its docstring; a long one is
    reported (pytest's warnings summary) for a look, never failed."""
    sizes: dict[str, int] = {}
    bare: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        sizes[name] = len(text.splitlines())
        if not (ast.get_docstring(ast.parse(text)) or "").strip():
            bare.append(name)
    assert len(sizes) > 50
    assert bare == []
    long = {name: n for name, n in sizes.items() if n > LONG_MODULE_LINES}
    if long:
        _warn(
            f"{len(long)} modules over {LONG_MODULE_LINES} lines (a hint: does each still hold "
            f"one concept?): " + ", ".join(f"{name} ({n})" for name, n in sorted(long.items()))
        )


# ------------------------------------------------------------------------ what the checks read
def _module_name(path: Path, root: Path) -> str:
    parts = list(path.resolve().relative_to(root.resolve()).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, root: Path) -> bool:
    where = root.joinpath(*dotted.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _in_package(dotted: str) -> bool:
    return dotted.split(".")[0] == PACKAGE.name


def _imported_module(path: Path, node: ast.ImportFrom, root: Path) -> str:
    """The absolute module a ``from ... import`` reads (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _outside_private_module(importer: str, dotted: str) -> bool:
    """A ``_module`` is private to its package: True when ``importer`` is outside the package
    of a private component of ``dotted``."""
    parts = dotted.split(".")
    return any(
        _is_private(part) and not importer.startswith(".".join(parts[:i]) + ".")
        for i, part in enumerate(parts)
    )


def _bindings(scope: ast.AST, path: Path, root: Path) -> dict[str, str]:
    """Local name -> module, for the package's modules imported directly in ``scope`` (not in
    the functions nested in it)."""
    bound: dict[str, str] = {}
    for node in _own_nodes(scope):
        if isinstance(node, ast.ImportFrom):
            module = _imported_module(path, node, root)
            for alias in node.names:
                if _in_package(module) and _is_module(f"{module}.{alias.name}", root):
                    bound[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _in_package(alias.name):
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
    return bound


def _own_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of ``scope`` outside the functions nested in it."""
    nodes: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        nodes.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return nodes


def _stored(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a function binds itself (arguments and assignments), shadowing outer ones."""
    names = {arg.arg for arg in ast.walk(function.args) if isinstance(arg, ast.arg)}
    for node in _own_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _dotted(node: ast.AST, scope: dict[str, str]) -> str | None:
    """``a.b.c`` as the dotted path it names when ``a`` is a module of the package in scope."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in scope:
        return ".".join([scope[node.id], *reversed(attrs)])
    return None


def private_imports(path: Path, root: Path = ROOT) -> list[str]:
    """Each use in ``path`` of another module's private name, as ``"line: what"``.

    Counted: ``from m import _x`` and ``m._x`` (an attribute of an imported module of the
    package); a private *module* (``m._x`` a module) only from outside its package, whose
    modules share it.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path, root)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _imported_module(path, node, root)
            if not _in_package(module):
                continue
            if _outside_private_module(me, module):
                found.append(f"{node.lineno}: from {module} import ...")
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if _is_module(full, root):
                    if _outside_private_module(me, full):
                        found.append(f"{node.lineno}: from {module} import {alias.name}")
                elif _is_private(alias.name):
                    found.append(f"{node.lineno}: from {module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _in_package(alias.name) and _outside_private_module(me, alias.name):
                    found.append(f"{node.lineno}: import {alias.name}")

    def visit(scope_node: ast.AST, scope: dict[str, str]) -> None:
        for node in _own_nodes(scope_node):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                base = _dotted(node.value, scope)
                if base is not None and base != me and _is_module(base, root):
                    target = f"{base}.{node.attr}"
                    if not _is_module(target, root) or _outside_private_module(me, target):
                        found.append(f"{node.lineno}: {target}")
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner = {k: v for k, v in scope.items() if k not in _stored(node)}
                visit(node, inner | _bindings(node, path, root))

    visit(tree, _bindings(tree, path, root))
    return sorted(set(found), key=lambda entry: int(entry.split(":")[0]))


def multi_base_classes(path: Path, root: Path = ROOT) -> dict[str, list[str]]:
    """Each class of ``path`` with more than one base from the package -> those bases."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    modules = _bindings(tree, path, root)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = _imported_module(path, node, root)
            if _in_package(module):
                names |= {
                    alias.asname or alias.name
                    for alias in node.names
                    if not _is_module(f"{module}.{alias.name}", root)
                }
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        ours = []
        for base in node.bases:
            base = base.value if isinstance(base, ast.Subscript) else base
            if (isinstance(base, ast.Name) and base.id in names) or (
                isinstance(base, ast.Attribute) and _dotted(base, modules) is not None
            ):
                ours.append(ast.unparse(base))
        if len(ours) > 1:
            found[f"{_module_name(path, root)}.{node.name}"] = ours
    return found


ISSUE_NUMBER = re.compile(r"\bissues?[\s#-]*\d+", re.IGNORECASE)
""""issue 24", "issue #26", "issues 10", "pre-issue-3": a number that tells a reader nothing."""


def issue_mentions(path: Path) -> list[str]:
    """Each line of ``path`` that refers to an issue by number, as ``"line: text"``."""
    return [
        f"{i}: {line.strip()}"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE_NUMBER.search(line)
    ]


def _over_allowance(
    counts: dict[str, int], allowed: dict[str, int], what: str
) -> dict[str, int]:
    """The entries of ``counts`` above their allowance; a warning names allowances unused."""
    stale = sorted(name for name, n in allowed.items() if counts.get(name, 0) < n)
    if stale:
        _warn(f"{what}: allowlist entries now (partly) unneeded, remove them: {stale}")
    return {name: n for name, n in counts.items() if n > allowed.get(name, 0)}


# ------------------------------------------------------------------------ the structure, counted
MULTI_BASE_ALLOWED: set[str] = set()

PRIVATE_IMPORTS_ALLOWED: dict[str, int] = {}

ISSUE_MENTIONS_ALLOWED: dict[str, int] = {}


@pytest.mark.filterwarnings("default::UserWarning")
def test_no_new_class_has_more_than_one_base_from_the_package() -> None:
    """A class gains a capability by holding a part, not by another in-package base."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found |= multi_base_classes(path)
    counts = dict.fromkeys(found, 1)
    over = _over_allowance(counts, dict.fromkeys(MULTI_BASE_ALLOWED, 1), "multi-base classes")
    assert {name: found[name] for name in over} == {}


@pytest.mark.filterwarnings("default::UserWarning")
def test_no_module_imports_another_modules_private_name() -> None:
    """A helper other modules need is public where it lives (package and tests alike)."""
    found = {
        str(path.relative_to(ROOT)): uses
        for base in (PACKAGE, TESTS)
        for path in sorted(base.rglob("*.py"))
        for uses in [private_imports(path)]
        if uses
    }
    counts = {name: len(uses) for name, uses in found.items()}
    over = _over_allowance(counts, PRIVATE_IMPORTS_ALLOWED, "private imports")
    assert {name: found[name] for name in over} == {}


@pytest.mark.filterwarnings("default::UserWarning")
def test_the_package_says_reasons_not_issue_numbers() -> None:
    """Comments and docstrings say why; git history keeps which issue asked for it."""
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        for lines in [issue_mentions(path)]
        if lines
    }
    counts = {name: len(lines) for name, lines in found.items()}
    over = _over_allowance(counts, ISSUE_MENTIONS_ALLOWED, "issue numbers")
    assert {name: found[name] for name in over} == {}


def test_the_structure_checks_see_what_they_count(tmp_path: Path) -> None:
    """Each check can fail: a module written to break all three rules, in a small package
    laid out like ours, is caught by each (and a shadowed name is not taken for a module)."""
    package = tmp_path / "edge_runtime"
    for module in ("__init__", "errors", "wire/__init__", "wire/fields", "fpca/__init__"):
        (package / f"{module}.py").parent.mkdir(parents=True, exist_ok=True)
        (package / f"{module}.py").write_text('"""A module."""\n', encoding="utf-8")
    (package / "fpca" / "_validation.py").write_text('"""Private to fpca."""\n')
    bad = package / "wire" / "bad.py"
    bad.write_text(
        '"""A module that breaks the rules (issue 12, see issue #7)."""\n'
        "from edge_runtime.wire.fields import _SEQ_LIMIT\n"
        "from edge_runtime.wire import fields\n"
        "from edge_runtime.fpca import _validation\n"
        "from edge_runtime.errors import EdgeRuntimeError\n"
        "from edge_runtime.wire.fields import WireError\n"
        "class Both(EdgeRuntimeError, WireError, ValueError):\n"
        "    limit = fields._private_limit\n"
        "def shadowed(fields):\n"
        "    return fields._attribute_of_an_argument\n",
        encoding="utf-8",
    )
    assert [line.split(":")[0] for line in issue_mentions(bad)] == ["1"]
    assert ISSUE_NUMBER.findall(bad.read_text()) == ["issue 12", "issue #7"]
    assert [use.split(": ", 1)[1] for use in private_imports(bad, tmp_path)] == [
        "from edge_runtime.wire.fields import _SEQ_LIMIT",
        "from edge_runtime.fpca import _validation",
        "edge_runtime.wire.fields._private_limit",
    ]
    assert multi_base_classes(bad, tmp_path) == {
        "edge_runtime.wire.bad.Both": ["EdgeRuntimeError", "WireError"]
    }
    inside = package / "fpca" / "merge.py"  # fpca's own modules share its private module
    inside.write_text("from edge_runtime.fpca import _validation\n", encoding="utf-8")
    assert private_imports(inside, tmp_path) == []


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
