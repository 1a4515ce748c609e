"""One parsed command run, and the boundary between the runtime and the user: what the
command raises becomes one line on stderr and an exit status, never a traceback.

Translated (`failure`): `CliError` (its own status); the runtime's bad-input errors
(`TopologyError`, `DatasetError`, `BrokerError`, `AclError`, `BridgeError` and any other
``ValueError``, such as a `WireError` from msgpack or JSON) as status 2; ``ssl.SSLError``
(a certificate or key that cannot be loaded) as status 2; ``aiomqtt.MqttError`` and any
other ``OSError`` (a broker that cannot be reached or drops the connection) as status 1.
Files are read below the command line, which names them: a topology or data path that is
a folder or unreadable is a `TopologyError` or `DatasetError`. ``KeyboardInterrupt`` is
status 130 (`edge_runtime.cli.main`). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import ssl
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import aiomqtt

from edge_runtime.broker.url import BrokerError
from edge_runtime.cli import EXIT_FAILED, EXIT_USAGE, CliError
from edge_runtime.cli.inputs import login_refused, login_refused_line
from edge_runtime.logs import configure_logging
from edge_runtime.topology import TopologyError

__all__ = ["COMMANDS", "DEFAULT_LOG_LEVEL", "dispatch", "failure"]


def _handler(module: str, name: str) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """``module.name``, imported when the command runs: ``edge-runtime agent`` on a Pi does
    not pay for the modules of ``run``, ``replay``, ``watch``, ``dashboard`` and the rest
    (a leaf's import time and RSS stay low)."""

    async def handler(args: argparse.Namespace) -> int:
        command = getattr(importlib.import_module(module), name)
        return await command(args)

    handler.__qualname__ = handler.__name__ = name
    handler.__doc__ = f"`{module}.{name}`, imported when the command runs."
    return handler


COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "run": _handler("edge_runtime.cli.run", "cmd_run"),
    "agent": _handler("edge_runtime.cli.run", "cmd_agent"),
    "replay": _handler("edge_runtime.cli.run", "cmd_replay"),
    "watch": _handler("edge_runtime.cli.watch", "cmd_watch"),
    "acl": _handler("edge_runtime.cli.configs", "cmd_acl"),
    "bridge": _handler("edge_runtime.cli.configs", "cmd_bridge"),
    "dashboard": _handler("edge_runtime.cli.watch", "cmd_dashboard"),
    "enroll": _handler("edge_runtime.cli.fleet", "cmd_enroll"),
    "retire": _handler("edge_runtime.cli.fleet", "cmd_retire"),
    "deploy": _handler("edge_runtime.cli.deploy", "cmd_deploy"),
}
"""The handler of each sub-command: ``await handler(args)`` is its exit status. Each
imports its module when it runs."""

DEFAULT_LOG_LEVEL = dict.fromkeys(COMMANDS, "warning") | {"agent": "info"}
"""The log level of each command without ``--log-level``."""


def dispatch(args: argparse.Namespace, *, blas_pinned: bool = False) -> int:
    """Run the command ``args.command`` with its arguments; returns its exit status.

    Sets ``args.log_level`` to the command's default (`DEFAULT_LOG_LEVEL`) when not
    given, configures logging, and runs the handler in a new event loop with one BLAS
    thread. An error `failure` translates is printed as one line on stderr
    (``edge-runtime: error: ...``).

    Parameters
    ----------
    args : argparse.Namespace
        As `edge_runtime.cli.parser.build_parser` parses them.
    blas_pinned : bool, default False
        True when numpy's BLAS was loaded with one thread (`edge_runtime.cli.main` does
        that): then ``threadpoolctl`` is not needed, nor imported.

    Returns
    -------
    int
        The handler's status, or the translated error's (1 or 2).

    Raises
    ------
    KeyboardInterrupt
        On Ctrl-C (`edge_runtime.cli.main` makes it status 130).
    Exception
        Whatever `failure` does not translate (a bug: its traceback is wanted).
    """
    args.log_level = args.log_level or DEFAULT_LOG_LEVEL[args.command]
    try:
        configure_logging(args.log_level)
        # Small matrices: one BLAS thread is faster and leaves the other core to the loop.
        with contextlib.nullcontext() if blas_pinned else _one_blas_thread():
            return asyncio.run(COMMANDS[args.command](args))
    except Exception as raised:
        translated = failure(raised, getattr(args, "broker", None), args)
        if translated is None:
            raise
        message, code = translated
    print(f"edge-runtime: error: {message}", file=sys.stderr)
    return code


def _one_blas_thread() -> Any:
    """``threadpoolctl.threadpool_limits(limits=1)``, imported here: `edge_runtime.cli.main`
    loads numpy with one BLAS thread instead, and a leaf need not load ``threadpoolctl`` and
    ``ctypes`` (less import time and RSS)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def failure(
    raised: BaseException, broker: str | None = None, args: argparse.Namespace | None = None
) -> tuple[str, int] | None:
    """The line (after ``edge-runtime: error:``) and exit status for an error a command
    raised, or None for one that is not translated (see the module docstring).

    Parameters
    ----------
    raised : BaseException
        An exception group stands for its first leaf (``asyncio.TaskGroup`` wraps the
        errors of its tasks in groups).
    broker : str or None
        The ``--broker`` URL of the command, named in a connection error; None when the
        command started its own broker.
    args : argparse.Namespace, optional
        The command's arguments: a login the broker refused names the user and where its
        password came from (`edge_runtime.cli.inputs.login_refused_line`), not "cannot
        talk to the broker".
    """
    exc = _innermost(raised)
    if isinstance(exc, CliError):
        return str(exc), exc.code
    # AclError, BridgeError and DatasetError are ValueErrors (edge_runtime.errors): not
    # imported here, as an agent loads neither edge_runtime.acl nor the datasets
    if isinstance(exc, TopologyError | BrokerError | ValueError):
        return str(exc), EXIT_USAGE
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc}", EXIT_USAGE
    if broker is not None and args is not None and login_refused(exc):
        return login_refused_line(broker, args, exc), EXIT_FAILED
    if isinstance(exc, aiomqtt.MqttError | OSError):
        where = "" if broker is None else f" {broker}"
        return f"cannot talk to the MQTT broker{where}: {exc}", EXIT_FAILED
    return None


def _innermost(exc: BaseException) -> BaseException:
    """The first leaf of nested exception groups (TaskGroup wraps errors in groups)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
