"""The processes of a soak: a free port, ``/proc`` samples (RSS, open files, I/O) and the
incarnations of each process."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


def free_port(low: int = 20001) -> int:
    """A free TCP port above 20000 on 127.0.0.1."""
    rng = np.random.default_rng()
    for _ in range(200):
        port = int(rng.integers(low, 60000))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def proc_sample(pid: int) -> tuple[int, int] | None:
    """(VmRSS bytes, open file descriptors) of ``pid``; None if it is gone."""
    try:
        rss = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return None
    return rss, fds


@dataclass
class Incarnation:
    node: str
    pid: int
    started: float
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (age s, rss, fds)
    ended: str = "running"


def proc_io(pid: int) -> dict[str, int]:
    """``/proc/PID/io`` as numbers (write_bytes: bytes sent to storage; syscw: writes)."""
    out = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = int(value)
    return out
