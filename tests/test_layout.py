"""The package's shape: small modules, imports pointing down the layers of pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "edge_runtime"
MAX_MODULE_LINES = 600


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
    assert "1 kept, 0 broken" in result.stdout
