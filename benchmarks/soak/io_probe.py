"""``--io``: one leaf process under a real Mosquitto, its ``/proc/PID/io``, ``fsync`` calls and
checkpoints over a window, extrapolated to a day."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path

from benchmarks.processes import io_counters
from benchmarks.soak.harness import Soak


async def io_probe(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    """One leaf with ``--state-dir`` fed ``--rate`` readings/s in messages of ``--batch`` for
    ``--minutes`` after ``--warmup`` s: its I/O counters over the window, its ``fsync`` calls
    (``strace -c`` where ptrace is allowed) and checkpoints (its status document), and their
    rates per day."""
    args.leaves = 1
    soak = Soak(args, workdir)
    soak.start_broker()
    leaf = soak.leaves[0]
    soak.start_agent(leaf)
    stop = asyncio.Event()
    publisher = asyncio.create_task(soak.publish(stop))
    await asyncio.sleep(args.warmup)
    pid, trace_out = soak.procs[leaf].pid, workdir / "strace.txt"
    first, ckpt0, t1 = io_counters(pid), await _checkpoints(soak, leaf), time.monotonic()
    strace = None
    with contextlib.suppress(OSError):
        strace = subprocess.Popen(
            ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2",
             "-o", str(trace_out), "-p", str(pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(args.minutes * 60.0)
    last, t2 = io_counters(pid), time.monotonic()
    ckpt1 = await _checkpoints(soak, leaf)
    if strace is not None:
        strace.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            strace.wait(timeout=10)
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(publisher, 10)
    soak.procs[leaf].stop(30.0)
    soak.broker.stop()
    window = t2 - t1
    per_day = 86_400.0 / window
    fsyncs = None
    with contextlib.suppress(OSError):
        for parts in (line.split() for line in trace_out.read_text().splitlines()):
            if parts and parts[-1] in ("fsync", "fdatasync") and len(parts) >= 5:
                fsyncs = (fsyncs or 0) + int(parts[3])
    delta = {k: last[k] - first[k] for k in last}
    checkpoints = None if ckpt0 is None or ckpt1 is None else ckpt1 - ckpt0
    return {
        "checkpoint_interval": args.checkpoint_interval, "rate": args.rate, "batch": args.batch,
        "window_s": round(window, 1), "io_delta": delta,
        "write_bytes_per_day": delta["write_bytes"] * per_day,
        "wchar_per_day": delta["wchar"] * per_day, "syscw_per_day": delta["syscw"] * per_day,
        "checkpoints": checkpoints,
        "checkpoints_per_day": None if checkpoints is None else checkpoints * per_day,
        "fsyncs": fsyncs, "fsyncs_per_day": None if fsyncs is None else fsyncs * per_day,
        "strace": trace_out.read_text() if trace_out.exists() else None,
        "readings_sent": soak.sent[leaf],
    }


async def _checkpoints(soak: Soak, leaf: str) -> int | None:
    """The leaf's ``checkpoints`` from its retained status document (None if none came)."""
    found: list[int] = []

    def handle(m) -> bool:
        if isinstance(m.payload, bytes | bytearray) and m.payload:
            found.append(int(json.loads(m.payload)["extra"]["checkpoints"]))
        return bool(found)

    await soak.read_retained([f"{soak.prefix}/root/site-a/{leaf}/status/detail"], handle)
    return found[0] if found else None
