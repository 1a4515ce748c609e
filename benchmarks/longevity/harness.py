"""The leaf and aggregator cores on a virtual clock, driven as their shells drive them."""

from __future__ import annotations

import gc
import heapq
import math
import random
import time
import tracemalloc
from collections import Counter, deque
from pathlib import Path

import numpy as np

from benchmarks.longevity.constants import (
    AGGREGATOR,
    ECHO,
    LEAF,
    LINK_S,
    SNAP,
    WAKE_AGG,
    WAKE_LEAF,
    WALL_ORIGIN,
)
from benchmarks.longevity.stats import DayStats, LongevityRun
from benchmarks.processes import sample_process
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
from edge_runtime.agents.leaf.core.leaf import LeafCore
from edge_runtime.agents.leaf.shell.rejections import REJECT_LOG_BURST
from edge_runtime.backoff import OutageLog
from edge_runtime.checkpoint import save_checkpoint
from edge_runtime.settings import AgentSettings
from edge_runtime.topology import Topology
from edge_runtime.wire import SensorReadings


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
        io0 = _written()
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
        day.rss = _own().rss_bytes
        day.objects = len(gc.get_objects())
        day.fsyncs = self.fsync.calls - fsync0
        io1 = _written()
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


def _own():
    sample = sample_process()
    assert sample is not None  # this process is alive
    return sample


def _written() -> int | None:
    """Bytes this process caused to be written to storage so far; None where not counted."""
    return _own().write_bytes
