"""Rate limit for repeated log lines: the first few per interval, then one count (no I/O).

A misconfigured sensor can produce thousands of bad lines per second; logging each would
flood a Raspberry Pi's journal. `LogRateLimiter` lets the first ``burst`` events
of each interval through and counts the rest; the count is reported with the first event
of the next interval, or by `flush` (when the source stops).
"""

from __future__ import annotations

__all__ = ["LogRateLimiter"]


class LogRateLimiter:
    """Fixed-window limit on log lines; time comes in as an argument (seconds).

    Parameters
    ----------
    burst : int
        Events let through per window, >= 1.
    interval_s : float
        Window length, seconds, > 0. A window starts at the first event after the
        previous one ended.

    Raises
    ------
    ValueError
        If ``burst < 1`` or ``interval_s <= 0``.

    Examples
    --------
    >>> limiter = LogRateLimiter(burst=2, interval_s=10.0)
    >>> [limiter.allow(t) for t in (0.0, 1.0, 2.0, 3.0)]
    [(True, 0), (True, 0), (False, 0), (False, 0)]
    >>> limiter.allow(12.0)  # a new window: log it, and say 2 were suppressed
    (True, 2)
    """

    def __init__(self, burst: int, interval_s: float) -> None:
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"burst must be an int >= 1, got {burst!r}")
        if not 0 < interval_s < float("inf"):
            raise ValueError(f"interval_s must be a finite number > 0, got {interval_s!r}")
        self.burst = burst
        self.interval_s = float(interval_s)
        self._window_start: float | None = None
        self._in_window = 0
        self._suppressed = 0

    @property
    def suppressed(self) -> int:
        """Events suppressed and not reported yet."""
        return self._suppressed

    def window_ended(self, now: float) -> bool:
        """Whether an event at ``now`` would start a new window."""
        return self._window_start is None or now - self._window_start >= self.interval_s

    def allow(self, now: float) -> tuple[bool, int]:
        """Whether to log the event at ``now``, and how many suppressed events to report
        with it (non-zero only on an event that is logged)."""
        if self._window_start is None or now - self._window_start >= self.interval_s:
            self._window_start, self._in_window = now, 0
        if self._in_window < self.burst:
            self._in_window += 1
            reported, self._suppressed = self._suppressed, 0
            return True, reported
        self._suppressed += 1
        return False, 0

    def flush(self) -> int:
        """The suppressed events not reported yet (and forget them)."""
        reported, self._suppressed = self._suppressed, 0
        return reported
