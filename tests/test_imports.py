"""An agent's start-up imports only what it needs: heavy optional modules load lazily.

Measured on this machine: `scipy.stats` and `scipy.optimize` at import time cost an agent about
0.5 s and 40 MB of RSS per process (a Pi runs one agent per device and `run` one per worker);
aiohttp and matplotlib belong to the `dashboard` and `plot` extras.
"""

from __future__ import annotations

import subprocess
import sys

LAZY = ("scipy.stats", "scipy.optimize", "aiohttp", "matplotlib", "serial")


def test_the_cli_and_the_agents_import_no_heavy_optional_module() -> None:
    code = (
        "import sys, edge_runtime.cli.dispatch, edge_runtime.agents, edge_runtime.fpca; "
        f"print(','.join(m for m in {LAZY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == ""
