"""The discrete-event machinery under a simulation: the run's seeded random draws, the
kinds of event, one node's life (incarnations, wake-ups, reconnection), and the event
queue -- the heap of virtual time, its clock, and the simulated broker that delivers a
message over a `Link` (delay, order, loss, duplicates) by putting an event on the heap.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from edge_runtime.simulation.config import Link
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
    """The heap of events in virtual time, the clock it advances, and the broker's links
    that fill it.

    An event is ``(time, seq, kind, index, payload)``: ``kind`` one of the module's event
    kinds, ``index`` the node it concerns (-1 for none), ``seq`` the push order, which
    breaks ties in time (first pushed, first popped). Delays are drawn from ``draws``, the
    run's one seeded source, in the order the sends happen.

    Parameters
    ----------
    draws : Draws
        The run's random draws (delays, losses, duplicates).
    on_in_flight : callable () -> None
        Called on every push of an event other than a wake-up or a replay probe: something
        is in flight again.
    on_lost : callable (index: int) -> None
        Called when a delivery to node ``index`` is lost (its connection broke), before the
        draw for a duplicate.

    Attributes
    ----------
    faults : Counter[str]
        ``dropped`` and ``duplicated`` deliveries.
    """

    def __init__(
        self,
        draws: Draws,
        *,
        on_in_flight: Callable[[], None],
        on_lost: Callable[[int], None],
    ) -> None:
        self._draws = draws
        self._on_in_flight = on_in_flight
        self._on_lost = on_lost
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self._pending = 0  # events in the heap other than core wake-ups and probes
        self._last_arrival: dict[tuple[int, int], float] = {}
        self._now = 0.0
        self.faults: Counter[str] = Counter()

    @property
    def now(self) -> float:
        """Virtual time, seconds: that of the event popped last (0 before the first)."""
        return self._now

    @property
    def pending(self) -> int:
        """Events in the heap other than wake-ups and replay probes (in flight)."""
        return self._pending

    def __len__(self) -> int:
        return len(self._heap)

    def next_time(self) -> float:
        """Virtual time of the next event, seconds; raises IndexError if there is none."""
        return self._heap[0][0]

    def pop(self) -> tuple[int, int, Any]:
        """Advance `now` to the next event and return its ``(kind, index, payload)``."""
        t, _, kind, index, payload = heapq.heappop(self._heap)
        self._now = t
        if kind != WAKE and kind != PROBE:
            self._pending -= 1
        return kind, index, payload

    def push(self, t: float, kind: int, index: int, payload: Any = None) -> None:
        """Put an event at virtual time ``t`` (seconds) on the heap."""
        self._seq += 1
        if kind != WAKE and kind != PROBE:
            self._pending += 1
            self._on_in_flight()
        heapq.heappush(self._heap, (t, self._seq, kind, index, payload))

    def delay(self, link: Link, slow: float) -> float:
        """A delivery delay over ``link`` slowed ``slow`` times, seconds (log-normal, capped)."""
        base = link.latency_s * slow
        if link.jitter == 0:
            return base
        return min(base * math.exp(link.jitter * self._draws.normal()), base * link.max_factor)

    def arrival(self, link: Link, slow: float, kind: int, index: int) -> float:
        """When a message sent now over ``link`` reaches node ``index``, virtual seconds:
        on an ordered link never before what was sent earlier of that ``kind`` to it."""
        t = self._now + self.delay(link, slow)
        if link.ordered:
            t = max(t, self._last_arrival.get((kind, index), 0.0))
            self._last_arrival[(kind, index)] = t
        return t

    def send(self, link: Link, slow: float, kind: int, index: int, payload: Any) -> None:
        """Deliver through the broker: delay, maybe lose (``on_lost``), maybe twice."""
        if link.drop and self._draws.uniform() < link.drop:
            self.faults["dropped"] += 1
            self._on_lost(index)
        else:
            self.push(self.arrival(link, slow, kind, index), kind, index, payload)
        if link.duplicate and self._draws.uniform() < link.duplicate:
            self.faults["duplicated"] += 1
            self.push(self.arrival(link, slow, kind, index), kind, index, payload)
