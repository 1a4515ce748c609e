"""Restart delays of a command or serial source: the runtime's `Backoff`, equal jitter.

A source that fails (a command exiting, a port unplugged) is restarted after
`restart_backoff`'s next delay: ``restart_initial_s`` doubling to ``restart_max_s``
(`SourceSettings`), times a factor uniform in ``[0.5, 1)`` drawn from the source's own
generator. `Backoff` itself lives in `edge_runtime.backoff` (shared with the reconnects of
the agents and the replay) and is re-exported by `edge_runtime.sources`.
"""

from __future__ import annotations

import random

from edge_runtime.backoff import Backoff
from edge_runtime.sources.spec import SourceSettings

__all__ = ["restart_backoff"]


def restart_backoff(settings: SourceSettings, rng: random.Random) -> Backoff:
    """The restart `Backoff` of a source: ``settings.restart_initial_s`` doubling to
    ``settings.restart_max_s`` seconds, equal jitter (never below half the nominal delay,
    so a crash loop cannot spin), drawn from ``rng`` (the source's own generator).

    Examples
    --------
    >>> backoff = restart_backoff(SourceSettings(), random.Random(0))
    >>> [round(backoff.next_delay(), 2) for _ in range(5)]
    [0.92, 1.76, 2.84, 5.04, 12.09]
    """
    return Backoff(settings.restart_initial_s, settings.restart_max_s, rng, jitter="equal")
