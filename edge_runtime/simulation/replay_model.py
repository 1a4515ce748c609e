"""The simulation's model of `edge_runtime.replay.Replayer`: each leaf's rows sent as
sequenced batches at the feed's pace, kept until the leaf confirms them durable, and
re-sent by the replay's rules only (after a leaf's new ``(epoch, connection)``, from a
reported gap, and the unconfirmed tails once after a quiet ``probe_s``).

What is the replay's own code and what is a model of it: each leaf's record -- what a
confirmation means, when it asks for a re-send and from where, the window -- is the
replay's `LeafDelivery` itself. The waiting is modelled: progress (a reading sent, or
confirmed, for the first time: `Replayer._moved`), the one probe after ``probe_s`` quiet
and the give-up after twice that (`Replayer._confirm`, ``probe_s`` = half its
``confirm_timeout_s``). Not modelled: the replay's own reconnections
(`LeafDelivery.reconnected`), its pacing by ``--rate`` (each leaf is fed at its own
interval instead), and the early end once the leaves report every unconfirmed reading
rejected (the simulation rejects none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_runtime.delivery import LeafDelivery
from edge_runtime.simulation.config import Link, SimulationConfig
from edge_runtime.simulation.events import FEED, PROBE, READ, Draws, SimNode
from edge_runtime.topology import Topology
from edge_runtime.wire import ConfirmMessage, SensorReadings

__all__ = ["ReplayModel", "ReplayStream"]


@dataclass(kw_only=True)
class ReplayStream(LeafDelivery):
    """The replay's view of one leaf: a `LeafDelivery` (as in `edge_runtime.replay.Replayer`)
    with the leaf's dataset rows, its start and its interval between batches (virtual s)."""

    rows: np.ndarray
    start: float
    interval: float


class ReplayModel:
    """The replay's part of a simulation (a base of `edge_runtime.simulation.Simulation`).

    Holds ``_streams`` (one `ReplayStream` per leaf index), ``_feeding`` (streams not sent
    completely yet), the probe's state, ``sensor_messages`` and ``resent``; sends through
    ``_send`` and ``_push`` (`edge_runtime.simulation.events.EventQueue`).
    """

    now: float
    data: np.ndarray
    config: SimulationConfig
    nodes: list[SimNode]
    draws: Draws
    topology: Topology
    _send: Callable[[Link, float, int, int, Any], None]  # EventQueue._send
    _push: Callable[..., None]  # EventQueue._push

    def __init__(self) -> None:
        self.sensor_messages = 0
        self.resent = 0
        self._last_progress = 0.0
        self._probed = False
        self._probe_scheduled = False
        self._gave_up = False  # quiet for twice probe_s after the probe: the replay exits
        self._streams: dict[int, ReplayStream] = {}
        self._feeding = 0  # streams not sent completely yet

    def _source(self, node: SimNode) -> str:
        return f"replay:{node.id}"

    def _put(self, leaf: SimNode, first: int, end: int) -> None:
        stream = self._streams[leaf.index]
        batch = self.config.feed.batch_size
        for lo in range(first, end, batch):
            hi = min(end, lo + batch)
            readings = SensorReadings(self.data[stream.rows[lo:hi]], self._source(leaf), lo)
            self.sensor_messages += 1
            self._send(self.config.readings, leaf.slow, READ, leaf.index, readings)

    def _resend_due(self, leaf: SimNode, stream: ReplayStream) -> None:
        todo = stream.take_resend()
        if todo is not None:
            first, end = todo
            self.resent += end - first
            self._put(leaf, first, end)

    def _on_confirm(self, leaf: SimNode, confirm: ConfirmMessage) -> None:
        """``Replayer._on_confirm``: drop durable readings, notice what was lost; only a
        confirmation of readings no earlier one confirmed is progress (`Replayer._moved`)."""
        stream = self._streams[leaf.index]
        if stream.on_confirm(confirm, self._source(leaf)):
            self._last_progress = self.now
        self._resend_due(leaf, stream)

    def _feed(self, leaf: SimNode) -> None:
        stream = self._streams[leaf.index]
        n = len(stream.rows)
        due = min(n, stream.sent + self.config.feed.batch_size)
        due = min(due, stream.durable + 1 + self.config.feed.window)
        if due > stream.sent:
            first, stream.sent = stream.sent, due
            self._put(leaf, first, due)
            self._last_progress = self.now  # a reading sent for the first time is progress
        if stream.sent < n:
            self._push(self.now + stream.interval, FEED, leaf.index)
            return
        self._feeding -= 1
        if not self._feeding:  # everything sent: the replay waits for confirmations
            self._schedule_probe()

    def _unconfirmed(self) -> int:
        return sum(max(0, s.unconfirmed()) for s in self._streams.values())

    def _unconfirmed_leaves(self) -> int:
        return sum(1 for s in self._streams.values() if s.unconfirmed() > 0)

    def _schedule_probe(self) -> None:
        if not self._probe_scheduled:
            self._probe_scheduled = True
            self._push(self._last_progress + self.config.feed.probe_s, PROBE, -1)

    def _probe(self) -> None:
        """``Replayer._confirm``: once quiet for ``probe_s``, re-send unconfirmed tails once;
        give up after twice as long."""
        self._probe_scheduled = False
        if not self._unconfirmed():
            return
        probe_s = self.config.feed.probe_s
        # deadlines compared as times, as they were scheduled: ``now - last < probe_s``
        # can hold at ``now == last + probe_s`` in floating point (a probe loop at one instant)
        if self.now < self._last_progress + probe_s:
            self._schedule_probe()
            return
        if self._probed:
            give_up = self._last_progress + 2 * probe_s
            if self.now < give_up:
                self._probe_scheduled = True
                self._push(give_up, PROBE, -1)
            else:
                self._gave_up = True
            return
        self._probed = True
        for index, stream in self._streams.items():
            if stream.unconfirmed() > 0:
                stream.want_resend(stream.ingested + 1)
                self._resend_due(self.nodes[index], stream)
        self._schedule_probe()

    def _plan_streams(self, leaves: list[int]) -> None:
        """One stream per leaf index: a straggler fraction of the leaves made slow, each
        leaf's rows (`Topology.split_rows`) and a uniform random start."""
        feed = self.config.feed
        draws = self.draws
        n_leaves = len(leaves)
        order = self.draws.rng.permutation(n_leaves)
        stragglers = {leaves[i] for i in order[: round(feed.stragglers * n_leaves)]}
        split = self.topology.split_rows(self.data.shape[0])
        for index in leaves:
            node = self.nodes[index]
            node.slow = feed.straggler_slowdown if index in stragglers else 1.0
            start = draws.uniform() * feed.start_spread_s
            self._streams[index] = ReplayStream(
                rows=split[node.id], start=start, interval=feed.interval_s * node.slow
            )

    def _start_feeding(self) -> None:
        """The first batch of every stream with rows, at its start."""
        for index, stream in self._streams.items():
            if len(stream.rows):
                self._feeding += 1
                self._push(stream.start, FEED, index)
