"""What the run measures outside the cores: ``os.fsync`` calls (a counting test double),
``/proc/self/io`` ``write_bytes`` and ``VmRSS``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


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


def proc_write_bytes() -> int | None:
    """``write_bytes`` of ``/proc/self/io`` (bytes this process caused to be written to
    storage), or None where there is no such file."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return None


def rss_bytes() -> int:
    """VmRSS of this process, bytes (0 where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
