"""A run of simulated days: a `Harness` per run, the fsync double installed, tracemalloc on
when asked, the checkpoints in a scratch directory on a real disk."""

from __future__ import annotations

import os
import shutil
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np

from benchmarks.longevity.harness import Harness
from benchmarks.longevity.probes import counting_fsync
from benchmarks.longevity.stats import DayStats, LongevityRun
from edge_runtime.topology import Topology


def run_days(
    run: LongevityRun, data: np.ndarray, topology: Topology, progress: bool = True
) -> list[DayStats]:
    """Simulate ``run.days`` (one case per day); per-day statistics."""
    out: list[DayStats] = []
    tmp = Path(tempfile.mkdtemp(prefix="longevity-", dir=str(_scratch_dir())))
    try:
        with counting_fsync(run.real_fsync) as fsync:
            if run.trace_memory:
                tracemalloc.start()
            try:
                harness = Harness(run, topology, data, tmp)
                harness.fsync = fsync  # type: ignore[attr-defined]
                for i, case in enumerate(run.days, 1):
                    day = harness.simulate_day(i, case)
                    out.append(day)
                    if progress:
                        print(
                            f"  rate {run.rate:g}/s interval {run.checkpoint_interval_s:g}s "
                            f"day {i} {case}: {day.fsyncs} fsync, "
                            f"{day.bytes_written / 1e6:.2f} MB, {day.checkpoints} ckpt, "
                            f"lines {sum(day.log_lines.values())}, "
                            f"mem {day.mem_current / 1e6:.2f}/{day.mem_peak / 1e6:.2f} MB, "
                            f"rss {day.rss / 1e6:.2f} MB, objects {day.objects:,}, "
                            f"lat p95 {day.latency_p95:.1f}s ({day.wall_s:.0f}s)",
                            flush=True,
                        )
            finally:
                if run.trace_memory:
                    tracemalloc.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _scratch_dir() -> Path:
    """A directory on a real disk (not tmpfs), so /proc/self/io sees the writes."""
    for candidate in (Path("/var/tmp"), Path(tempfile.gettempdir())):
        if candidate.is_dir() and os.access(candidate, os.W_OK):
            return candidate
    return Path(tempfile.gettempdir())
