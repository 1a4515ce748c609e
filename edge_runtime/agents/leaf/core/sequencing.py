"""In-order, exactly-once ingestion of sequenced sensor readings (per source).

A reading in the map form carries its source id and the sequence number of its first
row. The broker may lose a suffix of a source's readings (a crash before delivery) and
a publisher then re-sends them; a restarted leaf may first receive readings its old
incarnation never applied. `SourceSequencer` turns that into the exact stream:

- rows whose sequence number was already applied are dropped (counted as duplicates);
- rows that arrive after a gap are *held* (bounded) until the gap is filled, then
  released in order, so a re-send restores the original order of rows, and with it the
  exact same blocks and subspace as a run without faults;
- a gap not filled within ``gap_timeout_s`` seconds, or when the held rows reach
  ``max_held_rows``, is given up: the held rows are released and the missing rows are
  counted as lost (``gap_rows``).

A source's sequence numbers start at 0: rows of a source never seen before that start
later wait behind a gap like any other (the leaf reports it, so a publisher re-sends the
first rows if they were lost; a source that really starts later is released after
``gap_timeout_s``). Starting a source at the first sequence *seen* would silently drop a
lost or overtaken first batch as a duplicate. Sources restored from a checkpoint or a
snapshot continue where they were. Readings
without a source (bare arrays from third-party sensors) bypass all of this: they are
applied as they come, best effort.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["SourceSequencer"]


class SourceSequencer:
    """Per-source de-duplication and re-ordering of sequenced rows.

    Parameters
    ----------
    max_held_rows : int, default 10_000
        Bound on rows held back behind gaps, over all sources. Memory is at most this
        many rows of ``n_features`` float64 values.
    gap_timeout_s : float, default 10.0
        Seconds a gap may stay open before its held rows are released and the gap is
        counted as lost.

    Attributes
    ----------
    last : dict of str to int
        Last sequence number applied per source.
    duplicates, gap_rows : int
        Rows dropped as already applied; rows given up as lost.
    """

    def __init__(
        self,
        max_held_rows: int = 10_000,
        gap_timeout_s: float = 10.0,
    ) -> None:
        self.max_held_rows = max_held_rows
        self.gap_timeout_s = gap_timeout_s
        self.last: dict[str, int] = {}
        self.duplicates = 0
        self.gap_rows = 0
        self._held: dict[str, dict[int, np.ndarray]] = {}
        self._gap_since: dict[str, float] = {}

    @property
    def held_rows(self) -> int:
        """Rows currently held back behind gaps."""
        return sum(len(v) for held in self._held.values() for v in held.values())

    def held_sources(self) -> list[str]:
        """Sources with rows held behind a gap."""
        return [source for source, held in self._held.items() if held]

    def restore(self, last: Mapping[str, int]) -> None:
        """Continue from a checkpoint: ``last`` maps source -> last applied sequence."""
        self.last = {str(k): int(v) for k, v in last.items()}
        self._held.clear()
        self._gap_since.clear()

    def advance(self, upto: Mapping[str, int]) -> None:
        """Continue each source of ``upto`` after the sequence number it names there, if
        later (those readings were released another way: re-sends are duplicates); a
        source with rows held behind a gap is left to its gap."""
        held = set(self.held_sources())
        for source, seq in upto.items():
            if source not in held and self.last.get(source, -1) < seq:
                self.last[source] = int(seq)

    def offer(self, source: str, seq: int, values: np.ndarray, now: float) -> list[np.ndarray]:
        """Offer rows ``values`` ``(n, n_features)`` starting at ``seq``, at ``now``
        (seconds, any monotonic origin: when a gap opens).

        Returns the row blocks now ready to apply, in order (possibly none, possibly
        more than the offered rows when they fill a gap).
        """
        if source not in self.last:
            self.last[source] = -1  # sequence numbers start at 0
        last = self.last[source]
        end = seq + len(values) - 1
        if end <= last:
            self.duplicates += len(values)
            return []
        if seq <= last:
            self.duplicates += last - seq + 1
            values = values[last - seq + 1 :]
            seq = last + 1
        if seq > last + 1:
            held = self._held.setdefault(source, {})
            if seq in held and len(held[seq]) >= len(values):
                self.duplicates += len(values)
                return []
            held[seq] = values
            self._gap_since.setdefault(source, now)
            if self.held_rows > self.max_held_rows:
                return self._give_up(source, now)
            return []
        ready = [values]
        self.last[source] = end
        ready += self._drain(source)
        return ready

    def expire(self, now: float) -> list[np.ndarray]:
        """Release the rows of every gap open for ``gap_timeout_s`` at ``now`` (seconds)."""
        ready: list[np.ndarray] = []
        for source, since in list(self._gap_since.items()):
            if now - since >= self.gap_timeout_s:
                ready += self._give_up(source, now)
        return ready

    def _drain(self, source: str) -> list[np.ndarray]:
        held = self._held.get(source)
        ready: list[np.ndarray] = []
        while held:
            last = self.last[source]
            start = min(held)
            if start > last + 1:
                break
            values = held.pop(start)
            end = start + len(values) - 1
            if end <= last:
                self.duplicates += len(values)
                continue
            if start <= last:
                self.duplicates += last - start + 1
                values = values[last - start + 1 :]
            ready.append(values)
            self.last[source] = end
        if not held:
            self._held.pop(source, None)
            self._gap_since.pop(source, None)
        return ready

    def _give_up(self, source: str, now: float) -> list[np.ndarray]:
        """Skip the first gap of ``source``: count it lost, release what follows in order."""
        held = self._held.get(source)
        if not held:
            self._gap_since.pop(source, None)
            return []
        start = min(held)
        self.gap_rows += start - self.last[source] - 1
        self.last[source] = start - 1
        self._gap_since.pop(source, None)
        ready = self._drain(source)
        if self._held.get(source):
            self._gap_since[source] = now
        return ready
