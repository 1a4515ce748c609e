"""A leaf's intake: readings sequenced, screened against the declared range, applied.

`LeafIntake` is the part `LeafCore` holds (attribute ``intake``) that every reading goes
through: the per-source sequencer (`SourceSequencer`: duplicates dropped, gaps held until they
fill or time out), the declared sensor range (``valid_range``: readings outside rejected or
clipped, `LeafIntake.screen`), the reject counts by source, the range events, and the usual
gap between readings the idle decision stretches to. The core applies what it releases to
the estimator and counts what it drops (`LeafCore.screen`). No I/O, no clock (time is an
argument).
"""

from __future__ import annotations

from collections import Counter, deque

import numpy as np

from edge_runtime.agents.leaf.core.sequencing import SourceSequencer
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import SensorReadings

__all__ = [
    "GAP_WEIGHT",
    "MAX_RANGE_EVENTS",
    "Applied",
    "Drop",
    "Labelled",
    "LeafIntake",
    "RangeEvent",
]

GAP_WEIGHT = 0.2
"""Weight of the newest gap in the average gap between a leaf's readings."""

Labelled = tuple[np.ndarray, str | None, int | None]
"""A block of rows, its source and the sequence number of its first row (or None)."""

Applied = tuple[np.ndarray, str | None, int | None, ValueError | None]
"""A block offered to the estimator (`LeafIntake.ingest`): its rows, source, first sequence
number, and the estimator's refusal (or None when applied)."""

RangeEvent = tuple[str, str, str]
"""``(reason, source, detail)``: a block had readings outside ``valid_range`` (reason
``"out_of_range"``, rejected, or ``"clipped"``) or of another width than its per-feature
bounds (``"valid_range_width"``, rejected); one per block, after counting."""

Drop = tuple[str, str, int]
"""``(reason, source, n)``: ``n`` readings of a block dropped by `LeafIntake.screen`."""

MAX_RANGE_EVENTS = 1024
"""Range events kept until the shell takes them (the oldest are dropped beyond; counted
all the same)."""


class LeafIntake:
    """The intake part of a leaf core: sequencing, range screening and their counts.

    Parameters
    ----------
    gap_timeout_s : float
        Seconds a sequence gap may stay open (`SourceSequencer`).

    Attributes
    ----------
    sequencer : SourceSequencer
        Per-source sequence numbers: what was ingested, what is held behind a gap.
    rejected_by_source : Counter
        Rejected readings (or messages) by the source they came from.
    clipped : int
        Readings clipped into ``valid_range`` (``out_of_range = "clip"``).
    range_events : deque of RangeEvent
        Every block with readings outside ``valid_range``, for the shell to log
        (rate-limited; `take_range_events`), at most `MAX_RANGE_EVENTS`.
    gap_s : float
        The usual gap between readings, seconds (exponential average, weight `GAP_WEIGHT`;
        0 before the second reading).
    """

    def __init__(self, *, gap_timeout_s: float) -> None:
        self.sequencer = SourceSequencer(gap_timeout_s=gap_timeout_s)
        self.rejected_by_source: Counter[str] = Counter()
        self.clipped = 0
        self.range_events: deque[RangeEvent] = deque(maxlen=MAX_RANGE_EVENTS)
        self.gap_s = 0.0
        self._bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def ingested(self) -> dict[str, int]:
        """Last sequence number applied per source."""
        return dict(self.sequencer.last)

    def take_range_events(self) -> list[RangeEvent]:
        """The range events since the last call, oldest first (the shell logs them)."""
        events = list(self.range_events)
        self.range_events.clear()
        return events

    def count_reject(self, source: str, n: int = 1) -> None:
        """Count ``n`` rejected readings (or one message) under the ``source`` they came
        from."""
        self.rejected_by_source[source] += n

    def note_gap(self, gap: float, max_interval_s: float) -> None:
        """Input arrived ``gap`` seconds after the last: the usual gap moves towards it,
        unless it is no usual gap (not > 0, or a pause of ``max_interval_s`` or more)."""
        if 0 < gap < max_interval_s:
            weight = GAP_WEIGHT if self.gap_s else 1.0  # the first gap starts the average
            self.gap_s += weight * (gap - self.gap_s)

    def forget_bounds(self) -> None:
        """The configuration changed: the sensor range is read again for the next block."""
        self._bounds.clear()

    def accept_labelled(self, readings: SensorReadings, now: float) -> list[Labelled]:
        """Sequence ``readings`` at ``now`` (seconds): the blocks ready to screen, each with
        its source and the sequence number of its first row (in sequence order, ending at
        the source's last applied sequence, `SourceSequencer`); ``(block, None, None)`` for
        readings without one."""
        source = readings.source
        if source is None or readings.seq is None:
            return [(readings.values, None, None)]
        blocks = self.sequencer.offer(source, readings.seq, readings.values, now)
        if not blocks:
            return []
        return _label(blocks, source, self.sequencer.last[source])

    def expire_labelled(self, now: float) -> tuple[list[Labelled], str | None]:
        """Row blocks released at ``now`` because a gap timed out (counted in
        ``gap_rows``), labelled as `accept_labelled` when of one source (the usual case,
        returned with them), else ``(block, None, None)`` and source None."""
        before = dict(self.sequencer.last)
        blocks = self.sequencer.expire(now)
        if not blocks:
            return [], None
        changed = [s for s, last in self.sequencer.last.items() if before.get(s) != last]
        if len(changed) != 1:
            return [(block, None, None) for block in blocks], None
        return _label(blocks, changed[0], self.sequencer.last[changed[0]]), changed[0]

    def screen(
        self, labelled: list[Labelled], source: str, config: NodeConfig
    ) -> tuple[list[Labelled], list[Drop]]:
        """Check released blocks against ``config.valid_range`` (unchanged without one).

        A reading with a value outside the range is dropped (``out_of_range = "reject"``,
        reason ``"out_of_range"``; the kept rows of a block are returned as runs of
        consecutive readings, each labelled with its first sequence number) or has its
        values clipped into the range (``"clip"``, counted in ``clipped``). A block of
        another width than per-feature bounds is dropped whole (``"valid_range_width"``).
        Dropped readings are counted under ``source`` (``rejected_by_source``) and
        returned as `Drop`s for the caller's counts. O(rows x features).
        """
        if config.valid_range is None:
            return labelled, []
        out: list[Labelled] = []
        drops: list[Drop] = []
        for block, src, seq in labelled:
            out += self._screen_block(block, src, seq, source, config, drops)
        return out, drops

    def _range(self, n_features: int, config: NodeConfig) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` for readings of ``n_features`` values (ValueError: another width)."""
        bounds = self._bounds.get(n_features)
        if bounds is None:
            found = config.range_bounds(n_features)
            assert found is not None  # screen runs only with a valid_range
            bounds = self._bounds[n_features] = found
        return bounds

    def _screen_block(
        self,
        block: np.ndarray,
        src: str | None,
        seq: int | None,
        source: str,
        config: NodeConfig,
        drops: list[Drop],
    ) -> list[Labelled]:
        n, d = block.shape
        try:
            lo, hi = self._range(d, config)
        except ValueError as exc:
            self._dropped("valid_range_width", source, n, f"{exc}: {n} readings rejected", drops)
            return []
        outside = (block < lo) | (block > hi)
        bad = outside.any(axis=1)
        n_bad = int(np.count_nonzero(bad))
        if n_bad == 0:
            return [(block, src, seq)]
        i = int(np.argmax(bad))
        j = int(np.argmax(outside[i]))
        where = f"reading {i}" if seq is None else f"reading seq {seq + i}"
        detail = (
            f"{where} column {j} is {float(block[i, j])!r}, outside valid_range "
            f"[{lo[j]}, {hi[j]}] ({n_bad} of {n} readings in this batch)"
        )
        if config.out_of_range == "clip":
            self.clipped += n_bad
            self.range_events.append(("clipped", source, detail))
            return [(np.clip(block, lo, hi), src, seq)]
        self._dropped("out_of_range", source, n_bad, detail, drops)
        kept = np.flatnonzero(~bad)
        runs = np.split(kept, np.flatnonzero(np.diff(kept) != 1) + 1) if kept.size else []
        return [
            (block[run[0] : run[-1] + 1], src, None if seq is None else seq + int(run[0]))
            for run in runs
        ]

    def _dropped(
        self, reason: str, source: str, n: int, detail: str, drops: list[Drop]
    ) -> None:
        """``n`` readings arrived and were dropped: counted by source, an event, a `Drop`."""
        self.count_reject(source, n)
        drops.append((reason, source, n))
        self.range_events.append((reason, source, detail))


def _label(blocks: list[np.ndarray], source: str, last: int) -> list[Labelled]:
    """Consecutive ``blocks`` of ``source`` ending at sequence ``last``, with the sequence
    number of each block's first row."""
    seq = last - sum(len(block) for block in blocks) + 1
    out: list[Labelled] = []
    for block in blocks:
        out.append((block, source, seq))
        seq += len(block)
    return out
