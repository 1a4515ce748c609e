"""The discrete-event machinery under a simulation: the run's seeded random draws, the
kinds of event, one node's life (incarnations, wake-ups, reconnection), and the simulated
broker that delivers a message over a `Link` (delay, order, loss, duplicates) by putting
an event on the heap of virtual time.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from typing import Any

import numpy as np

from edge_runtime.simulation.config import Link, SimulationConfig
from edge_runtime.wire import SensorReadings

__all__ = ["Draws", "EventQueue", "SimNode"]

# event kinds (ints: cheap to compare in the loop)
FEED, READ, SNAP, ECHO, CONF, WAKE, CRASH, RESTART, RECONNECT, PROBE = range(10)


class Draws:
    """Uniform and standard normal draws from one generator, in blocks (fast, reproducible)."""

    def __init__(self, rng: np.random.Generator, block: int = 8192) -> None:
        self.rng = rng
        self.block = block
        self._u = rng.random(block)
        self._n = rng.standard_normal(block)
        self._iu = 0
        self._in = 0

    def uniform(self) -> float:
        """The next draw from the uniform distribution on [0, 1)."""
        if self._iu == self.block:
            self._u, self._iu = self.rng.random(self.block), 0
        self._iu += 1
        return float(self._u[self._iu - 1])

    def normal(self) -> float:
        """The next draw from the standard normal distribution."""
        if self._in == self.block:
            self._n, self._in = self.rng.standard_normal(self.block), 0
        self._in += 1
        return float(self._n[self._in - 1])

    def between(self, bounds: tuple[float, float]) -> float:
        """A uniform draw in ``[low, high)`` of ``bounds`` (e.g. seconds of a fault)."""
        low, high = bounds
        return low + (high - low) * self.uniform()


class SimNode:
    """One node of the simulation: its current core and incarnation."""

    __slots__ = (
        "children",
        "connections",
        "core",
        "id",
        "incarnation",
        "index",
        "is_leaf",
        "parent",
        "queue",
        "reconnecting",
        "slow",
        "wake_gen",
        "wake_time",
    )

    def __init__(self, node_id: str, index: int, is_leaf: bool) -> None:
        self.id = node_id
        self.index = index
        self.is_leaf = is_leaf
        self.parent: int | None = None
        self.children: list[int] = []
        self.core: Any = None  # LeafCore | AggregatorCore | None (down)
        self.incarnation = 0
        self.wake_gen = 0
        self.wake_time = math.inf
        self.slow = 1.0
        self.queue: list[SensorReadings] = []
        self.reconnecting = False


class EventQueue:
    """The heap of events in virtual time and the broker's links that fill it (a base of
    `edge_runtime.simulation.Simulation`).

    Holds ``_heap`` of ``(time, seq, kind, index, payload)``, ``_pending`` (events other
    than wake-ups and replay probes) and the last arrival per ordered link and receiver.
    Reads ``now``, ``draws``, ``nodes``, ``config`` and ``faults``; a push of anything in
    flight resets ``_unsettled`` (the busy nodes followed while nothing is in flight).
    """

    now: float
    draws: Draws
    nodes: list[SimNode]
    config: SimulationConfig
    faults: Counter[str]
    _unsettled: set[int] | None

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self._pending = 0  # events in the heap other than core wake-ups
        self._last_arrival: dict[tuple[int, int], float] = {}

    def _push(self, t: float, kind: int, index: int, payload: Any = None) -> None:
        self._seq += 1
        if kind != WAKE and kind != PROBE:
            self._pending += 1
            self._unsettled = None
        heapq.heappush(self._heap, (t, self._seq, kind, index, payload))

    def _delay(self, link: Link, slow: float) -> float:
        base = link.latency_s * slow
        if link.jitter == 0:
            return base
        return min(base * math.exp(link.jitter * self.draws.normal()), base * link.max_factor)

    def _arrival(self, link: Link, slow: float, kind: int, index: int) -> float:
        t = self.now + self._delay(link, slow)
        if link.ordered:  # not before what was sent earlier on this link to this receiver
            t = max(t, self._last_arrival.get((kind, index), 0.0))
            self._last_arrival[(kind, index)] = t
        return t

    def _send(self, link: Link, slow: float, kind: int, index: int, payload: Any) -> None:
        """Deliver through the broker: delay, maybe lose (the receiver reconnects), maybe twice."""
        if link.drop and self.draws.uniform() < link.drop:
            self.faults["dropped"] += 1
            node = self.nodes[index]
            if not node.reconnecting:
                node.reconnecting = True
                t = self.now + self.draws.between(self.config.faults.reconnect_s)
                self._push(t, RECONNECT, index)
        else:
            self._push(self._arrival(link, slow, kind, index), kind, index, payload)
        if link.duplicate and self.draws.uniform() < link.duplicate:
            self.faults["duplicated"] += 1
            self._push(self._arrival(link, slow, kind, index), kind, index, payload)
