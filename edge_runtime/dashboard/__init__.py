"""A live web dashboard of a running tree (``edge-runtime dashboard``).

Modules: `state` (the I/O-free view model), `follower` (the MQTT shell), `server` (the
aiohttp server, optional extra ``dashboard``), `page` (the HTML page);
the command is in `edge_runtime.cli.watch`.
Importing this package does not need aiohttp; `serve_dashboard` imports it when used.
"""

from __future__ import annotations

from typing import Any

from edge_runtime.dashboard.state import DashboardState as DashboardState
from edge_runtime.monitor import liveness as liveness

__all__: list[str] = []  # internal to the runtime: no user surface


async def serve_dashboard(*args: Any, **kwargs: Any) -> None:
    """`edge_runtime.dashboard.server.serve_dashboard` (imports aiohttp on first use)."""
    from edge_runtime.dashboard.server import serve_dashboard as serve

    await serve(*args, **kwargs)
