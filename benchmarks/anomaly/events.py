"""Event-level metrics of a streaming detector against injected faults (`inject`).

Consecutive alarmed readings are one *alarm event* (`merge_alarms`), naming the sensor the
detector named at its first reading. A visible fault is detected when an event *starts* in
``[fault.start, onset + window]`` (`DELAY_WINDOW`, readings; starting, not overlapping, so a
detector alarming all the time detects nothing new); delay = event start - onset, at least 0.
An event on the faulty stream is true when it starts in a visible fault's span ``[start,
max(end, onset + window + 1) + TAIL)``, neutral in an invisible fault's ``[start, end +
TAIL)``, false otherwise (`classify_events`). No point adjustment (Kim et al., AAAI 2022).
``python -m benchmarks.anomaly.events`` runs the event benchmark (`event_bench`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.anomaly.inject import Fault

__all__ = ["DELAY_WINDOW", "TAIL", "AlarmEvent", "Match", "classify_events", "match_faults",
           "merge_alarms"]

#: Detection-delay window per kind, readings after the onset (inclusive): a spike must be
#: flagged at its own reading, noise within 20 readings, a CONSTANT fault within 10 of the
#: truth moving away, a drift before it ends (its 200 readings).
DELAY_WINDOW = {"short": 0, "noise": 20, "stuck_rail": 10, "stuck_zero": 10, "stuck_last": 10,
                "drift": 199}
TAIL = 10  # readings after a fault ends during which a new alarm event is still the fault's


@dataclass(frozen=True)
class AlarmEvent:
    """Consecutive alarmed readings: rows ``[start, end)``, ``sensor`` named at ``start``
    (-1 for none)."""

    start: int
    end: int
    sensor: int


@dataclass(frozen=True)
class Match:
    """A visible fault, whether it was detected, the delay in readings from its onset to
    the detecting event's start and whether that event named ``fault.sensor`` (None if
    missed)."""

    fault: Fault
    detected: bool
    delay: int | None
    identified: bool | None


def merge_alarms(alarms: np.ndarray, sensors: np.ndarray) -> list[AlarmEvent]:
    """The events, in time order, of ``alarms`` (n_samples,) bool with the suspected
    sensor per reading ``sensors`` (n_samples,) int (-1: none); rows index ``alarms``."""
    a = np.asarray(alarms, dtype=bool)
    edges = np.diff(np.concatenate([[0], a.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    return [AlarmEvent(int(s), int(e), int(sensors[s])) for s, e in zip(starts, ends, strict=True)]


def match_faults(faults: list[Fault], events: list[AlarmEvent]) -> list[Match]:
    """One `Match` per visible fault of ``faults`` (in their order): the first of the
    ``events`` (in time order, rows of the same matrix) starting in its window."""
    starts = np.array([e.start for e in events], dtype=np.int64)
    out = []
    for f in faults:
        if (onset := f.onset) is None:
            continue
        k = int(np.searchsorted(starts, f.start))
        if k < len(events) and starts[k] <= onset + DELAY_WINDOW[f.kind]:
            ev = events[k]
            out.append(Match(f, True, max(0, ev.start - onset), ev.sensor == f.sensor))
        else:
            out.append(Match(f, False, None, None))
    return out


def classify_events(events: list[AlarmEvent], faults: list[Fault]) -> tuple[int, int, int]:
    """(true, false, neutral) counts of ``events`` against ``faults`` (see the module)."""
    true_spans = [(f.start, max(f.end, f.onset + DELAY_WINDOW[f.kind] + 1) + TAIL)
                  for f in faults if f.onset is not None]
    neutral_spans = [(f.start, f.end + TAIL) for f in faults if f.onset is None]
    n_true = n_false = n_neutral = 0
    for ev in events:
        if any(lo <= ev.start < hi for lo, hi in true_spans):
            n_true += 1
        elif any(lo <= ev.start < hi for lo, hi in neutral_spans):
            n_neutral += 1
        else:
            n_false += 1
    return n_true, n_false, n_neutral


if __name__ == "__main__":
    from benchmarks.anomaly.event_bench import main

    main()
