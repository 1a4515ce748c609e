"""Anomaly-score documents waiting to be published: a bounded queue a leaf core owns.

A scoring leaf (``score`` not ``"off"``) scores every block it applies; each document (JSON
bytes, `edge_runtime.agents.leaf.core.scoring.encode_document`) waits here until the core's
step hands it to its caller as a `Publish` of kind ``"scores"`` and the caller reports it
published. No I/O, no clock.
"""

from __future__ import annotations

__all__ = ["MAX_QUEUED_SCORES", "ScoreOutbox"]

MAX_QUEUED_SCORES = 10_000
"""Scores documents waiting to be published at most; beyond, the oldest are dropped
(counted in `ScoreOutbox.dropped`, the status document's ``extra["scores_dropped"]``)."""


class ScoreOutbox:
    """Score documents in the order they were made, at most ``limit`` of them.

    Memory: at most ``limit`` documents (a few hundred bytes each).

    Parameters
    ----------
    limit : int, default `MAX_QUEUED_SCORES`
        Documents kept at most; the oldest are dropped beyond it.

    Attributes
    ----------
    items : list of bytes
        The documents waiting, oldest first (JSON, UTF-8).
    dropped : int
        Documents dropped because the queue was full.
    """

    def __init__(self, limit: int = MAX_QUEUED_SCORES) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1 document, got {limit}")
        self.limit = limit
        self.items: list[bytes] = []
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, payloads: list[bytes]) -> None:
        """Queue ``payloads`` (oldest first); drop the oldest beyond ``limit``."""
        self.items.extend(payloads)
        excess = len(self.items) - self.limit
        if excess > 0:
            del self.items[:excess]
            self.dropped += excess

    def sent(self, payload: bytes) -> None:
        """``payload`` (one of `items`) was published: it leaves the queue (a no-op when it
        was dropped meanwhile)."""
        if self.items and self.items[0] is payload:
            self.items.pop(0)
            return
        for i, item in enumerate(self.items):
            if item is payload:
                del self.items[i]
                return

    def clear(self) -> None:
        """Forget the waiting documents (not counted as dropped)."""
        self.items.clear()
