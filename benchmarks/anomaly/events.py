"""Event-level metrics of a streaming detector against injected faults (issue 25).

Alarms are per reading; consecutive alarmed readings merge into one *alarm event*
(`merge_alarms`), whose suspected sensor is the one the detector named at its first
reading. Against the faults of `benchmarks.anomaly.inject`:

- **Detection** (`match_faults`): a visible fault is detected when an alarm event *starts*
  in ``[fault.start, onset + window]``, ``onset`` being the fault's first visible row and
  ``window`` the kind's detection-delay window (`DELAY_WINDOW`, readings). Requiring the
  event to start there (not merely to overlap) keeps a detector that alarms all the time
  from detecting everything. Delay = ``max(0, event start - onset)`` readings.
- **Identification**: the share of detected faults whose event names the faulty sensor.
- **Event precision** (`classify_events`): an alarm event on the faulty stream is true
  when it starts inside a visible fault's span ``[start, max(end, onset + window + 1) +
  TAIL)`` (``TAIL`` readings after a fault ends cover the jump back to the truth),
  neutral when it starts in an invisible fault's span ``[start, end + TAIL)``, and
  false otherwise; precision = true / (true + false).
- **Clean alarm events per device-day**: events on the same stream with no fault,
  divided by the stream's length in device-days (2,787 Motes readings of 31 s).

No point adjustment anywhere (Kim et al., AAAI 2022). ``python -m
benchmarks.anomaly.events`` runs the benchmark (`benchmarks.anomaly.event_bench`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.anomaly.inject import Fault

__all__ = [
    "DELAY_WINDOW",
    "TAIL",
    "AlarmEvent",
    "Match",
    "classify_events",
    "match_faults",
    "merge_alarms",
]

#: Detection-delay window per kind, readings after the onset (inclusive): a spike must be
#: flagged at its own reading, noise within 20 readings, a CONSTANT fault within 10 of the
#: truth moving away, a drift before it ends (its 200 readings).
DELAY_WINDOW = {
    "short": 0,
    "noise": 20,
    "stuck_rail": 10,
    "stuck_zero": 10,
    "stuck_last": 10,
    "drift": 199,
}

#: Readings after a fault ends during which a new alarm event is still the fault's.
TAIL = 10


@dataclass(frozen=True)
class AlarmEvent:
    """Consecutive alarmed readings: rows ``[start, end)``, ``sensor`` named at ``start``
    (-1 for none)."""

    start: int
    end: int
    sensor: int


@dataclass(frozen=True)
class Match:
    """A visible fault and whether (and how) it was detected.

    Attributes
    ----------
    fault : Fault
    detected : bool
    delay : int or None
        Readings from the onset to the detecting event's start (None if missed).
    identified : bool or None
        Whether the detecting event named ``fault.sensor`` (None if missed).
    """

    fault: Fault
    detected: bool
    delay: int | None
    identified: bool | None


def merge_alarms(alarms: np.ndarray, sensors: np.ndarray) -> list[AlarmEvent]:
    """Merge consecutive alarmed readings into events.

    Parameters
    ----------
    alarms : ndarray of shape (n_samples,), bool
        Alarm per reading (row).
    sensors : ndarray of shape (n_samples,), int
        Suspected sensor per reading, -1 for none.

    Returns
    -------
    list of AlarmEvent
        In time order; rows are indices into ``alarms``.
    """
    a = np.asarray(alarms, dtype=bool)
    edges = np.diff(np.concatenate([[0], a.astype(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    return [AlarmEvent(int(s), int(e), int(sensors[s])) for s, e in zip(starts, ends, strict=True)]


def _span_end(fault: Fault) -> int:
    onset = fault.onset
    assert onset is not None
    return max(fault.end, onset + DELAY_WINDOW[fault.kind] + 1) + TAIL


def match_faults(faults: list[Fault], events: list[AlarmEvent]) -> list[Match]:
    """Match each visible fault with the first alarm event starting in its window.

    Parameters
    ----------
    faults : list of Fault
        Invisible faults (``onset is None``) are skipped.
    events : list of AlarmEvent
        In time order, rows of the same matrix as the faults.

    Returns
    -------
    list of Match
        One per visible fault, in the order of ``faults``.
    """
    starts = np.array([e.start for e in events], dtype=np.int64)
    out = []
    for f in faults:
        onset = f.onset
        if onset is None:
            continue
        last = onset + DELAY_WINDOW[f.kind]
        k = int(np.searchsorted(starts, f.start))
        if k < len(events) and starts[k] <= last:
            ev = events[k]
            out.append(Match(f, True, max(0, ev.start - onset), ev.sensor == f.sensor))
        else:
            out.append(Match(f, False, None, None))
    return out


def classify_events(events: list[AlarmEvent], faults: list[Fault]) -> tuple[int, int, int]:
    """Count true, false and neutral alarm events (see the module).

    Parameters
    ----------
    events : list of AlarmEvent
    faults : list of Fault

    Returns
    -------
    (n_true, n_false, n_neutral) : tuple of int
    """
    true_spans = [(f.start, _span_end(f)) for f in faults if f.onset is not None]
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
