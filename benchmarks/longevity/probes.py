"""``os.fsync`` calls counted by a test double (what `edge_runtime.atomicfile` calls)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


class FsyncCounter:
    """The counting test double of ``os.fsync`` (installed by `counting_fsync`)."""

    def __init__(self, real: bool) -> None:
        self.calls = 0
        self.real = real
        self._fsync = os.fsync

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.real:
            self._fsync(fd)


@contextlib.contextmanager
def counting_fsync(real: bool = False) -> Iterator[FsyncCounter]:
    """Replace ``os.fsync`` (what `edge_runtime.atomicfile` calls) by a counter."""
    counter = FsyncCounter(real)
    saved = os.fsync
    os.fsync = counter  # type: ignore[assignment]
    try:
        yield counter
    finally:
        os.fsync = saved  # type: ignore[assignment]

