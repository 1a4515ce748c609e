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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from edge_runtime.delivery import LeafDelivery
from edge_runtime.simulation.config import SimulationConfig
from edge_runtime.simulation.events import FEED, PROBE, READ, Draws, EventQueue
from edge_runtime.topology import Topology
from edge_runtime.wire import ConfirmMessage, SensorReadings

__all__ = ["ReplayModel", "ReplayStream"]


@dataclass(kw_only=True)
class ReplayStream(LeafDelivery):
    """The replay's view of one leaf: a `LeafDelivery` (as in `edge_runtime.replay.Replayer`)
    with the leaf's dataset rows, its start and its interval between batches (virtual s),
    and how many times slower than the others it is fed (its links as much slower)."""

    rows: np.ndarray
    start: float
    interval: float
    slow: float = 1.0
    source: str = ""


class ReplayModel:
    """The replay's part of a simulation: one `ReplayStream` per leaf, fed, confirmed,
    re-sent and probed as `edge_runtime.replay.Replayer` does.

    Parameters
    ----------
    data : ndarray of shape (n_samples, n_features), float64
        The rows dealt to the leaves.
    topology : Topology
        Which rows each leaf gets (`Topology.split_rows`).
    config : SimulationConfig
        Its ``feed`` (batches, pace, stragglers, window, probe) and ``readings`` link.
    draws : Draws
        The run's random draws (stragglers, starts).
    queue : EventQueue
        Where its batches are sent (``READ``), its feeding (``FEED``) and probes
        (``PROBE``, index -1) scheduled, and whose ``now`` it reads.

    Attributes
    ----------
    sensor_messages : int
        Batches sent, first sends and re-sends.
    resent : int
        Readings sent again.
    """

    def __init__(
        self,
        data: np.ndarray,
        topology: Topology,
        config: SimulationConfig,
        draws: Draws,
        queue: EventQueue,
    ) -> None:
        self._data = data
        self._topology = topology
        self._config = config
        self._draws = draws
        self._queue = queue
        self.sensor_messages = 0
        self.resent = 0
        self._last_progress = 0.0
        self._probed = False
        self._probe_scheduled = False
        self._gave_up = False  # quiet for twice probe_s after the probe: the replay exits
        self._streams: dict[int, ReplayStream] = {}
        self._feeding = 0  # streams not sent completely yet

    @property
    def gave_up(self) -> bool:
        """Whether the replay stopped waiting for confirmations (it exits then)."""
        return self._gave_up

    @property
    def streams(self) -> Mapping[int, ReplayStream]:
        """The streams by leaf index (read them; the model changes them)."""
        return self._streams

    def plan(self, leaves: Mapping[int, str]) -> dict[int, float]:
        """One stream per leaf (``leaves``: node id by index): a straggler fraction of the
        leaves made slow, each leaf's rows (`Topology.split_rows`) and a uniform random
        start. Returns each leaf's slowdown (1.0, or ``Feed.straggler_slowdown``)."""
        feed = self._config.feed
        draws = self._draws
        indices = list(leaves)
        n_leaves = len(indices)
        order = draws.rng.permutation(n_leaves)
        stragglers = {indices[i] for i in order[: round(feed.stragglers * n_leaves)]}
        split = self._topology.split_rows(self._data.shape[0])
        slowdowns: dict[int, float] = {}
        for index, node_id in leaves.items():
            slow = feed.straggler_slowdown if index in stragglers else 1.0
            start = draws.uniform() * feed.start_spread_s
            self._streams[index] = ReplayStream(
                rows=split[node_id],
                start=start,
                interval=feed.interval_s * slow,
                slow=slow,
                source=f"replay:{node_id}",
            )
            slowdowns[index] = slow
        return slowdowns

    def start(self) -> None:
        """Schedule the first batch of every stream with rows, at its start."""
        for index, stream in self._streams.items():
            if len(stream.rows):
                self._feeding += 1
                self._queue.push(stream.start, FEED, index)

    def _put(self, index: int, first: int, end: int) -> None:
        stream = self._streams[index]
        batch = self._config.feed.batch_size
        for lo in range(first, end, batch):
            hi = min(end, lo + batch)
            readings = SensorReadings(self._data[stream.rows[lo:hi]], stream.source, lo)
            self.sensor_messages += 1
            self._queue.send(self._config.readings, stream.slow, READ, index, readings)

    def _resend_due(self, index: int, stream: ReplayStream) -> None:
        todo = stream.take_resend()
        if todo is not None:
            first, end = todo
            self.resent += end - first
            self._put(index, first, end)

    def on_confirm(self, index: int, confirm: ConfirmMessage) -> None:
        """``Replayer._on_confirm`` for leaf ``index``: drop durable readings, notice what
        was lost; only a confirmation of readings no earlier one confirmed is progress
        (`Replayer._moved`)."""
        stream = self._streams[index]
        if stream.on_confirm(confirm, stream.source):
            self._last_progress = self._queue.now
        self._resend_due(index, stream)

    def feed(self, index: int) -> None:
        """The next batch of leaf ``index`` (within the window), and the one after it
        scheduled; once every stream is sent, the probe."""
        stream = self._streams[index]
        now = self._queue.now
        n = len(stream.rows)
        due = min(n, stream.sent + self._config.feed.batch_size)
        due = min(due, stream.durable + 1 + self._config.feed.window)
        if due > stream.sent:
            first, stream.sent = stream.sent, due
            self._put(index, first, due)
            self._last_progress = now  # a reading sent for the first time is progress
        if stream.sent < n:
            self._queue.push(now + stream.interval, FEED, index)
            return
        self._feeding -= 1
        if not self._feeding:  # everything sent: the replay waits for confirmations
            self._schedule_probe()

    def unconfirmed(self) -> int:
        """Readings sent and not confirmed durable, over all leaves."""
        return sum(max(0, s.unconfirmed()) for s in self._streams.values())

    def unconfirmed_leaves(self) -> int:
        """Leaves with readings not confirmed durable."""
        return sum(1 for s in self._streams.values() if s.unconfirmed() > 0)

    def probing(self) -> bool:
        """Whether a probe is scheduled while readings are unconfirmed (still waiting)."""
        return self._probe_scheduled and bool(self.unconfirmed())

    def _schedule_probe(self) -> None:
        if not self._probe_scheduled:
            self._probe_scheduled = True
            self._queue.push(self._last_progress + self._config.feed.probe_s, PROBE, -1)

    def probe(self) -> None:
        """``Replayer._confirm``: once quiet for ``probe_s``, re-send unconfirmed tails once;
        give up after twice as long."""
        self._probe_scheduled = False
        if not self.unconfirmed():
            return
        probe_s = self._config.feed.probe_s
        now = self._queue.now
        # deadlines compared as times, as they were scheduled: ``now - last < probe_s``
        # can hold at ``now == last + probe_s`` in floating point (a probe loop at one instant)
        if now < self._last_progress + probe_s:
            self._schedule_probe()
            return
        if self._probed:
            give_up = self._last_progress + 2 * probe_s
            if now < give_up:
                self._probe_scheduled = True
                self._queue.push(give_up, PROBE, -1)
            else:
                self._gave_up = True
            return
        self._probed = True
        for index, stream in self._streams.items():
            if stream.unconfirmed() > 0:
                stream.want_resend(stream.ingested + 1)
                self._resend_due(index, stream)
        self._schedule_probe()
