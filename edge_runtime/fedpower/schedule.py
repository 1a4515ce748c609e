"""The communication schedule of FedPower: which local iterations end with a synchronisation.

LocalPower/FedPower write ``I_T^p`` for the iterations after which the devices
synchronise (the server aggregates); here it is every ``p``-th of ``t = 1..T`` and the last,
``I_T^p = {p, 2p, ..., floor(T/p) p} U {T}``; ``p = 1`` is the centralised power method
with one communication per iteration. Round ``k`` (1-based) is the run of local iterations
between two synchronisations; its length is `Schedule.local_steps`.

Decaying ``p``. LocalPower (Li, Wang, Chen, Zhang, ICML 2021) shows that periodically
decaying ``p`` yields high-precision solutions: a constant ``p > 1`` on heterogeneous
devices stalls at an error floor, while ``p -> 1`` ends in the exact power method. The
authors' code (``pm.py``, ``is_decay``) decays ``p`` after every aggregation, either
``p <- max(1, floor(p / 2))`` (``exp=True``, here ``"exponential"``) or ``p <- max(1, p -
1)`` (``"linear"``); we implement exactly these two, so round ``k`` has
``p_k = max(1, floor(p / 2**(k-1)))`` or ``max(1, p - (k - 1))`` iterations.

Cost: O(1) memory; `local_steps` is O(log p) time, `sync_points` O(number of rounds).
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_runtime.fedpower._checks import check_steps

__all__ = ["DECAYS", "Schedule"]

#: The decaying-interval options, after the authors' ``pm.py``.
DECAYS = ("exponential", "linear")


@dataclass(frozen=True)
class Schedule:
    """``I_T^p``: synchronise every ``p`` local iterations (optionally decaying), ``T`` in all.

    Parameters
    ----------
    period : int
        ``p`` >= 1, local iterations of the first round.
    total : int or None, default=None
        ``T`` >= 1, local iterations in all; the last round is cut so the rounds sum to
        ``T``. None: unbounded (the streaming runtime runs rounds until stopped).
    decay : {"exponential", "linear"} or None, default=None
        How ``p`` shrinks after every round (module docstring); None keeps it constant.

    Raises
    ------
    ValueError
        One line naming a bad ``period``, ``total`` or ``decay``.

    Examples
    --------
    >>> Schedule(3, total=10).sync_points()
    (3, 6, 9, 10)
    >>> [Schedule(8, decay="exponential").local_steps(k) for k in range(1, 6)]
    [8, 4, 2, 1, 1]
    """

    period: int
    total: int | None = None
    decay: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "period", check_steps(self.period, "period"))
        if self.total is not None:
            object.__setattr__(self, "total", check_steps(self.total, "total"))
        if self.decay is not None and self.decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS} or None, got {self.decay!r}")

    def _interval(self, k: int) -> int:
        """``p_k`` before the cut at ``T`` (round ``k`` >= 1)."""
        if self.decay == "exponential":
            return max(1, self.period >> min(k - 1, self.period.bit_length()))
        if self.decay == "linear":
            return max(1, self.period - (k - 1))
        return self.period

    def _steps_before(self, k: int) -> int:
        """Sum of ``p_j`` for ``j < k`` (uncut), in O(log p) time."""
        done = k - 1
        if self.decay is None:
            return self.period * done
        if self.decay == "linear":
            big = min(done, self.period - 1)  # rounds with p_j = p - (j - 1) > 1
            return big * self.period - big * (big - 1) // 2 + (done - big)
        total, j = 0, 1
        while j <= done and self._interval(j) > 1:
            total += self._interval(j)
            j += 1
        return total + (done - j + 1)

    @property
    def n_rounds(self) -> int | None:
        """Number of rounds (synchronisations) for ``T``; None if unbounded."""
        if self.total is None:
            return None
        low, high = 1, self.total  # smallest k with steps_before(k + 1) >= T
        while low < high:
            mid = (low + high) // 2
            if self._steps_before(mid + 1) >= self.total:
                high = mid
            else:
                low = mid + 1
        return low

    def local_steps(self, round: int) -> int:
        """Local iterations of round ``round`` (1-based); ValueError past the last round."""
        k = check_steps(round, "round")
        if self.total is None:
            return self._interval(k)
        left = self.total - self._steps_before(k)
        if left <= 0:
            raise ValueError(f"round {k} is past the last round {self.n_rounds} of T={self.total}")
        return min(self._interval(k), left)

    def sync_points(self) -> tuple[int, ...]:
        """``I_T^p``: the iteration counts after which the server aggregates, ending in ``T``.

        Raises
        ------
        ValueError
            If the schedule is unbounded (``total`` is None).
        """
        if self.total is None:
            raise ValueError("sync_points needs a bounded schedule; total is None")
        points, t, k = [], 0, 1
        while t < self.total:
            t += self.local_steps(k)
            points.append(t)
            k += 1
        return tuple(points)
