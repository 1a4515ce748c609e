"""Restart delays: capped exponential backoff with jitter (no I/O, no clock)."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays between restart attempts of a command or a serial port.

    The k-th consecutive failure (k = 0, 1, ...) waits ``min(max_s, initial_s * factor**k)``
    times a jitter factor drawn uniformly from ``[0.5, 1)``: never more than ``max_s``,
    never less than half the nominal delay (so a crash loop cannot spin), and sources that
    failed together (a shared bus, a power glitch) do not restart in lock step. `reset`
    after a successful run starts again at ``initial_s``. O(1) state.

    Parameters
    ----------
    initial_s, max_s : float
        First and largest nominal delay, seconds; ``0 < initial_s <= max_s``.
    rng : random.Random
        The jitter generator, per instance (never the global one), so tests can seed it.
    factor : float, default 2.0
        Growth per consecutive failure, >= 1.

    Attributes
    ----------
    failures : int
        Consecutive failures since the last `reset`.

    Raises
    ------
    ValueError
        If the bounds or the factor are out of range.

    Examples
    --------
    >>> b = Backoff(1.0, 8.0, random.Random(0))
    >>> [round(b.next_delay(), 2) for _ in range(5)]
    [0.92, 1.76, 2.84, 5.04, 6.05]
    """

    def __init__(
        self, initial_s: float, max_s: float, rng: random.Random, factor: float = 2.0
    ) -> None:
        if not 0 < initial_s <= max_s < float("inf"):
            raise ValueError(
                f"backoff needs 0 < initial_s <= max_s < inf, got {initial_s!r} and {max_s!r}"
            )
        if not 1 <= factor < float("inf"):
            raise ValueError(f"backoff factor must be >= 1, got {factor!r}")
        self.initial_s = float(initial_s)
        self.max_s = float(max_s)
        self.factor = float(factor)
        self.rng = rng
        self.failures = 0

    def nominal(self) -> float:
        """The delay before jitter for the next failure, seconds."""
        try:
            nominal = self.initial_s * self.factor ** min(self.failures, 64)
        except OverflowError:
            return self.max_s
        return min(self.max_s, nominal)

    def next_delay(self) -> float:
        """Count a failure and return the delay before the next attempt, seconds."""
        delay = self.nominal() * self.rng.uniform(0.5, 1.0)
        self.failures += 1
        return delay

    def reset(self) -> None:
        """A successful run: the next failure waits about ``initial_s`` again."""
        self.failures = 0
