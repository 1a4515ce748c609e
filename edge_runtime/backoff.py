"""Delays between retries: capped exponential backoff with jitter (no I/O, no clock).

One `Backoff` serves every retry loop of the runtime: the agents' and the dashboard's
reconnects (`edge_runtime.agents.common.shell.agent`, `edge_runtime.dashboard.follower`),
the replay's reconnects (`edge_runtime.replay`) and the restarts of a command or serial source
(`edge_runtime.sources`). Each instance owns its `random.Random` (never the module-level
generator), so a test seeds one loop without touching the others, and loops that failed
together (a broker restart, a power glitch) do not retry in lock step.

Two jitters (the names of M. Brooker, "Exponential Backoff And Jitter", AWS Architecture
Blog, 2015), over the nominal delay ``min(max_s, initial_s * factor**k)`` of the k-th
consecutive failure (k = 0, 1, ...):

``"full"``   uniform in ``[initial_s, nominal]``: full jitter above a floor of
             ``initial_s`` (reconnects: spreads many clients of one broker the most);
``"equal"``  ``nominal`` times a factor uniform in ``[0.5, 1)``: never less than half the
             nominal delay, so a crash loop cannot spin (source restarts).

Stdlib only. The libraries ``tenacity`` and ``stamina`` were weighed and not taken: both
draw their jitter from the module-level ``random`` (not seedable per loop), and the loops
here are not "retry a call until it succeeds" but "serve a connection for hours, then
wait, interruptibly, before the next one", with their own logging and deadlines.
"""

from __future__ import annotations

import math
import random
from typing import Literal

__all__ = ["Backoff", "Jitter", "OutageLog"]

Jitter = Literal["full", "equal"]
"""How `Backoff` spreads a delay below its nominal value (see the module docstring)."""

_MAX_EXPONENT = 64  # factor**k is capped here: no overflow however long an outage lasts


class Backoff:
    """Delays between consecutive failed attempts, seconds.

    The k-th consecutive failure (k = 0, 1, ...) has the nominal delay
    ``min(max_s, initial_s * factor**k)``; the delay returned is jittered below it (see
    ``jitter``): never more than ``max_s``. `reset` after a good attempt (a connection, a
    run that delivered) starts again at ``initial_s``. O(1) state.

    Parameters
    ----------
    initial_s, max_s : float
        First and largest nominal delay, seconds; ``0 < initial_s <= max_s < inf``.
    rng : random.Random, optional
        The jitter generator of this instance (never the global one), so tests can seed
        it; default a fresh ``random.Random()`` seeded from the operating system.
    factor : float, default 2.0
        Growth per consecutive failure, >= 1.
    jitter : {"equal", "full"}, default "equal"
        ``"equal"``: the nominal delay times a factor uniform in ``[0.5, 1)``. ``"full"``:
        uniform in ``[initial_s, nominal]``.

    Attributes
    ----------
    failures : int
        Consecutive failures since the last `reset` (counted by `next_delay`).

    Raises
    ------
    ValueError
        If the bounds, the factor or the jitter are out of range.

    Examples
    --------
    >>> b = Backoff(1.0, 8.0, random.Random(0))
    >>> [round(b.next_delay(), 2) for _ in range(5)]
    [0.92, 1.76, 2.84, 5.04, 6.05]
    >>> full = Backoff(0.2, 5.0, random.Random(0), jitter="full")
    >>> [round(full.delay_s(k), 2) for k in range(5)]
    [0.2, 0.35, 0.45, 0.56, 1.73]
    """

    def __init__(
        self,
        initial_s: float,
        max_s: float,
        rng: random.Random | None = None,
        factor: float = 2.0,
        *,
        jitter: Jitter = "equal",
    ) -> None:
        if not 0 < initial_s <= max_s < float("inf"):
            raise ValueError(
                f"backoff needs 0 < initial_s <= max_s < inf, got {initial_s!r} and {max_s!r}"
            )
        if not 1 <= factor < float("inf"):
            raise ValueError(f"backoff factor must be >= 1, got {factor!r}")
        if jitter not in ("full", "equal"):
            raise ValueError(f"backoff jitter must be 'full' or 'equal', got {jitter!r}")
        self.initial_s = float(initial_s)
        self.max_s = float(max_s)
        self.factor = float(factor)
        self.jitter: Jitter = jitter
        self.rng = random.Random() if rng is None else rng
        self.failures = 0

    def nominal(self, failures: int | None = None) -> float:
        """The delay before jitter after ``failures`` consecutive failures (default
        `failures`), seconds: ``min(max_s, initial_s * factor**failures)``."""
        k = self.failures if failures is None else failures
        try:
            nominal = self.initial_s * self.factor ** min(max(k, 0), _MAX_EXPONENT)
        except OverflowError:
            return self.max_s
        return min(self.max_s, nominal)

    def delay_s(self, failures: int) -> float:
        """A jittered delay after ``failures`` consecutive failures, seconds; draws from
        `rng` but does not count a failure (for loops that keep their own count)."""
        nominal = self.nominal(failures)
        if self.jitter == "full":
            return self.rng.uniform(self.initial_s, nominal)
        return nominal * self.rng.uniform(0.5, 1.0)

    def next_delay(self) -> float:
        """Count a failure and return the delay before the next attempt, seconds."""
        delay = self.delay_s(self.failures)
        self.failures += 1
        return delay

    def reset(self) -> None:
        """A good attempt: the next failure waits about ``initial_s`` again."""
        self.failures = 0


class OutageLog:
    """Which failed attempts of one outage get a loud log line (no I/O, no clock).

    Journal-friendly: the failures number 1, 2, 4, 8, ... of an outage are loud, and so is
    a failure whose error differs from the last loud one, or one ``interval_s`` seconds or
    more after the last loud line; the caller logs the others at debug level.

    Parameters
    ----------
    interval_s : float
        During a long outage, a loud line at least this often, seconds.
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._error: str | None = None
        self._at = -math.inf

    def loud(self, attempts: int, error: str, now: float) -> bool:
        """Whether failure number ``attempts`` (1, 2, ...) with ``error`` at ``now``
        (``time.monotonic()`` seconds) is logged loudly; remembers it if so."""
        loud = (
            attempts & (attempts - 1) == 0
            or error != self._error
            or now - self._at >= self.interval_s
        )
        if loud:
            self._error, self._at = error, now
        return loud

    def new_outage(self) -> None:
        """A connection was made and lost again: the next error is news."""
        self._error = None
