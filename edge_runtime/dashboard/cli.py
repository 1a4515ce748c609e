"""``edge-runtime dashboard``: the command's arguments and its handler.

Registered by `edge_runtime.cli` (``add_dashboard_parser(sub, parents=[common,
connection])`` and ``"dashboard": cmd_dashboard``). Errors are raised as one-line
exceptions that `edge_runtime.cli.main` prints.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import sys
from pathlib import Path
from typing import Any

from edge_runtime.monitor import STALE_AFTER_S

__all__ = ["add_dashboard_parser", "cmd_dashboard"]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {text!r}")
    return value


def add_dashboard_parser(
    subparsers: Any, parents: list[argparse.ArgumentParser] | None = None
) -> argparse.ArgumentParser:
    """Add the ``dashboard`` sub-command; ``parents`` are the CLI's shared option parsers
    (log level, broker security)."""
    # Imported here: edge_runtime.cli imports this module at its top, so it is complete
    # only by the time it calls this function.
    from edge_runtime.cli import _positive_float

    parser = subparsers.add_parser(
        name="dashboard",
        parents=parents or [],
        help="serve a live web page of the tree (needs the 'dashboard' extra)",
        description="Serve one web page showing each node's liveness, coverage, rank and "
        "privacy, the root model's scree plot and anomaly rates, updated live from the "
        "broker (server-sent events; /state.json gives the same data as JSON).",
    )
    parser.add_argument("--topology", type=Path, required=True)
    parser.add_argument("--broker", required=True, help="mqtt://HOST[:PORT] or mqtts://...")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=_port, default=8080, help="port to listen on (8080)")
    parser.add_argument(
        "--stale-after",
        type=_positive_float,
        default=STALE_AFTER_S,
        help=f"an online node silent this many seconds is shown as stale ({STALE_AFTER_S:g})",
    )
    return parser


async def cmd_dashboard(args: argparse.Namespace) -> int:
    """Run the dashboard of ``args`` (``topology``, ``broker``, ``host``, ``port``,
    ``stale_after``) until interrupted; 0 on a clean stop.

    Raises
    ------
    CliError
        If aiohttp is missing, the topology or broker settings are invalid, or the
        address cannot be listened on (in use, not available, not permitted).
    """
    from edge_runtime.cli import CliError, _settings, _topology  # the CLI's own helpers

    try:
        from edge_runtime.dashboard.server import serve_dashboard
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs aiohttp ({exc.name or exc}): "
            "pip install 'edge-runtime[dashboard]'"
        ) from None
    topology = _topology(args.topology)
    settings = _settings(args.broker, args)

    def ready(url: str) -> None:
        print(f"dashboard of {topology.name} on {url} (Ctrl-C stops)", file=sys.stderr, flush=True)

    try:
        await serve_dashboard(
            topology,
            settings,
            args.host,
            args.port,
            stop=asyncio.Event(),
            stale_after_s=args.stale_after,
            on_ready=ready,
        )
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
        raise
    return 0
