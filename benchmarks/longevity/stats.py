"""One run's settings (`LongevityRun`) and what each simulated day cost (`DayStats`)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S

#: The per-day counts scaled to 24 h when a simulated "day" is shorter.
COUNTS = ("readings", "applied", "rejected", "checkpoints", "fsyncs", "bytes_written", "steps",
          "leaf_snapshots", "aggregator_snapshots", "confirmations", "status_documents")


@dataclass
class DayStats:
    """What one simulated day cost and produced: counts, bytes, memory (bytes), latency (s)."""

    day: int
    case: str
    readings: int = 0
    applied: int = 0
    rejected: int = 0
    checkpoints: int = 0
    checkpoint_failures: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    proc_write_bytes: int | None = None
    state_bytes: int = 0
    leaf_snapshots: int = 0
    aggregator_snapshots: int = 0
    confirmations: int = 0
    status_documents: int = 0
    steps: int = 0
    reconnect_attempts: int = 0
    log_lines: Counter[str] = field(default_factory=Counter)
    mem_current: int = 0
    mem_peak: int = 0
    latency_p50: float = math.nan
    latency_p95: float = math.nan
    latency_max: float = math.nan
    durable_lag_end: int = 0  # readings ingested but not durable at the day's end
    hours: float = 24.0  # simulated hours (per-day counts scaled to 24 h when fewer)
    rss: int = 0  # VmRSS of the process at the day's end
    objects: int = 0  # objects the garbage collector tracks at the day's end
    mem_runtime: int = 0  # tracemalloc: live bytes allocated in edge_runtime's code
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        lines = dict(self.log_lines)
        return {**self.__dict__, "log_lines": lines, "log_lines_total": sum(lines.values())}


@dataclass
class LongevityRun:
    """One run's settings: ``rate`` readings/s, one case per simulated day."""

    rate: float
    days: list[str]
    checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S
    batch: int = 64
    real_fsync: bool = False
    trace_memory: bool = True
    local_source: bool = False  # outage: readings keep arriving from a local source
    hours_per_day: float = 24.0  # < 24: a shorter "day", per-day numbers scaled up
    hours: list[float] | None = None  # per day, overrides hours_per_day
    single_below: float = 1.0  # at this rate or below: one reading per message

    def day_hours(self, i: int) -> float:
        return self.hours_per_day if self.hours is None else self.hours[i]
