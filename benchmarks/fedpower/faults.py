"""The fault models of section (h): none, one straggler, one dead leaf.

A fault hits one leaf, ``leaf`` (the last one: on Motes the latest time span). Both
methods see the same data under a fault; what differs is how each protocol copes.

``NONE``
    Every leaf has all its rows; every FedPower reply arrives before its round closes.
``STRAGGLER``
    The leaf produces readings at 1/10 of the others' rate: by the end of the run it has
    seen the first ``ceil(n_l / 10)`` of its ``n_l`` rows (`Fault.rows`), the others all
    theirs. FedPower: the leaf is also 10 times slower to answer, so its reply makes it
    into a round only every 10th round (rounds 10, 20, ...); in the other rounds it sends
    nothing and a round that waits for it closes at the round timeout without it (full
    participation: 7 of 8 replies; K of M with it sampled: K - 1). Its Gram (on its
    fewer rows) is held from the start (the simulation does not grow it round by round).
    FPCA: the leaf streams its fewer rows and its snapshot is merged when it comes, with
    its smaller sample count; nothing waits for it.
``DEAD``
    The leaf dies right after the start: it never replies and never publishes, and is not
    subscribed (receives no round message). FedPower closes every round that asked it at
    the timeout (K of M: only when it was sampled); FPCA's aggregator merges its other
    children.

The error ratio under a fault is judged on the rows the fleet observed (`Fault.rows`
of every leaf; a dead leaf observed nothing that reached anyone), against their
offline rank-r SVD: the best any method can do with what reached it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DEAD", "FAULTS", "NONE", "STRAGGLER", "STRAGGLER_SLOWDOWN", "Fault"]

NONE = "none"
STRAGGLER = "straggler"
DEAD = "dead"
FAULTS = (NONE, STRAGGLER, DEAD)
#: The straggler's rate is 1/this of the others'; it answers every this-th round.
STRAGGLER_SLOWDOWN = 10


@dataclass(frozen=True)
class Fault:
    """One fault model (module docstring) applied to leaf ``leaf``."""

    kind: str = NONE
    leaf: int = -1

    def __post_init__(self) -> None:
        if self.kind not in FAULTS:
            raise ValueError(f"fault kind must be one of {FAULTS}, got {self.kind!r}")

    def _hit(self, i: int, n_leaves: int) -> bool:
        return self.kind != NONE and i == self.leaf % n_leaves

    def rows(self, i: int, part: np.ndarray, n_leaves: int) -> np.ndarray:
        """The rows of leaf ``i`` (``part``, ``(n_l, d)``) that reach the method."""
        if not self._hit(i, n_leaves):
            return part
        if self.kind == DEAD:
            return part[:0]
        return part[: math.ceil(part.shape[0] / STRAGGLER_SLOWDOWN)]

    def connected(self, i: int, n_leaves: int) -> bool:
        """False for a dead leaf: it receives and sends nothing."""
        return not (self._hit(i, n_leaves) and self.kind == DEAD)

    def replies(self, i: int, round_: int, n_leaves: int) -> bool:
        """Whether leaf ``i``'s FedPower reply to round ``round_`` (1-based) is on time."""
        if not self._hit(i, n_leaves):
            return True
        return self.kind == STRAGGLER and round_ % STRAGGLER_SLOWDOWN == 0
