"""Journal-friendly logging of rejections: per reason, the first few lines of an interval,
then one count. Time comes in as an argument; no I/O.

One mechanism for every agent: an aggregator (`Agent.reject`) logs one line per reason and
interval (``burst = 1``), a leaf (`edge_runtime.agents.leaf.shell.rejections`) the first
``REJECT_LOG_BURST`` and then a summary line with the count of the others.
"""

from __future__ import annotations

from edge_runtime.sources import LogRateLimiter

__all__ = ["MAX_REJECT_LOG_INTERVAL_S", "REJECT_LOG_INTERVAL_S", "RejectLog"]

REJECT_LOG_INTERVAL_S = 10.0
"""Seconds of one reject-log interval, every agent: ``Agent.reject_log_burst`` lines per
reason (a leaf: `REJECT_LOG_BURST`, then one ``messages_rejected_suppressed`` summary line
with the count of the others; an aggregator: one line, no summary)."""

MAX_REJECT_LOG_INTERVAL_S = 3600.0
"""Longest interval of a reason that keeps firing: its interval doubles after every interval
that had to suppress some, up to this, and is back to ``interval_s`` after one that did not
(a sensor rejecting every reading for a day: about 100 lines instead of 25,000,
``benchmarks/longevity/``)."""


class RejectLog:
    """Journal-friendly reject logging, time as an argument, no I/O.

    Per reason, the first ``burst`` rejections of an interval are logged individually; the
    rest are only counted and reported as one summary line per reason once the interval
    that suppressed them ended (`due`), so a sensor sending 50 bad readings per second
    costs ``burst + 1`` lines per reason per interval. An agent that never asks for the
    summaries (`due`, `flush`; an aggregator) logs ``burst`` lines per reason per interval.
    A reason that keeps firing backs off: its interval doubles after each interval that
    suppressed some, up to `MAX_REJECT_LOG_INTERVAL_S`.

    Parameters
    ----------
    burst : int
        Rejections of one reason logged individually per interval, >= 1.
    interval_s : float
        Interval length, seconds, > 0 (`LogRateLimiter`: a window starts at the first
        rejection after the previous one ended).
    """

    def __init__(self, burst: int, interval_s: float) -> None:
        self.burst = burst
        self.interval_s = interval_s
        self._limits: dict[str, LogRateLimiter] = {}
        self._due: dict[str, float] = {}
        self._busy: set[str] = set()  # reasons that suppressed some in the current window

    def allow(self, reason: str, now: float) -> tuple[bool, int]:
        """Whether to log this rejection individually, and how many earlier ones were
        suppressed and not reported yet (to report with it)."""
        limit = self._limits.get(reason)
        if limit is None:
            limit = self._limits[reason] = LogRateLimiter(self.burst, self.interval_s)
        ended = limit.window_ended(now)
        log_it, suppressed = limit.allow(now)
        if ended:  # the window that starts now backs off while the reason keeps firing
            busy = reason in self._busy
            self._busy.discard(reason)
            doubled = min(2.0 * limit.interval_s, MAX_REJECT_LOG_INTERVAL_S)
            limit.interval_s = doubled if busy else self.interval_s
        if log_it and suppressed:  # reported with this line: no summary due for them
            self._due.pop(reason, None)
        elif not log_it:
            self._busy.add(reason)
            self._due.setdefault(reason, now + limit.interval_s)
        return log_it, suppressed

    def due(self, now: float) -> dict[str, int]:
        """Reasons whose suppressed rejections are due for a summary line, with counts."""
        ready = [reason for reason, at in self._due.items() if now >= at]
        out = {}
        for reason in ready:
            del self._due[reason]
            count = self._limits[reason].flush()
            if count:
                out[reason] = count
        return out

    def flush(self) -> dict[str, int]:
        """Every suppressed count not reported yet (on shutdown)."""
        self._due.clear()
        out = {reason: limit.flush() for reason, limit in self._limits.items()}
        return {reason: count for reason, count in out.items() if count}
