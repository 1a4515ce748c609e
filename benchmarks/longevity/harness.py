"""The leaf and aggregator cores on a virtual clock, driven as their shells drive them
(`Harness`), and a run of simulated days (`run_days`) with ``os.fsync`` counted."""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
import os
import random
import tempfile
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.longevity.stats import COUNTS, DayStats, LongevityRun
from benchmarks.processes import sample_process
from edge_runtime.agents.aggregator.core.aggregator import AggregatorCore
from edge_runtime.agents.aggregator.core.plausibility import child_bounds
from edge_runtime.agents.common.core.actions import Publish, Wake, WriteCheckpoint
from edge_runtime.agents.common.core.node import publish_policy_for
from edge_runtime.agents.common.core.policy import ConfirmPolicy
from edge_runtime.agents.common.core.reject_log import REJECT_LOG_INTERVAL_S, RejectLog
from edge_runtime.agents.common.shell import agent as shell
from edge_runtime.agents.common.shell.core_shell import status_policy_of
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.core.tick import MAX_TICK_CALLS
from edge_runtime.agents.leaf.shell.rejections import REJECT_LOG_BURST
from edge_runtime.backoff import OutageLog
from edge_runtime.checkpoint import save_checkpoint
from edge_runtime.settings import AgentSettings
from edge_runtime.simulation.executor import carry_out
from edge_runtime.topology import Topology
from edge_runtime.wire import SensorReadings

LINK_S = 0.005  # broker delivery delay of a snapshot, and of its echo, seconds
WALL_ORIGIN = 1.78e9  # wall-clock seconds of virtual time 0 (message timestamps)
LEAF, AGGREGATOR = "pi-01", "site-a"
# event kinds (ordered: at one instant readings arrive before the work loop runs)
SNAP, ECHO, WAKE_AGG, WAKE_LEAF = range(1, 5)


@contextlib.contextmanager
def counted_fsync(real: bool) -> Iterator[Counter[str]]:
    """``os.fsync`` (what `edge_runtime.atomicfile` calls) counted in ``["fsync"]`` of what it
    yields while entered, by a test double; ``real``: the double also syncs."""
    fsync, calls = os.fsync, Counter[str]()

    def counting(fd: int) -> None:
        calls["fsync"] += 1
        if real:
            fsync(fd)

    os.fsync = counting
    try:
        yield calls
    finally:
        os.fsync = fsync


class Harness:
    """The leaf and aggregator cores, driven as their shells drive them: each step's actions
    carried out by `carry_out` against this harness (`publish`, `write`), in the cores' order."""

    def __init__(self, run: LongevityRun, topology: Topology, data: np.ndarray, state_dir: Path,
                 fsync: Counter[str]):
        self.run, self.topology, self.data, self.fsync = run, topology, data, fsync
        s = self.settings = AgentSettings()
        self.now = 0.0
        leaf_cfg, agg_cfg = topology.nodes[LEAF], topology.nodes[AGGREGATOR]
        self.leaf = LeafCore(  # as LeafAgent.__init__ with a state directory
            leaf_cfg, policy=publish_policy_for(leaf_cfg, leaf=True),
            status_policy=status_policy_of(s), confirm_policy=ConfirmPolicy(s.confirm_interval_s),
            now=self.now, n_features=None, checkpointing=True,
            checkpoint_interval_s=run.checkpoint_interval_s, echo_timeout_s=s.echo_timeout_s,
            root_id=topology.root, rng=random.Random(0),
        )
        children = topology.children(AGGREGATOR)
        self.agg = AggregatorCore(  # as AggregatorAgent.__init__
            agg_cfg, children, policy=publish_policy_for(agg_cfg, leaf=False),
            status_policy=status_policy_of(s), now=self.now, echo_timeout_s=s.echo_timeout_s,
            deployment=topology.name, bounds={c: child_bounds(topology, c) for c in children},
            rng=random.Random(0),
        )
        self.cores = {"leaf": self.leaf, "agg": self.agg}
        self.reject_log = RejectLog(REJECT_LOG_BURST, REJECT_LOG_INTERVAL_S)
        self.path = state_dir / f"{LEAF}.ckpt"
        self.heap: list[tuple[float, int, int, object]] = []
        self._n = 0
        self.wake = {WAKE_LEAF: math.inf, WAKE_AGG: math.inf}  # when each work loop wakes
        self.leaf_slept = 0.0  # when the leaf's work loop last began to sleep
        self.connected = True
        self.seq = self.row = 0  # next sequence number of the source, next row of the data
        self.source = f"replay:longevity:{LEAF}"
        self.day: DayStats = DayStats(0, "")
        self._arrivals: deque[tuple[int, float, int]] = deque()  # (last seq, arrival, rows)
        self._latencies: list[tuple[float, int]] = []
        self._reconnect()  # the first connection (its log lines go to no day)

    def push(self, t: float, kind: int, payload: object = None) -> None:
        self._n += 1
        heapq.heappush(self.heap, (t, kind, self._n, payload))

    def wake_at(self, kind: int, t: float) -> None:
        """The work loop ``kind`` (`WAKE_LEAF`, `WAKE_AGG`) sleeps until ``t``."""
        if t != self.wake[kind]:
            self.wake[kind] = t
            self.push(t, kind, t)

    def lines(self, kind: str, n: int = 1) -> None:
        if n:
            self.day.log_lines[kind] += n

    def readings(self, n: int, reject: bool) -> SensorReadings:
        rows = np.take(self.data, np.arange(self.row, self.row + n), axis=0, mode="wrap")
        self.row = (self.row + n) % self.data.shape[0]
        msg = SensorReadings(rows + 5000.0 if reject else rows, self.source, self.seq)
        self.seq += n  # a rejecting day: every reading above valid_range [0, 2000]
        return msg

    def on_readings(self, msg: SensorReadings) -> None:
        """`LeafAgent.handle` -> `_ingest`: sequence, screen, apply; then `wake_on_input`."""
        day, core, n = self.day, self.leaf, msg.values.shape[0]
        day.readings += n
        results = core.ingest(core.accept_labelled(msg, self.now, origin="sensors/pi-01"), self.now)
        for reason, _source, _detail in core.take_range_events():  # LeafAgent._ingest logs
            if self.reject_log.allow(reason, self.now)[0]:
                self.lines("message_rejected")
        applied = sum(block.shape[0] for block, _, _, error in results if error is None)
        day.applied += applied
        day.rejected += n - applied
        self._arrivals.append((self.seq - 1, self.now, n))
        if self.connected:
            self.wake_on_input()

    def wake_on_input(self) -> None:
        """`Agent.wake_on_input`: the work loop runs at once when the input may be decisive
        (`LeafCore.input_decisive`), else its sleep moves to the core's new `next_wakeup`."""
        now = self.now
        when = now if self.leaf.input_decisive() else min(
            self.leaf.next_wakeup(now), self.leaf_slept + shell.MAX_SLEEP_S)
        if when <= now + shell.MIN_SLEEP_S:
            self.wake[WAKE_LEAF] = math.inf
            self.leaf_step()
        else:
            self.wake_at(WAKE_LEAF, when)

    # The `VirtualIO` of `carry_out`: the broker (snapshots and echoes arrive `LINK_S` later)
    # and the leaf's state directory (a real disk).
    def publish(self, who: str, action: Publish) -> None:
        day, kind, msg = self.day, action.kind, action.message
        if kind == "subspace":
            echo = self.cores[who].echo
            if echo is not None:  # `SnapshotEcho.publish`; the PUBACK comes at once
                echo.sent(msg.epoch, msg.seq, self.now)
                echo.acked(msg.epoch, msg.seq, self.now)
                self.push(self.now + LINK_S, ECHO, (who, msg.epoch, msg.seq))
            if who == "leaf":
                day.leaf_snapshots += 1
                self.push(self.now + LINK_S, SNAP, msg)
            else:
                day.aggregator_snapshots += 1
        elif kind == "confirm":  # every reading up to the durable one waited until now
            day.confirmations += 1
            durable = msg.durable.get(self.source, -1)  # a ConfirmMessage
            while self._arrivals and self._arrivals[0][0] <= durable:
                _, at, n = self._arrivals.popleft()
                self._latencies.append((self.now - at, n))
        elif kind == "status":
            day.status_documents += 1

    def write(self, who: str, action: WriteCheckpoint) -> None:
        """`LeafRecovery.write_checkpoint`: a `CheckpointImage` by the real `save_checkpoint`."""
        self.day.checkpoints += 1
        self.day.bytes_written += save_checkpoint(self.path, action.state.state)
        self.day.state_bytes = max(self.day.state_bytes, self.path.stat().st_size)

    def leaf_step(self, tick: str = "work") -> None:
        """`LeafAgent.step` (``work``, then the rest of `Agent.work`) or `on_connected`
        (``connect``): the core's tick (`LeafCore.step`), carried out until its `Wake`."""
        core, now = self.leaf, self.now
        if tick == "work":
            self.day.steps += 1
            for _ in self.reject_log.due(now).items():  # _log_suppressed
                self.lines("messages_rejected_suppressed")
        for _ in range(MAX_TICK_CALLS):
            actions = core.step(now, timestamp=WALL_ORIGIN + now, tick=tick)
            core.take_released()  # no sequence gaps here: nothing to score or refuse
            carry_out(self, "leaf", core, actions, now)
            if actions and isinstance(actions[-1], Wake):
                break
        if tick == "work":
            self._finish_step("leaf")

    def checkpoint_offline(self) -> None:
        """`LeafRecovery.checkpoint_while_offline`: a due checkpoint (`LeafRecovery.checkpoint`),
        then a sleep until the core's deadline (0.05 to 1 s)."""
        core, now = self.leaf, self.now
        if core.checkpoint_due(now):
            image = WriteCheckpoint("checkpoint", core.checkpoint_image(), "requested")
            carry_out(self, "leaf", core, [image], now)
        self.wake_at(WAKE_LEAF, now + min(max(core.checkpoint_deadline() - now, 0.05), 1.0))

    def _finish_step(self, who: str) -> None:
        """The rest of `Agent.work`: echo expiry, status when due, the next wake-up (clamped)."""
        core, now = self.cores[who], self.now
        if core.echo is not None:
            self.lines("publish_not_delivered", len(core.echo.expired(now)))
        if core.status_due(now):
            carry_out(self, who, core, [Publish("status", None, reason="due")], now)
        t = now + min(max(core.next_wakeup(now) - now, shell.MIN_SLEEP_S), shell.MAX_SLEEP_S)
        if who == "leaf":
            self.leaf_slept = now
        self.wake_at(WAKE_LEAF if who == "leaf" else WAKE_AGG, t)

    def on_snapshot(self, msg) -> None:
        """`AggregatorAgent.handle`: receive; wake unless refused or a duplicate."""
        reason = self.agg.receive(LEAF, msg, self.now)
        if reason is not None and reason != "duplicate":
            self.lines("message_rejected")  # aggregator: burst 1 per interval (not reached)
        elif reason is None:
            self.agg_step()

    def agg_step(self) -> None:
        """`AggregatorAgent.step`: the core's step carried out, its log lines, `_finish_step`."""
        core, now = self.agg, self.now
        carry_out(self, "agg", core, core.step(now, WALL_ORIGIN + now), now)
        self.lines("child_stale", sum(e == "child_stale" for e, _ in core.take_events()))
        self._finish_step("agg")

    def simulate_day(self, index: int, case: str) -> DayStats:
        run = self.run
        day = self.day = DayStats(index, case)
        hours = run.day_hours(index - 1)
        start, end = self.now, self.now + hours * 3600.0
        batch = 1 if run.rate <= run.single_below else run.batch
        interval = batch / run.rate
        outage = case == "outage"
        fsync0, io0, wall0 = self.fsync["fsync"], sample_process().write_bytes, time.perf_counter()
        if run.trace_memory:
            tracemalloc.reset_peak()
        self._latencies = []
        t_read = start + interval / 2 if not outage or run.local_source else math.inf
        if outage:
            self._disconnect(start, end)
        heap = self.heap
        while True:
            t_next = heap[0][0] if heap else math.inf
            if t_read <= t_next:
                if t_read >= end:
                    break
                self.now = t_read
                self.on_readings(self.readings(batch, case == "reject"))
                t_read += interval
                continue
            if t_next >= end:
                break
            t, kind, _, payload = heapq.heappop(heap)
            self.now = t
            if kind in self.wake and payload == self.wake[kind]:
                self.wake[kind] = math.inf
                if kind == WAKE_LEAF:
                    self.leaf_step() if self.connected else self.checkpoint_offline()
                elif self.connected:
                    self.agg_step()
            elif kind == SNAP:
                self.on_snapshot(payload)
            elif kind == ECHO:
                who, epoch, seq = payload  # type: ignore[misc]
                lost = self.cores[who].echo.echoed(epoch, seq, self.now)
                self.lines("publish_not_delivered", len(lost))
        self.now = end
        if outage:
            self._reconnect()
        own = sample_process()  # this process: never None
        day.hours, day.rss, day.objects = hours, own.rss_bytes, len(gc.get_objects())
        day.fsyncs = self.fsync["fsync"] - fsync0
        io1 = sample_process().write_bytes
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
        scale = 24.0 / hours
        if scale != 1.0:  # a shorter "day": per-day counts scaled to 24 h
            for name in COUNTS:
                setattr(day, name, round(getattr(day, name) * scale))
            day.log_lines = Counter({k: round(v * scale) for k, v in day.log_lines.items()})
            if day.proc_write_bytes is not None:
                day.proc_write_bytes = round(day.proc_write_bytes * scale)
        return day

    def _disconnect(self, start: float, end: float) -> None:
        """The broker gone for [start, end): no step; both agents retry by the real backoff
        and log by the real `OutageLog` (as `Agent.run`)."""
        self.connected = False
        self.wake_at(WAKE_LEAF, start)  # the leaf's offline checkpoints begin
        for _ in range(2):  # leaf and aggregator
            backoff = self.settings.reconnect_backoff()
            outage = OutageLog(shell.RECONNECT_LOG_INTERVAL_S)
            outage.new_outage()
            t, failed = start, 0
            while t < end:
                delay = backoff.delay_s(failed)
                failed += 1
                self.day.reconnect_attempts += 1
                if outage.loud(failed, "[Errno 111] Connection refused", t):
                    self.lines("connection_lost")
                t += delay

    def _reconnect(self) -> None:
        """`_serve_once`: connected, ``on_connected`` (the leaf's ``connect`` tick; the
        aggregator's snapshot again), then the work loops."""
        self.connected = True
        self.lines("connected", 2)
        for core in (self.leaf, self.agg):
            core.connected()
            if core.echo is not None:
                core.echo.connected(self.now)
        self.leaf_step("connect")
        if self.agg.snapshot is not None:  # `AggregatorAgent.on_connected` (not reported)
            self.publish("agg", Publish("subspace", self.agg.snapshot, reason="reconnect"))
        for kind in self.wake:
            self.wake_at(kind, self.now)


def run_days(run: LongevityRun, data: np.ndarray, topology: Topology) -> list[DayStats]:
    """Simulate ``run.days`` (one case per day), printing each; per-day statistics. The state
    directory is on a real disk (not tmpfs), so /proc/self/io sees the writes."""
    out: list[DayStats] = []
    disk = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="longevity-", dir=disk) as tmp, \
            counted_fsync(run.real_fsync) as fsync:
        if run.trace_memory:
            tracemalloc.start()
        try:
            harness = Harness(run, topology, data, Path(tmp), fsync)
            for i, case in enumerate(run.days, 1):
                day = harness.simulate_day(i, case)
                out.append(day)
                print(f"  rate {run.rate:g}/s interval {run.checkpoint_interval_s:g}s day {i} "
                      f"{case}: {day.fsyncs} fsync, {day.bytes_written / 1e6:.2f} MB, "
                      f"{day.checkpoints} ckpt, lines {sum(day.log_lines.values())}, mem "
                      f"{day.mem_current / 1e6:.2f}/{day.mem_peak / 1e6:.2f} MB, rss "
                      f"{day.rss / 1e6:.2f} MB, objects {day.objects:,}, lat p95 "
                      f"{day.latency_p95:.1f}s ({day.wall_s:.0f}s)", flush=True)
        finally:
            if run.trace_memory:
                tracemalloc.stop()
    return out
