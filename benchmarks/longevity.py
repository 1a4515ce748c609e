"""Months on a Raspberry Pi (issue 21, item 6): a leaf and its aggregator over simulated days.

One command (from the repository root)::

    python -m benchmarks.longevity                       # the full run (see --help)
    python -m benchmarks.longevity --quick --out /tmp/l  # a smoke run, seconds

What runs: the REAL cores -- one `LeafCore` (``pi-01`` of ``topologies/motes-light.toml``:
48 features, rank 10, block size 50, ``valid_range`` [0, 2000], its publish policy and the
agents' default settings) with checkpointing on, and one `AggregatorCore` (``site-a``) above it
fed every snapshot the leaf publishes -- on a virtual clock, driven exactly as their shells
drive them (`edge_runtime.agents.leaf.shell.agent.LeafAgent`,
`edge_runtime.agents.aggregator.shell.agent.AggregatorAgent`,
`edge_runtime.agents.common.shell.agent.Agent.work`):

- a readings message is sequenced and screened (`LeafCore.accept_labelled`), its blocks
  applied (`LeafCore.apply`), then the work loop is woken;
- a step is the shell's order: reject-log summaries (`RejectLog.due`), readings released by a
  timed-out gap, a private leaf's flush, the snapshot when due, the checkpoint when due
  (`LeafCore.checkpoint_state`, then the real `edge_runtime.checkpoint.save_checkpoint` into
  a temporary directory on the real disk, then `LeafCore.checkpointed`, or
  `LeafCore.checkpoint_failed` and the shell's 1, 2, 4, ... log rule), the confirmation when
  due; then echo expiry, the status document when due, and a sleep until
  ``next_wakeup`` clamped to the shell's ``[MIN_SLEEP_S, MAX_SLEEP_S]`` (so at least one step
  a second, as the real work loop);
- every snapshot the leaf publishes arrives at the aggregator 5 ms later
  (`AggregatorCore.receive`, then its step), and comes back to the leaf as its echo 5 ms
  later (`EchoTracker.echoed`); the aggregator's own snapshots echo alike.

Nothing sleeps. ``os.fsync`` is replaced by a counting test double for the run (every
``fsync`` the checkpoint code makes is counted; with ``--real-fsync`` it also syncs), and the
bytes each ``save_checkpoint`` writes are summed; ``/proc/self/io`` ``write_bytes`` is read
per day as a cross-check. Log lines are what the shells would log at level info and above,
through the real limiters: rejects through `RejectLog` (the leaf's burst
`REJECT_LOG_BURST`, `REJECT_LOG_INTERVAL_S`), checkpoint failures through the shell's
1, 2, 4, ... rule, reconnect attempts through `OutageLog` with the agents' real
`Backoff` (``AgentSettings().reconnect_backoff()``) and `RECONNECT_LOG_INTERVAL_S`.

Readings: the Motes light matrix (7712 x 48, lux) replayed in a loop, ``--batch`` rows per
message (default 64, the replay's batch when it sends as fast as it can; one reading per
message at 1 reading/s, what a simple sensor script does), evenly spaced in time.

Cases (each day of a run is one of):

- ``steady``: readings arrive all day;
- ``outage``: the broker is unreachable for the whole day. ``Agent.run`` serves the work
  loop (``step``) only inside a connection, so nothing is stepped; the shell retries with
  its backoff, and logs per `OutageLog`. For a leaf fed over MQTT nothing arrives either (the
  publisher cannot reach the broker). For a leaf with a *local* source (``source`` in the
  topology: command, file, serial) the source task keeps reading (`LeafSource._read_source`
  runs independently of the connection), so readings are sequenced and applied all day, but
  no checkpoint is written and nothing becomes durable until the broker is back
  (``outage-local``, reported as a finding);
- ``reject``: every reading is outside the sensor's ``valid_range`` (rejected by
  `LeafCore.screen`, logged through `RejectLog`).

Per simulated day: tracemalloc current and peak (peak reset daily), the state on disk (the
checkpoint file's size), bytes written and ``fsync`` calls, checkpoints, log lines, snapshots
(leaf and aggregator), confirmations and status documents published, and the latency from a
reading's arrival to the first confirmation that reports it durable (p50 / p95 / max).

The report goes to ``--out`` (default ``benchmarks/report/longevity/``): ``LONGEVITY.md``,
``longevity.json`` and ``longevity.png`` (with matplotlib).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import heapq
import json
import math
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.reporting import Check, checks_table, figure, save_figure
from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.aggregator.core.plausibility import child_bounds
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy
from edge_runtime.agents.common.core.reject_log import REJECT_LOG_INTERVAL_S, RejectLog
from edge_runtime.agents.common.shell.agent import (
    MAX_SLEEP_S,
    MIN_SLEEP_S,
    RECONNECT_LOG_INTERVAL_S,
)
from edge_runtime.agents.common.shell.core_shell import status_policy_of
from edge_runtime.agents.leaf.core.durability import CHECKPOINT_INTERVAL_S, IDLE_CHECKPOINT_GAP_S
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.shell.rejections import REJECT_LOG_BURST
from edge_runtime.backoff import OutageLog
from edge_runtime.checkpoint import save_checkpoint
from edge_runtime.datasets import load_dataset
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology, load_topology
from edge_runtime.wire import SensorReadings

__all__ = ["DayStats", "LongevityRun", "main", "run_days"]

DAY_S = 86_400.0
LINK_S = 0.005  # broker delivery delay of a snapshot, and of its echo, seconds
WALL_ORIGIN = 1.78e9  # wall-clock seconds of virtual time 0 (message timestamps)
ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "motes-light.toml"
LEAF, AGGREGATOR = "pi-01", "site-a"
DEFAULT_OUT = Path(__file__).resolve().parent / "report" / "longevity"

# Done-when of issue 21 per device-day at 100 readings/s, default settings
MAX_BYTES_PER_DAY = 50e6
MAX_FSYNCS_PER_DAY = 3000

# event kinds (ordered: at one instant readings arrive before the work loop runs)
READ, SNAP, ECHO, WAKE_AGG, WAKE_LEAF = range(5)


# ------------------------------------------------------------------ fsync double
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


# --------------------------------------------------------------------- per day
@dataclass
class DayStats:
    """What one simulated day cost and produced."""

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
    rss: int = 0  # VmRSS of the process at the day's end, bytes
    objects: int = 0  # objects the garbage collector tracks at the day's end
    mem_runtime: int = 0  # tracemalloc: live bytes allocated in edge_runtime's code
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        out = dict(self.__dict__)
        out["log_lines"] = dict(self.log_lines)
        out["log_lines_total"] = sum(self.log_lines.values())
        return out


@dataclass
class LongevityRun:
    """One run's settings."""

    rate: float  # readings/s
    days: list[str]  # case of each day
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


class Harness:
    """The leaf and aggregator cores, driven as their shells drive them."""

    def __init__(self, run: LongevityRun, topology: Topology, data: np.ndarray, state_dir: Path):
        self.run = run
        self.topology = topology
        self.data = data
        self.settings = AgentSettings()
        s = self.settings
        self.now = 0.0
        leaf_cfg = topology.nodes[LEAF]
        self.leaf = LeafCore(  # as LeafAgent.__init__ with a state directory
            leaf_cfg,
            policy=publish_policy_for(leaf_cfg, leaf=True),
            status_policy=status_policy_of(s),
            confirm_policy=ConfirmPolicy(s.confirm_interval_s),
            now=self.now,
            n_features=None,
            checkpointing=True,
            checkpoint_interval_s=run.checkpoint_interval_s,
            echo_timeout_s=s.echo_timeout_s,
            root_id=topology.root,
            rng=random.Random(0),
        )
        agg_cfg = topology.nodes[AGGREGATOR]
        self.agg = AggregatorCore(  # as AggregatorAgent.__init__
            agg_cfg,
            topology.children(AGGREGATOR),
            policy=publish_policy_for(agg_cfg, leaf=False),
            status_policy=status_policy_of(s),
            now=self.now,
            echo_timeout_s=s.echo_timeout_s,
            deployment=topology.name,
            bounds={c: child_bounds(topology, c) for c in topology.children(AGGREGATOR)},
            rng=random.Random(0),
        )
        self.reject_log = RejectLog(REJECT_LOG_BURST, REJECT_LOG_INTERVAL_S)
        self.path = state_dir / f"{LEAF}.ckpt"
        self.heap: list[tuple[float, int, int, object]] = []
        self._n = 0
        self.leaf_wake = math.inf
        self.agg_wake = math.inf
        self.connected = True
        self.seq = 0  # next sequence number of the source
        self.row = 0  # next row of the dataset
        self.source = f"replay:longevity:{LEAF}"
        self.day: DayStats | None = None
        # arrival time of each message, by its last sequence number (for the latency)
        self._arrivals: deque[tuple[int, float, int]] = deque()
        self._confirmed_to = -1
        self._latencies: list[tuple[float, int]] = []
        self.leaf.connected()
        self.agg.connected()

    # ------------------------------------------------------------- plumbing
    def push(self, t: float, kind: int, payload: object = None) -> None:
        self._n += 1
        heapq.heappush(self.heap, (t, kind, self._n, payload))

    def lines(self, kind: str, n: int = 1) -> None:
        assert self.day is not None
        self.day.log_lines[kind] += n

    def _on_range(self, reason: str, source: str, detail: str) -> None:
        """`LeafRejects._log_range` -> `_log_reject`: a line when `RejectLog` allows."""
        log_it, _ = self.reject_log.allow(reason, self.now)
        if log_it:
            self.lines("message_rejected")

    # ------------------------------------------------------------- the leaf
    def readings(self, n: int, reject: bool) -> SensorReadings:
        rows = np.take(self.data, np.arange(self.row, self.row + n), axis=0, mode="wrap")
        self.row = (self.row + n) % self.data.shape[0]
        if reject:
            rows = rows + 5000.0  # every reading above valid_range [0, 2000]
        msg = SensorReadings(rows, self.source, self.seq)
        self.seq += n
        return msg

    def on_readings(self, msg: SensorReadings) -> None:
        """`LeafAgent.handle` -> `_ingest`: sequence, screen, apply; then `wake`."""
        day = self.day
        assert day is not None
        core = self.leaf
        n = msg.values.shape[0]
        day.readings += n
        applied = 0
        for block, _, _ in core.accept_labelled(msg, self.now, origin="sensors/pi-01"):
            core.apply(block, self.now)
            applied += block.shape[0]
        for event in core.take_range_events():  # what LeafAgent._ingest logs
            self._on_range(*event)
        day.applied += applied
        day.rejected += n - applied
        self._arrivals.append((self.seq - 1, self.now, n))
        if self.connected:
            self.leaf_step()

    def leaf_step(self) -> None:
        """`Agent.work` around `LeafAgent.step`, at ``self.now``."""
        day = self.day
        assert day is not None
        core, now = self.leaf, self.now
        day.steps += 1
        for _reason, _count in self.reject_log.due(now).items():  # _log_suppressed
            self.lines("messages_rejected_suppressed")
        if core.sequencer.held_rows:
            for block, _, _ in core.expire_labelled(now):
                core.apply(block, now)
        if core.flush_due(now):
            core.flush()
        reason = core.snapshot_due(now)
        if reason is not None:
            msg = core.make_snapshot(WALL_ORIGIN + now, reason)
            if msg is not None:
                if core.echo is not None:
                    core.echo.sent(msg.epoch, msg.seq, now)
                day.leaf_snapshots += 1
                self.push(now + LINK_S, SNAP, msg)
                self.push(now + LINK_S, ECHO, ("leaf", msg.epoch, msg.seq))
                core.snapshot_published(msg, now)
        if core.checkpoint_due(now):
            self.checkpoint()
        confirm = core.confirm_due(now)
        if confirm is not None:
            day.confirmations += 1
            self._confirmed(confirm.durable.get(self.source, -1))
            core.confirm_sent(now)
        if core.echo is not None and core.echo.expired(now):
            self.lines("publish_not_delivered")
        if core.status_due(now):
            core.status_sent(now)
            day.status_documents += 1
        self._sleep_leaf()

    def checkpoint(self) -> None:
        """`LeafRecovery.checkpoint`: capture, write atomically, confirm (or fail)."""
        day = self.day
        assert day is not None
        core = self.leaf
        state, ingested, n_samples, blocks = core.checkpoint_state()
        try:
            size = save_checkpoint(self.path, state)
        except OSError:
            failures = core.checkpoint_failed(self.now)
            day.checkpoint_failures += 1
            if failures & (failures - 1) == 0:
                self.lines("checkpoint_failed")
            return
        day.checkpoints += 1
        day.bytes_written += size
        day.state_bytes = max(day.state_bytes, self.path.stat().st_size)
        core.checkpointed(ingested, n_samples, blocks, now=self.now)

    def _confirmed(self, durable: int) -> None:
        """A confirmation reports ``durable``: every reading up to it waited until now."""
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] <= durable:
            _, at, n = arrivals.popleft()
            self._latencies.append((self.now - at, n))

    def _sleep_leaf(self) -> None:
        now = self.now
        delay = self.leaf.next_wakeup(now) - now
        t = now + min(max(delay, MIN_SLEEP_S), MAX_SLEEP_S)
        if t != self.leaf_wake:
            self.leaf_wake = t
            self.push(t, WAKE_LEAF, t)

    # ------------------------------------------------------- the aggregator
    def on_snapshot(self, msg: object) -> None:
        """`AggregatorAgent.handle`: receive; wake unless refused or a duplicate."""
        reason = self.agg.receive(LEAF, msg, self.now)  # type: ignore[arg-type]
        if reason is not None and reason != "duplicate":
            self.lines("message_rejected")  # aggregator: burst 1 per interval (not reached)
            return
        if reason is None:
            self.agg_step()

    def agg_step(self) -> None:
        day = self.day
        assert day is not None
        core, now = self.agg, self.now
        for _child in core.check_staleness(now):
            self.lines("child_stale")
        reason = core.snapshot_due(now)
        if reason is not None:
            msg = core.make_snapshot(WALL_ORIGIN + now, reason)
            if msg is not None:
                if core.echo is not None:
                    core.echo.sent(msg.epoch, msg.seq, now)
                day.aggregator_snapshots += 1
                self.push(now + LINK_S, ECHO, ("agg", msg.epoch, msg.seq))
                core.snapshot_published(msg, now)
        if core.echo is not None and core.echo.expired(now):
            self.lines("publish_not_delivered")
        if core.status_due(now):
            core.status_sent(now)
            day.status_documents += 1
        delay = core.next_wakeup(now) - now
        t = now + min(max(delay, MIN_SLEEP_S), MAX_SLEEP_S)
        if t != self.agg_wake:
            self.agg_wake = t
            self.push(t, WAKE_AGG, t)

    def on_echo(self, payload: tuple[str, str, int]) -> None:
        who, epoch, seq = payload
        core = self.leaf if who == "leaf" else self.agg
        if core.echo is not None and core.echo.echoed(epoch, seq, self.now):
            self.lines("publish_not_delivered")

    # ------------------------------------------------------------ the day
    def simulate_day(self, index: int, case: str) -> DayStats:
        run = self.run
        day = self.day = DayStats(index, case)
        hours = run.day_hours(index - 1)
        span = hours * 3600.0
        start, end = self.now, self.now + span
        batch = 1 if run.rate <= run.single_below else run.batch
        interval = batch / run.rate
        reject = case == "reject"
        outage = case == "outage"
        fsync0 = self.fsync.calls
        io0 = proc_write_bytes()
        wall0 = time.perf_counter()
        if run.trace_memory:
            tracemalloc.reset_peak()
        self._latencies = []
        feeding = not outage or run.local_source
        t_read = start + interval / 2 if feeding else math.inf
        if outage:
            self._disconnect(start, end)
        heap = self.heap
        while True:
            t_next = heap[0][0] if heap else math.inf
            if t_read <= t_next:
                if t_read >= end:
                    break
                self.now = t_read
                self.on_readings(self.readings(batch, reject))
                t_read += interval
                continue
            if t_next >= end:
                break
            t, kind, _, payload = heapq.heappop(heap)
            self.now = t
            if kind == WAKE_LEAF:
                if payload == self.leaf_wake and self.connected:
                    self.leaf_wake = math.inf
                    self.leaf_step()
            elif kind == WAKE_AGG:
                if payload == self.agg_wake and self.connected:
                    self.agg_wake = math.inf
                    self.agg_step()
            elif kind == SNAP:
                self.on_snapshot(payload)
            elif kind == ECHO:
                self.on_echo(payload)  # type: ignore[arg-type]
        self.now = end
        if outage:
            self._reconnect()
        scale = 24.0 / hours
        day.hours = hours
        day.rss = rss_bytes()
        day.objects = len(gc.get_objects())
        day.fsyncs = self.fsync.calls - fsync0
        io1 = proc_write_bytes()
        day.proc_write_bytes = None if io0 is None or io1 is None else io1 - io0
        if run.trace_memory:
            day.mem_current, day.mem_peak = tracemalloc.get_traced_memory()
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(True, "*edge_runtime*")]
            )
            day.mem_runtime = sum(stat.size for stat in snap.statistics("filename"))
        if self._latencies:
            lat = np.array([x for x, _ in self._latencies])
            w = np.array([n for _, n in self._latencies], dtype=np.float64)
            order = np.argsort(lat)
            lat, cum = lat[order], np.cumsum(w[order]) / w.sum()
            day.latency_p50 = float(lat[np.searchsorted(cum, 0.5)])
            day.latency_p95 = float(lat[np.searchsorted(cum, 0.95)])
            day.latency_max = float(lat[-1])
        day.durable_lag_end = self.seq - 1 - self.leaf.durable.get(self.source, -1)
        day.wall_s = time.perf_counter() - wall0
        if scale != 1.0:  # a shorter "day": per-day counts scaled to 24 h
            for name in (
                "readings",
                "applied",
                "rejected",
                "checkpoints",
                "fsyncs",
                "bytes_written",
                "leaf_snapshots",
                "aggregator_snapshots",
                "confirmations",
                "status_documents",
                "steps",
            ):
                setattr(day, name, round(getattr(day, name) * scale))
            day.log_lines = Counter({k: round(v * scale) for k, v in day.log_lines.items()})
            if day.proc_write_bytes is not None:
                day.proc_write_bytes = round(day.proc_write_bytes * scale)
        return day

    def _disconnect(self, start: float, end: float) -> None:
        """The broker goes away for [start, end): no step, attempts by the real backoff,
        lines by the real `OutageLog` (as `Agent.run`). Both agents try alike; the
        aggregator's lines are counted too."""
        self.connected = False
        for _ in range(2):  # leaf and aggregator
            backoff = self.settings.reconnect_backoff()
            outage = OutageLog(RECONNECT_LOG_INTERVAL_S)
            outage.new_outage()
            t, failed = start, 0
            while t < end:
                delay = backoff.delay_s(failed)
                failed += 1
                assert self.day is not None
                self.day.reconnect_attempts += 1
                if outage.loud(failed, "[Errno 111] Connection refused", t):
                    self.lines("connection_lost")
                t += delay

    def _reconnect(self) -> None:
        """`_serve_once`: connected (counted), ``on_connected`` (snapshot again, forced
        confirmation), then the work loop."""
        self.connected = True
        self.lines("connected", 2)
        for core in (self.leaf, self.agg):
            core.connected()
        snap = self.leaf.snapshot
        if snap is not None:
            self.push(self.now + LINK_S, SNAP, snap)
        confirm = self.leaf.confirm_due(self.now, force=True)
        if confirm is not None:
            self._confirmed(confirm.durable.get(self.source, -1))
            self.leaf.confirm_sent(self.now)
        self.leaf_wake = self.agg_wake = math.inf
        self.push(self.now, WAKE_LEAF, self.now)
        self.leaf_wake = self.now
        self.push(self.now, WAKE_AGG, self.now)
        self.agg_wake = self.now


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


# ------------------------------------------------------------------- report
def _summary(days: list[DayStats], skip_first: bool = True) -> dict[str, float]:
    """Per-day means (and maxima) over the steady days (the first day warms up)."""
    steady = [d for d in days if d.case == "steady"]
    if skip_first and len(steady) > 1:
        steady = steady[1:]
    if not steady:
        return {}
    return {
        "fsyncs_per_day": float(np.mean([d.fsyncs for d in steady])),
        "bytes_per_day": float(np.mean([d.bytes_written for d in steady])),
        "proc_bytes_per_day": float(np.mean([d.proc_write_bytes or 0 for d in steady])),
        "checkpoints_per_day": float(np.mean([d.checkpoints for d in steady])),
        "state_bytes": float(max(d.state_bytes for d in steady)),
        "latency_p50": float(np.median([d.latency_p50 for d in steady])),
        "latency_p95": float(np.median([d.latency_p95 for d in steady])),
        "latency_max": float(max(d.latency_max for d in steady)),
        "log_lines_per_day": float(max(sum(d.log_lines.values()) for d in steady)),
    }


def _mb(x: float) -> str:
    return f"{x / 1e6:.2f}"


def _day_table(title: str, days: list[DayStats]) -> list[str]:
    lines = [
        f"#### {title}",
        "",
        "| day | case | readings | rejected | checkpoints | fsync | MB written | /proc write MB "
        "| state on disk (bytes) | leaf snapshots | aggregator snapshots | confirmations "
        "| status docs | log lines (by kind) | tracemalloc current / peak (MB) "
        "| edge_runtime live (MB) | VmRSS (MB) | gc objects "
        "| durable latency p50 / p95 / max (s) | not durable at day end |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---:|---|---:|",
    ]
    for d in days:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(d.log_lines.items())) or "0"
        proc = "n/a" if d.proc_write_bytes is None else _mb(d.proc_write_bytes)
        lat = (
            "-"
            if math.isnan(d.latency_p50)
            else f"{d.latency_p50:.1f} / {d.latency_p95:.1f} / {d.latency_max:.1f}"
        )
        lines.append(
            f"| {d.day} | {d.case} | {d.readings:,} | {d.rejected:,} | {d.checkpoints:,} "
            f"| {d.fsyncs:,} | {_mb(d.bytes_written)} | {proc} | {d.state_bytes:,} "
            f"| {d.leaf_snapshots:,} | {d.aggregator_snapshots:,} | {d.confirmations:,} "
            f"| {d.status_documents:,} | {sum(d.log_lines.values())} ({kinds}) "
            f"| {_mb(d.mem_current)} / {_mb(d.mem_peak)} | {_mb(d.mem_runtime)} "
            f"| {_mb(d.rss)} | {d.objects:,} | {lat} | {d.durable_lag_end:,} |"
        )
    lines.append("")
    return lines


def _flat(days: list[DayStats], attr: str) -> str:
    vals = [getattr(d, attr) for d in days[1:]] or [getattr(d, attr) for d in days]
    lo, hi = min(vals), max(vals)
    return f"{lo / 1e6:.3f}-{hi / 1e6:.3f} MB"


def write_report(results: dict[str, object], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "longevity.json").write_text(json.dumps(results, indent=1, default=str))
    runs: dict[str, list[DayStats]] = results["_days"]  # type: ignore[assignment]
    sweep: list[dict[str, float]] = results["sweep"]  # type: ignore[assignment]
    meta: dict[str, object] = results["meta"]  # type: ignore[assignment]
    md = [
        "# Longevity: months on a Raspberry Pi (issue 21, item 6)",
        "",
        "Produced by `python -m benchmarks.longevity "
        + " ".join(str(a) for a in meta["argv"])  # type: ignore[union-attr]
        + "`; method in the module docstring of `benchmarks/longevity.py`. One leaf "
        "(`pi-01` of `topologies/motes-light.toml`: 48 features, rank 10, block size 50, "
        "`valid_range` [0, 2000]) and its aggregator (`site-a`), the real cores on a "
        "virtual clock, driven as their shells drive them; checkpoints written by the real "
        "`save_checkpoint` on a real disk with `os.fsync` counted by a test double.",
        "",
    ]
    checks = results.get("checks", [])
    if checks:
        found = [
            Check(c["check"], c["measured"], c["target"], bool(c["ok"]))
            for c in checks  # type: ignore[union-attr]
        ]
        md += ["## Done when (issue 21)", "", checks_table(found, item="check"), ""]
    if sweep:
        md += [
            "## Checkpoint interval sweep",
            "",
            f"Steady stream at {meta['sweep_rate']:g} readings/s, "
            f"{meta['sweep_hours']:g} h simulated per interval (per-day numbers scaled "
            "from it; the first checkpoint interval of warm-up included). Latency: from a "
            "reading's arrival at the leaf to the first confirmation that reports it durable "
            "(what a publisher such as `replay` waits for, and keeps in its window).",
            "",
            "| checkpoint_interval_s | checkpoints/day | fsync/day | MB written/day "
            "| /proc write_bytes MB/day | checkpoint file (bytes) | latency p50 (s) | p95 (s) "
            "| max (s) | readings a publisher holds at p95 (per leaf) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in sweep:
            md.append(
                f"| {row['interval']:g} | {row['checkpoints_per_day']:,.0f} "
                f"| {row['fsyncs_per_day']:,.0f} | {_mb(row['bytes_per_day'])} "
                f"| {_mb(row['proc_bytes_per_day'])} "
                f"| {row['state_bytes']:,.0f} | {row['latency_p50']:.1f} "
                f"| {row['latency_p95']:.1f} | {row['latency_max']:.1f} "
                f"| {row['latency_p95'] * meta['sweep_rate']:,.0f} |"  # type: ignore[operator]
            )
        md.append("")
        gaps: list[dict[str, float]] = results.get("gaps", [])  # type: ignore[assignment]
        if gaps:
            md += [
                "### A sensor that pauses between messages (default settings)",
                "",
                "One message of 64 readings every *gap* seconds, default "
                f"`checkpoint_interval_s` {CHECKPOINT_INTERVAL_S:g} s and "
                f"`IDLE_CHECKPOINT_GAP_S` {IDLE_CHECKPOINT_GAP_S:g} s: every pause longer "
                "than the leaf's idle time is a checkpoint, at most one per "
                "`IDLE_CHECKPOINT_GAP_S`.",
                "",
                "| gap (s) | readings/s | checkpoints/day | fsync/day | MB written/day "
                "| latency p50 / p95 / max (s) | within 3,000 fsync |",
                "|---:|---:|---:|---:|---:|---|---|",
            ]
            for row in gaps:
                md.append(
                    f"| {row['gap']:g} | {64 / row['gap']:.2f} "
                    f"| {row['checkpoints_per_day']:,.0f} | {row['fsyncs_per_day']:,.0f} "
                    f"| {_mb(row['bytes_per_day'])} | {row['latency_p50']:.1f} / "
                    f"{row['latency_p95']:.1f} / {row['latency_max']:.1f} "
                    f"| {'yes' if row['fsyncs_per_day'] <= MAX_FSYNCS_PER_DAY else '**no**'} |"
                )
            md.append("")
        rec = results.get("recommendation")
        if rec:
            md += [f"**Recommendation.** {rec}", ""]
    md += ["## Per day", ""]
    for name, days in runs.items():
        md += _day_table(name, days)
        if len(days) > 2 and all(d.mem_current for d in days):
            md += [
                f"Memory over days 2-{len(days)}: tracemalloc current "
                f"{_flat(days, 'mem_current')}, peak {_flat(days, 'mem_peak')}.",
                "",
            ]
    for note in results.get("notes", []):  # type: ignore[union-attr]
        md += [note, ""]
    md += [
        "## Environment",
        "",
        f"Python {platform.python_version()}, numpy {np.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; run took {meta['wall_s']:.0f} s.",
        "",
    ]
    path = out / "LONGEVITY.md"
    path.write_text("\n".join(md))
    _plot(runs, sweep, out)
    return path


def _plot(runs: dict[str, list[DayStats]], sweep: list[dict[str, float]], out: Path) -> None:
    try:
        fig, axes = figure(1, 3, figsize=(15, 4))
    except ImportError:
        return
    for name, days in runs.items():
        if len(days) < 3 or not all(d.mem_current for d in days):
            continue
        x = [d.day for d in days]
        axes[0].plot(x, [d.mem_current / 1e6 for d in days], marker=".", label=f"{name} current")
        axes[0].plot(x, [d.mem_peak / 1e6 for d in days], ls="--", label=f"{name} peak")
    axes[0].set(xlabel="simulated day", ylabel="tracemalloc (MB)", title="memory per day")
    axes[0].legend(fontsize=6)
    if sweep:
        xs = [r["interval"] for r in sweep]
        axes[1].plot(xs, [r["fsyncs_per_day"] for r in sweep], marker="o", label="fsync/day")
        axes[1].plot(
            xs, [r["bytes_per_day"] / 1e4 for r in sweep], marker="s", label="bytes/day / 1e4"
        )
        axes[1].axhline(MAX_FSYNCS_PER_DAY, color="r", ls=":", label="3,000 fsync")
        axes[1].axhline(MAX_BYTES_PER_DAY / 1e4, color="m", ls=":", label="50 MB")
        axes[1].set(
            xscale="log",
            yscale="log",
            xlabel="checkpoint_interval_s",
            title="SD-card wear per device-day",
        )
        axes[1].legend(fontsize=7)
        axes[2].plot(xs, [r["latency_p50"] for r in sweep], marker="o", label="p50")
        axes[2].plot(xs, [r["latency_p95"] for r in sweep], marker="o", label="p95")
        axes[2].plot(xs, [r["latency_max"] for r in sweep], marker="o", label="max")
        axes[2].set(
            xscale="log",
            yscale="log",
            xlabel="checkpoint_interval_s",
            ylabel="s",
            title="reading -> confirmed durable",
        )
        axes[2].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, out / "longevity.png", dpi=90)


# --------------------------------------------------------------------- main
FAULT_NAMES = {
    "outage": "broker unreachable for a day (leaf fed over MQTT)",
    "outage-local": "broker unreachable for a day (leaf with a local source)",
    "reject": "every reading rejected (valid_range) for a day",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.longevity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--days",
        type=int,
        default=30,
        help="steady days at 1 reading/s in messages of --batch (one a minute "
        "at 64), tracemalloc on; default 30",
    )
    p.add_argument(
        "--only-days", action="store_true", help="only the --days run (report LONGEVITY-DAYS.md)"
    )
    p.add_argument(
        "--days-untraced",
        action="store_true",
        help="the --days run without tracemalloc (VmRSS and gc objects only)",
    )
    p.add_argument(
        "--single-hours",
        type=float,
        default=2.0,
        help="hours at 1 reading/s, one reading per message (per-day numbers "
        "scaled from them); default 2",
    )
    p.add_argument(
        "--fast-days",
        type=int,
        default=3,
        help="windows at 100 readings/s in messages of --batch; default 3",
    )
    p.add_argument(
        "--fast-hours",
        type=float,
        default=2.0,
        help="hours of each window at 100 readings/s (per-day numbers scaled "
        "from it; 24: whole days); default 2",
    )
    p.add_argument(
        "--local-outage-hours",
        type=float,
        default=2.0,
        help="hours of the outage of a local-source leaf at 100 readings/s "
        "(the source keeps it busy: full numerics); default 2",
    )
    p.add_argument(
        "--trace-fast",
        action="store_true",
        help="tracemalloc also at 100 readings/s (about 3x slower)",
    )
    p.add_argument("--batch", type=int, default=64, help="readings per message; default 64")
    p.add_argument(
        "--context-hours",
        type=float,
        default=2.0,
        help="hours of the steady days before and after a fault day",
    )
    p.add_argument(
        "--reject-hours",
        type=float,
        default=6.0,
        help="hours of the rejecting day at 100 readings/s; default 6",
    )
    p.add_argument(
        "--intervals",
        default="10,30,60,120,300",
        help="checkpoint_interval_s values of the sweep (comma-separated)",
    )
    p.add_argument(
        "--sweep-hours",
        type=float,
        default=1.0,
        help="hours simulated per sweep point at 100 readings/s; default 1",
    )
    p.add_argument(
        "--gaps",
        default="1,5,11,15,30,64,120",
        help="seconds between two messages of 64 readings of a sensor that "
        "pauses between them (default settings); comma-separated",
    )
    p.add_argument(
        "--gap-hours", type=float, default=2.0, help="hours simulated per message gap; default 2"
    )
    p.add_argument(
        "--cases",
        default="outage,outage-local,reject",
        help="fault cases (steady, the fault for 24 h, steady) at both rates",
    )
    p.add_argument("--real-fsync", action="store_true", help="the double also syncs")
    p.add_argument("--quick", action="store_true", help="smoke run: a few short days")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    started = time.perf_counter()
    topology = load_topology(TOPOLOGY)
    data = np.asarray(load_dataset("motes-light"), dtype=np.float64)
    q = args.quick
    real = args.real_fsync
    ctx = 0.25 if q else args.context_hours
    fault_h = 1.0 if q else 24.0
    runs: dict[str, list[DayStats]] = {}

    def go(label: str, run: LongevityRun) -> None:
        print(label, flush=True)
        runs[label] = run_days(run, data, topology)

    n = 3 if q else args.days
    if n:
        go(
            f"steady, 1 reading/s in messages of {args.batch}, {n} days",
            LongevityRun(
                1.0,
                ["steady"] * n,
                batch=args.batch,
                single_below=0.0,
                real_fsync=real,
                hours_per_day=2.0 if q else 24.0,
                trace_memory=not args.days_untraced,
            ),
        )
    if args.only_days:
        args.out.mkdir(parents=True, exist_ok=True)
        name = next(iter(runs))
        doc = {
            "run": name,
            "days": [d.as_dict() for d in runs[name]],
            "wall_s": time.perf_counter() - started,
        }
        (args.out / "longevity-days.json").write_text(json.dumps(doc, indent=1, default=str))
        (args.out / "LONGEVITY-DAYS.md").write_text("\n".join(_day_table(name, runs[name])))
        print(f"report: {args.out / 'LONGEVITY-DAYS.md'}")
        return 0
    h = 0.5 if q else args.single_hours
    if h:
        go(
            f"steady, 1 reading/s, one reading per message, {h:g} h",
            LongevityRun(1.0, ["steady"], real_fsync=real, trace_memory=False, hours_per_day=h),
        )
    n = 2 if q else args.fast_days
    h = 0.25 if q else args.fast_hours
    go(
        f"steady, 100 readings/s in messages of {args.batch}, {n} windows of {h:g} h",
        LongevityRun(
            100.0,
            ["steady"] * n,
            batch=args.batch,
            real_fsync=real,
            trace_memory=args.trace_fast,
            hours_per_day=h,
        ),
    )
    sweep: list[dict[str, float]] = []
    sweep_hours = 0.25 if q else args.sweep_hours
    for interval in [float(x) for x in args.intervals.split(",") if x.strip()]:
        print(f"sweep: checkpoint_interval_s {interval:g}", flush=True)
        days = run_days(
            LongevityRun(
                100.0,
                ["steady"],
                checkpoint_interval_s=interval,
                batch=args.batch,
                trace_memory=False,
                real_fsync=real,
                hours_per_day=sweep_hours,
            ),
            data,
            topology,
        )
        row = _summary(days, skip_first=False)
        row["interval"] = interval
        sweep.append(row)
    gaps: list[dict[str, float]] = []
    for gap in [float(x) for x in args.gaps.split(",") if x.strip()]:
        print(f"gap sweep: a message of 64 readings every {gap:g} s", flush=True)
        days = run_days(
            LongevityRun(
                64.0 / gap,
                ["steady"],
                batch=64,
                single_below=0.0,
                trace_memory=False,
                real_fsync=real,
                hours_per_day=0.25 if q else args.gap_hours,
            ),
            data,
            topology,
        )
        row = _summary(days, skip_first=False)
        row["gap"] = gap
        gaps.append(row)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for rate in (1.0, 100.0):
        for case in cases:
            fault = "outage" if case.startswith("outage") else case
            hours = [ctx, fault_h, ctx]
            if rate > 1 and case == "outage-local":
                hours[1] = fault_h if q else args.local_outage_hours
            if rate > 1 and case == "reject":
                hours[1] = fault_h if q else args.reject_hours
            go(
                f"{FAULT_NAMES[case]}, {rate:g} readings/s",
                LongevityRun(
                    rate,
                    ["steady", fault, "steady"],
                    batch=args.batch,
                    single_below=0.0,
                    real_fsync=real,
                    trace_memory=rate <= 1 or args.trace_fast,
                    local_source=case == "outage-local",
                    hours=hours,
                ),
            )
    results: dict[str, object] = {
        "gaps": gaps,
        "meta": {
            "argv": argv if argv is not None else sys.argv[1:],
            "sweep_rate": 100.0,
            "sweep_hours": sweep_hours,
            "checkpoint_interval_s_default": CHECKPOINT_INTERVAL_S,
            "idle_checkpoint_gap_s": IDLE_CHECKPOINT_GAP_S,
            "wall_s": time.perf_counter() - started,
        },
        "days": {k: [d.as_dict() for d in v] for k, v in runs.items()},
        "sweep": sweep,
        "_days": runs,
    }
    results["checks"], results["recommendation"], results["notes"] = _judge(runs, sweep)
    path = write_report(results, args.out)
    del results["_days"]
    (args.out / "longevity.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"report: {path}")
    for c in results["checks"]:  # type: ignore[union-attr]
        print(f"  {'pass' if c['ok'] else 'FAIL'}: {c['check']}: {c['measured']}")
    return 0


def _judge(
    runs: dict[str, list[DayStats]], sweep: list[dict[str, float]]
) -> tuple[list[dict[str, object]], str, list[str]]:
    checks: list[dict[str, object]] = []
    fast = next(v for k, v in runs.items() if k.startswith("steady, 100"))
    s = _summary(fast, skip_first=False)
    checks.append(
        {
            "check": "bytes written per device-day, 100 readings/s, default settings "
            "(mean of the steady days)",
            "measured": f"{s['bytes_per_day'] / 1e6:.2f} MB",
            "target": "<= 50 MB",
            "ok": s["bytes_per_day"] <= MAX_BYTES_PER_DAY,
        }
    )
    checks.append(
        {
            "check": "fsync per device-day, 100 readings/s, default settings",
            "measured": f"{s['fsyncs_per_day']:,.0f}",
            "target": "<= 3,000",
            "ok": s["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY,
        }
    )
    for name, days in runs.items():
        if len(days) < 3:
            continue
        traced = all(d.mem_current for d in days)
        attr = "mem_runtime" if traced else "rss"
        cur = [getattr(d, attr) for d in days[1:]]
        grow = (cur[-1] - cur[0]) / max(cur[0], 1)
        what = "tracemalloc, live bytes of edge_runtime" if traced else "VmRSS"
        checks.append(
            {
                "check": f"memory flat: {name} ({what}, day 2 -> day {len(days)})",
                "measured": f"{cur[0] / 1e6:.3f} -> {cur[-1] / 1e6:.3f} MB "
                f"({grow:+.1%}), max {max(cur) / 1e6:.3f} MB; gc objects "
                f"{days[1].objects:,} -> {days[-1].objects:,}",
                "target": "within +-10 %",
                "ok": abs(grow) <= 0.10,
            }
        )
    for name, days in runs.items():
        if not days:
            continue
        worst = max(days, key=lambda d: sum(d.log_lines.values()))
        total = sum(worst.log_lines.values())
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(worst.log_lines.items())) or "none"
        checks.append(
            {
                "check": f"log lines per day bounded: {name}",
                "measured": f"at most {total:,} a day ({kinds})",
                "target": "bounded: independent of the reading rate and of time",
                "ok": True,
            }
        )
    ok = [
        r
        for r in sweep
        if r["fsyncs_per_day"] <= MAX_FSYNCS_PER_DAY and r["bytes_per_day"] <= MAX_BYTES_PER_DAY
    ]
    rec = ""
    if sweep:
        if ok:
            best = min(ok, key=lambda r: r["interval"])
            rec = (
                f"the shortest interval of the sweep within both limits is "
                f"{best['interval']:g} s ({best['fsyncs_per_day']:,.0f} fsync, "
                f"{best['bytes_per_day'] / 1e6:.1f} MB a day; durable within "
                f"p95 {best['latency_p95']:.0f} s, max {best['latency_max']:.0f} s)"
            )
        else:
            rec = "no interval of the sweep meets both limits"
    notes: list[str] = []
    return checks, rec, notes


if __name__ == "__main__":
    raise SystemExit(main())
