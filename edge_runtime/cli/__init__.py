"""``edge-runtime``: the command line, and the composition root of the runtime.

Commands: ``run`` (the whole tree on this machine, with a replay and a summary),
``agent`` (one node, as a Raspberry Pi runs it), ``replay`` (a dataset as live sensor
readings), ``watch`` (follow the root's global model), ``acl`` and ``bridge`` (Mosquitto
configuration), ``dashboard`` (a live web page), ``enroll`` and ``retire`` (add or remove a
device while the fleet runs). Bad input ends in one line on stderr
and a non-zero exit status, never a traceback.

This module is the entry point only (`main`, the exit statuses, `CliError`) and imports
nothing heavy: the runtime loads inside `main`, so Ctrl-C while it loads (seconds on a
small board) is exit status 130 too. The rest, top to bottom:

- `edge_runtime.cli.parser`: the argument parser; `edge_runtime.cli.argtypes`: its
  value checks.
- `edge_runtime.cli.dispatch`: one parsed command run, and what it raises translated
  into one line and an exit status.
- `edge_runtime.cli.inputs`: arguments turned into a topology, data and broker settings.
- `edge_runtime.cli.run` (``run``, ``agent``, ``replay``), `edge_runtime.cli.watch`
  (``watch``, ``dashboard``), `edge_runtime.cli.configs` (``acl``, ``bridge``),
  `edge_runtime.cli.fleet` (``enroll``, ``retire``): the commands.
- `edge_runtime.cli.output`: the progress line, the run summary, the model line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from edge_runtime.errors import EdgeRuntimeError

if TYPE_CHECKING:
    import argparse

__all__ = [
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1  # ran, but the goal was not reached (coverage, timeout)
EXIT_USAGE = 2  # bad input: files, topology, data, broker address
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as a shell reports it


class CliError(EdgeRuntimeError):
    """A one-line error for the user; `main` prints it and exits non-zero.

    Parameters
    ----------
    message : str
        The whole line after ``edge-runtime: error:``, naming the offending value.
    code : int, default EXIT_USAGE (2)
        The exit status: `EXIT_USAGE` for bad input, `EXIT_FAILED` (1) when the command
        ran but did not reach its goal.
    """

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``edge-runtime`` (`edge_runtime.cli.parser.build_parser`).

    Returns
    -------
    argparse.ArgumentParser
        Its usage errors print one line on stderr and exit with status 2.
    """
    from edge_runtime.cli.parser import build_parser as build

    return build()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``edge-runtime``; returns the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 (`EXIT_OK`) on success, 1 (`EXIT_FAILED`) when the command ran but its goal was
        not reached or the broker could not be talked to, 2 (`EXIT_USAGE`) on bad input,
        130 (`EXIT_INTERRUPTED`) on Ctrl-C. Every error is one line on stderr
        (`edge_runtime.cli.dispatch.failure` says which errors are translated).

    Raises
    ------
    SystemExit
        From argparse: status 0 after ``--help`` / ``--version``, 2 on a usage error.
    """
    try:  # the runtime loads here, so that Ctrl-C while it loads is no traceback either
        blas_pinned = "numpy" not in sys.modules
        with _one_blas_thread_at_load(blas_pinned):
            from edge_runtime.cli.dispatch import dispatch

            args = build_parser().parse_args(argv)
        return dispatch(args, blas_pinned=blas_pinned)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


_BLAS_THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "OMP_NUM_THREADS",
)
"""The environment variables that BLAS libraries (and OpenMP) read once, when loaded."""


@contextmanager
def _one_blas_thread_at_load(pin: bool) -> Iterator[None]:
    """With ``pin``: the BLAS library numpy loads inside starts with one thread (the
    variables of `_BLAS_THREAD_VARIABLES` are 1 while it loads, then restored, so child
    processes do not inherit them). That is what `edge_runtime.cli.dispatch.dispatch` would
    otherwise set with ``threadpoolctl`` (one BLAS thread for small matrices); a library
    loaded so starts no idle worker threads and a command need not import ``threadpoolctl``
    and ``ctypes`` (less import time and RSS for a leaf). Without ``pin`` (numpy was
    loaded before `main`): nothing."""
    if not pin:
        yield
        return
    saved = {name: os.environ.get(name) for name in _BLAS_THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(_BLAS_THREAD_VARIABLES, "1"))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
