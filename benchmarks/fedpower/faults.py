"""The fault models of section (h), each hitting one leaf (default the last): `NONE`;
`STRAGGLER`, reading at 1/`STRAGGLER_SLOWDOWN` the rate, so it has its first tenth of rows and
its FedPower reply makes every 10th round; `DEAD`, silent and unsubscribed from the start.
``templates/fedpower.md`` says how each method copes; errors are judged on `Fault.rows`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DEAD", "FAULTS", "NONE", "STRAGGLER", "STRAGGLER_SLOWDOWN", "Fault"]

NONE, STRAGGLER, DEAD = "none", "straggler", "dead"
FAULTS = (NONE, STRAGGLER, DEAD)
#: The straggler's rate is 1/this of the others'; it answers every this-th round.
STRAGGLER_SLOWDOWN = 10


@dataclass(frozen=True)
class Fault:
    """One fault model ``kind`` (`FAULTS`; ValueError otherwise) applied to leaf ``leaf``."""

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
        return part[: 0 if self.kind == DEAD else math.ceil(part.shape[0] / STRAGGLER_SLOWDOWN)]

    def connected(self, i: int, n_leaves: int) -> bool:
        """False for a dead leaf: it receives and sends nothing."""
        return not (self._hit(i, n_leaves) and self.kind == DEAD)

    def replies(self, i: int, round_: int, n_leaves: int) -> bool:
        """Whether leaf ``i``'s FedPower reply to round ``round_`` (1-based) is on time."""
        hit = self._hit(i, n_leaves)
        return not hit or (self.kind == STRAGGLER and round_ % STRAGGLER_SLOWDOWN == 0)
