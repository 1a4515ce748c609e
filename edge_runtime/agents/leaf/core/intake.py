"""A leaf's intake: readings sequenced, screened against the declared range, applied.

`LeafIntake` is the part of `LeafCore` every reading goes through: the per-source sequencer
(`SourceSequencer`: duplicates dropped, gaps held until they fill or time out), the declared
sensor range (``valid_range``: readings outside rejected or clipped, `LeafIntake.screen`),
the reject counters, and the estimator update (`LeafIntake.apply`) with the usual gap between
readings the idle decision stretches to. No I/O, no clock (time is an argument).
"""

from __future__ import annotations

import math
from collections import Counter, deque

import numpy as np

from edge_runtime.agents.leaf.core.sequencing import SourceSequencer
from edge_runtime.fpca import FPCAEdge
from edge_runtime.topology import NodeConfig
from edge_runtime.wire import SensorReadings

__all__ = ["GAP_WEIGHT", "MAX_RANGE_EVENTS", "Applied", "Labelled", "LeafIntake", "RangeEvent"]

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

MAX_RANGE_EVENTS = 1024
"""Range events kept until the shell takes them (the oldest are dropped beyond; counted
all the same)."""


class LeafIntake:
    """The intake part of `LeafCore` (a mixin: `LeafCore` holds the attributes below).

    Attributes
    ----------
    config : NodeConfig
        The leaf's settings (``valid_range``, ``out_of_range``, ``sensor_topic``).
    sequencer : SourceSequencer
        Per-source sequence numbers: what was ingested, what is held behind a gap.
    rejected_by_source : Counter
        Rejected readings (or messages) by the source they came from.
    clipped : int
        Readings clipped into ``config.valid_range`` (``out_of_range = "clip"``).
    range_events : deque of RangeEvent
        Every block with readings outside ``config.valid_range``, for the shell to log
        (rate-limited; `take_range_events`), at most `MAX_RANGE_EVENTS`.
    """

    config: NodeConfig
    sequencer: SourceSequencer
    estimator: FPCAEdge | None
    n_features: int | None
    rejected_by_source: Counter[str]
    clipped: int
    range_events: deque[RangeEvent]
    _bounds: dict[int, tuple[np.ndarray, np.ndarray]]
    _gap_s: float
    _input_version: int

    @property
    def ingested(self) -> dict[str, int]:
        """Last sequence number applied per source."""
        return dict(self.sequencer.last)

    def take_range_events(self) -> list[RangeEvent]:
        """The range events since the last call, oldest first (the shell logs them)."""
        events = list(self.range_events)
        self.range_events.clear()
        return events

    def count_reject(self, reason: str, source: str, n: int = 1) -> None:
        """Count ``n`` rejected readings (or one message) by ``reason`` (``rejects``) and by
        the ``source`` they came from (``rejected_by_source``: a local source's id, the
        ``src`` of an MQTT payload, else the sensor topic)."""
        self.rejects[reason] += n
        self.rejected_by_source[source] += n

    def accept(self, readings: SensorReadings, now: float) -> list[np.ndarray]:
        """Sequence and `screen` ``readings``: the row blocks ready to apply, in order
        (`apply` them)."""
        return [block for block, _, _ in self.accept_labelled(readings, now)]

    def accept_labelled(
        self, readings: SensorReadings, now: float, origin: str | None = None
    ) -> list[Labelled]:
        """`accept`, each block with its source and the sequence number of its first row
        (the blocks of one offer are in sequence order and end at the source's last applied
        sequence, `SourceSequencer`; a reading `screen` drops splits a block);
        ``(block, None, None)`` for readings without one. ``origin``: what a rejected
        reading without a source is counted under (the message's topic; default the
        sensor topic)."""
        source = readings.source
        if source is None or readings.seq is None:
            labelled: list[Labelled] = [(readings.values, None, None)]
        else:
            blocks = self.sequencer.offer(source, readings.seq, readings.values, now)
            if not blocks:
                return []
            labelled = _label(blocks, source, self.sequencer.last[source])
        return self.screen(labelled, source or origin or self.config.sensor_topic or "?", now)

    def expire_labelled(self, now: float) -> list[Labelled]:
        """`expire`, labelled as `accept_labelled` when the released rows are of one
        source (the usual case), else ``(block, None, None)``."""
        before = dict(self.sequencer.last)
        blocks = self.sequencer.expire(now)
        if not blocks:
            return []
        changed = [s for s, last in self.sequencer.last.items() if before.get(s) != last]
        if len(changed) != 1:
            unlabelled: list[Labelled] = [(block, None, None) for block in blocks]
            return self.screen(unlabelled, self.config.sensor_topic or "?", now)
        labelled = _label(blocks, changed[0], self.sequencer.last[changed[0]])
        return self.screen(labelled, changed[0], now)

    def expire(self, now: float) -> list[np.ndarray]:
        """Row blocks released because a gap timed out (counted in ``gap_rows``),
        `screen`-ed."""
        return [block for block, _, _ in self.expire_labelled(now)]

    def screen(self, labelled: list[Labelled], source: str, now: float) -> list[Labelled]:
        """Check released blocks against ``config.valid_range`` (unchanged without one).

        A reading with a value outside the range is dropped (``out_of_range = "reject"``,
        counted in ``rejects["out_of_range"]``; the kept rows of a block are returned as
        runs of consecutive readings, each labelled with its first sequence number) or has
        its values clipped into the range (``"clip"``, counted in ``clipped``). A block of
        another width than per-feature bounds is dropped whole
        (``rejects["valid_range_width"]``). Dropped readings are counted under ``source``
        and stay ingested in their source's sequence. O(rows x features).
        """
        if self.config.valid_range is None:
            return labelled
        out: list[Labelled] = []
        for block, src, seq in labelled:
            out += self._screen_block(block, src, seq, source, now)
        return out

    def _range(self, n_features: int) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` for readings of ``n_features`` values (ValueError: another width)."""
        bounds = self._bounds.get(n_features)
        if bounds is None:
            found = self.config.range_bounds(n_features)
            assert found is not None  # screen runs only with a valid_range
            bounds = self._bounds[n_features] = found
        return bounds

    def _screen_block(
        self, block: np.ndarray, src: str | None, seq: int | None, source: str, now: float
    ) -> list[Labelled]:
        n, d = block.shape
        try:
            lo, hi = self._range(d)
        except ValueError as exc:
            self._dropped("valid_range_width", source, n, now, f"{exc}: {n} readings rejected")
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
        if self.config.out_of_range == "clip":
            self.clipped += n_bad
            self.range_events.append(("clipped", source, detail))
            return [(np.clip(block, lo, hi), src, seq)]
        self._dropped("out_of_range", source, n_bad, now, detail)
        kept = np.flatnonzero(~bad)
        runs = np.split(kept, np.flatnonzero(np.diff(kept) != 1) + 1) if kept.size else []
        return [
            (block[run[0] : run[-1] + 1], src, None if seq is None else seq + int(run[0]))
            for run in runs
        ]

    def _dropped(self, reason: str, source: str, n: int, now: float, detail: str) -> None:
        """``n`` readings arrived and were dropped: counted, and due to become durable."""
        self.count_reject(reason, source, n)
        self._note_input(now)
        if math.isinf(self.unpublished_since):
            self.unpublished_since = now  # a snapshot (or checkpoint) will cover them
        self.range_events.append((reason, source, detail))

    def _note_input(self, now: float) -> None:
        """Input arrived at ``now``: the usual gap between readings and ``last_input``."""
        gap = now - self.last_input
        if 0 < gap < self.policy.max_interval_s:  # a longer pause is no "usual gap"
            weight = GAP_WEIGHT if self._gap_s else 1.0  # the first gap starts the average
            self._gap_s += weight * (gap - self._gap_s)
        self.last_input = now

    def apply(self, values: np.ndarray, now: float) -> None:
        """Feed rows ``(n, n_features)`` to the estimator (numerics; thread-safe under the
        shell's lock). The first valid rows fix ``n_features``.

        Raises
        ------
        ValueError
            From the estimator's input checks (the shell counts it as a rejection).
        """
        if self.estimator is None:  # the first rows fix the width
            self.estimator = self.new_estimator(values.shape[1])
            self.n_features = values.shape[1]
        self.estimator.partial_fit(values)
        self._note_input(now)
        self._input_version += 1
        if math.isinf(self.unpublished_since):
            self.unpublished_since = now
        if math.isinf(self.last_publish):
            self.last_publish = now  # the rate limit counts from the first reading

    def ingest(self, labelled: list[Labelled], now: float) -> list[Applied]:
        """`apply` each block of ``labelled`` at ``now`` (seconds), in order; each comes back
        with the estimator's refusal (a ValueError, e.g. the first reading's width refused
        by eq. (8)) or None. Never raises for a refused block."""
        out: list[Applied] = []
        for block, src, seq in labelled:
            try:
                self.apply(block, now)
            except ValueError as exc:
                out.append((block, src, seq, exc))
            else:
                out.append((block, src, seq, None))
        return out


def _label(blocks: list[np.ndarray], source: str, last: int) -> list[Labelled]:
    """Consecutive ``blocks`` of ``source`` ending at sequence ``last``, with the sequence
    number of each block's first row."""
    seq = last - sum(len(block) for block in blocks) + 1
    out: list[Labelled] = []
    for block in blocks:
        out.append((block, source, seq))
        seq += len(block)
    return out
